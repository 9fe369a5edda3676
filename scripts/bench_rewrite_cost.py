#!/usr/bin/env python
"""What the default rewrites cost on full-size models: plain graph vs `convert_for_gpu`'s graph, side by side.

    python scripts/bench_rewrite_cost.py                 # four full-size configs; prints the table
    python scripts/bench_rewrite_cost.py --record        # also writes docs/data/rewrite_cost.json (gen_docs.py)
    python scripts/bench_rewrite_cost.py --quick --devices cpu   # tiny configs, CPU only (smoke test)

Most of the toolkit's fp16 rewrites are insurance: a LayerNorm computed in a down-scaled domain, a softmax
with its max subtracted, a channel max built from pairwise maxima. They add ops to models whose ranges
never come near fp16's limit, so their price has to be known. Each row is one Hugging Face architecture
at its full default size with random weights (the latency does not depend on the values): ViT-B/16 at
224x224, ResNet-50 at 224x224, BERT-base on 128 tokens, a 12-layer GPT-2 decoder on 128 tokens, and
EfficientNet-B0 at 224x224 (its squeeze-excite means over up to 112x112 values take `patch_safe_reductions`).

Each model is converted twice: plain (`convert_for_gpu(..., patches=False)`) and with the defaults, both
without the GPU check (the check's GPU runs would dominate the time; the timing runs compile each graph
strictly on the GPU anyway). Then, for each device, the two graphs are timed in alternation: round i times
plain, then rewritten, `--repeats` runs each in one compile; the row's ratio is the median over rounds of
(rewritten median / plain median). Pairing the two in every round keeps the machine's load out of the
ratio as far as it can be. "rejected" = that graph does not compile strictly on the GPU, so there is no
ratio there. `--record --only ROWS` measures those rows and keeps the recorded others (each row is its own
side-by-side measurement, stamped with its date).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "utilities"))
sys.path.insert(0, str(ROOT / "scripts"))

RECORD = ROOT / "docs" / "data" / "rewrite_cost.json"
DEVICES = ("cpu", "gpu")
TARGET = 1.05          # the target: median rewritten / plain latency at most this
ROWS = ("vit_b16", "resnet50", "bert_base", "gpt2_12l", "efficientnet_b0")


def _configs(quick: bool):
    """(name, build) pairs; build() -> (module returning one tensor, example inputs tuple)."""
    import torch
    import transformers as tf

    def vit():
        cfg = tf.ViTConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=2,
                           image_size=32, patch_size=8) if quick else tf.ViTConfig()
        m = tf.ViTForImageClassification(cfg)
        return _Logits(m, "pixel_values"), (torch.randn(1, 3, cfg.image_size, cfg.image_size),)

    def resnet():
        cfg = tf.ResNetConfig(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], embedding_size=16) if quick \
            else tf.ResNetConfig()
        return _Logits(tf.ResNetForImageClassification(cfg), "pixel_values"), (torch.randn(1, 3, 64 if quick else
                                                                                            224, 64 if quick else 224),)

    def bert():
        cfg = tf.BertConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=2) \
            if quick else tf.BertConfig()
        seq = 16 if quick else 128
        ids = torch.randint(1000, 2000, (1, seq))
        return _Logits(tf.BertModel(cfg, add_pooling_layer=False), "input_ids", "last_hidden_state"), (ids,)

    def gpt2():
        cfg = tf.GPT2Config(n_layer=2, n_embd=64, n_head=2) if quick else tf.GPT2Config()
        seq = 16 if quick else 128
        ids = torch.randint(1000, 2000, (1, seq))
        return _Logits(tf.GPT2LMHeadModel(cfg), "input_ids"), (ids,)

    def efficientnet():
        # B0's widths and depths; squeeze-excite over 112x112 .. 7x7 maps, the long reductions the defaults take
        cfg = tf.EfficientNetConfig(width_coefficient=1.0, depth_coefficient=1.0, image_size=224, hidden_dim=1280,
                                    dropout_rate=0.2)
        if quick:
            cfg = tf.EfficientNetConfig(width_coefficient=0.25, depth_coefficient=0.25, image_size=64,
                                        hidden_dim=320)
        return _Logits(tf.EfficientNetForImageClassification(cfg), "pixel_values"), (
            torch.randn(1, 3, cfg.image_size, cfg.image_size),)

    return list(zip(ROWS, (vit, resnet, bert, gpt2, efficientnet)))


class _Logits:
    """Calls a Hugging Face model with one keyword input and returns one output field as a tensor."""

    def __new__(cls, model, key: str, field: str = "logits"):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, x):
                return getattr(self.model(**{key: x}), field)

        return Wrapped().eval()


def _time(path: Path, feed: dict, accelerator: str, repeats: int) -> tuple[str, float | None]:
    from litert_gpu_toolkit.runtime.compiled import compile_and_run

    run = compile_and_run(path, {"serving_default": feed}, accelerator=accelerator, repeats=repeats, timeout=1800)
    if not run.ok:
        return ("rejected" if run.status == "ops_rejected" else run.status), None
    return "ok", 1000.0 * run.run_s["serving_default"]


def measure_row(name: str, build, tmp: Path, devices, rounds: int, repeats: int) -> dict:
    from litert_gpu_toolkit.convert.pipeline import convert_for_gpu
    from litert_gpu_toolkit.lowering.export import signature_inputs
    from litert_gpu_toolkit.core.model_info import read_model_info

    model, inputs = build()
    row: dict = {"model": name, "params": sum(p.numel() for p in model.parameters()),
                 "measured": time.strftime("%Y-%m-%d")}
    paths = {}
    for label, patches in (("plain", False), ("rewritten", True)):
        start = time.perf_counter()
        res = convert_for_gpu(model, inputs, tmp / f"{name}_{label}.tflite", patches=patches, check=False,
                              fallback=False, diagnose_budget_s=0)
        row[f"{label}_convert_s"] = round(time.perf_counter() - start, 1)
        row[f"{label}_timings"] = res.timings                    # where the conversion's time went, per stage
        if res.path is None:
            row[label] = {"status": "CONVERT_FAIL", "error": (res.error_line or "")[:200]}
            continue
        paths[label] = res.path
        row[label] = {"ops": read_model_info(res.path).num_ops}
        if label == "rewritten":
            row["rewrites"] = res.applied
        print(f"  {name}: {label} converted, {row[label]['ops']} ops ({row[f'{label}_convert_s']} s)", flush=True)
    feed = signature_inputs(inputs)
    for device in devices:
        samples: dict[str, list[float]] = {"plain": [], "rewritten": []}
        status = {}
        for _ in range(rounds):
            for label in ("plain", "rewritten"):
                if label not in paths or status.get(label, "ok") != "ok":
                    continue
                status[label], ms = _time(paths[label], feed, device, repeats)
                if ms is not None:
                    samples[label].append(ms)
        entry = {label: {"status": status.get(label, "no file"),
                         "ms_median": round(statistics.median(v), 2) if v else None}
                 for label, v in samples.items()}
        pairs = [r / p for p, r in zip(samples["plain"], samples["rewritten"])]
        entry["ratio"] = round(statistics.median(pairs), 3) if pairs and len(samples["plain"]) == len(
            samples["rewritten"]) else None
        entry["rounds"] = len(pairs)
        row[device] = entry
        print(f"  {name} on {device}: plain {entry['plain']}, rewritten {entry['rewritten']}, "
              f"ratio {entry['ratio']}", flush=True)
    return row


def summary(rows: list[dict]) -> dict:
    out = {}
    for device in DEVICES:
        ratios = [r[device]["ratio"] for r in rows if r.get(device, {}).get("ratio") is not None]
        out[device] = {"median_ratio": round(statistics.median(ratios), 3) if ratios else None,
                       "rows_with_ratio": len(ratios), "target": TARGET}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny configs (a smoke test; the ratios mean nothing)")
    parser.add_argument("--only", default="", help=f"comma-separated rows ({', '.join(ROWS)})")
    parser.add_argument("--devices", default="cpu,gpu", help="comma-separated: cpu, gpu (default %(default)s); "
                                                            "'none': conversion time only")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per device (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per compile in a round (default %(default)s)")
    parser.add_argument("--record", action="store_true", help=f"write {RECORD.relative_to(ROOT)} for gen_docs.py")
    parser.add_argument("--json", type=Path, default=ROOT / "artifacts" / "rewrite_cost.json",
                        help="where the rows go without --record (default: artifacts/rewrite_cost.json)")
    args = parser.parse_args(argv)
    devices = [d.strip() for d in args.devices.split(",") if d.strip() and d.strip() != "none"]
    if (not devices and args.devices != "none") or any(d not in DEVICES for d in devices):
        parser.error(f"--devices: choose from {', '.join(DEVICES)}")
    if args.rounds < 1 or args.repeats < 1:
        parser.error("--rounds and --repeats must be at least 1")
    if args.record and args.quick:
        parser.error("--record keeps full-size measurements only; drop --quick")
    only = {n.strip() for n in args.only.split(",") if n.strip()}
    unknown = only - set(ROWS)
    if unknown:
        parser.error(f"--only: unknown rows {', '.join(sorted(unknown))} (rows: {', '.join(ROWS)})")

    import torch

    torch.manual_seed(0)
    configs = _configs(args.quick)
    rows = []
    with tempfile.TemporaryDirectory(prefix="rewrite-cost-") as tmp:
        for name, build in configs:
            if only and name not in only:
                continue
            print(f"[{len(rows) + 1}] {name}", flush=True)
            rows.append(measure_row(name, build, Path(tmp), devices, args.rounds, args.repeats))
    from litert_gpu_toolkit.runtime.compiled import probe_gpu

    adapter = probe_gpu().gpu.adapter if "gpu" in devices else None
    data = {"command": "python scripts/bench_rewrite_cost.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "device": f"GPU: {adapter or 'not used'} (software Vulkan), ai-edge-litert {version('ai-edge-litert')}; "
                      f"CPU: {os.cpu_count()}-core {platform.machine()} (LiteRT CPU / XNNPACK)",
            "load_average_end": round(os.getloadavg()[0], 1), "torch": torch.__version__,
            "transformers": version("transformers"), "rounds": args.rounds, "repeats": args.repeats,
            "rows": rows, "summary": summary(rows)}
    if args.record and not devices and RECORD.exists():    # conversion time only: into the recorded rows
        recorded = json.loads(RECORD.read_text())
        for row in rows:
            for r in recorded["rows"]:
                if r["model"] == row["model"]:
                    r.update({k: v for k, v in row.items() if "convert_s" in k or k.endswith("_timings")})
        recorded["convert_command"] = data["command"]
        data = recorded
    elif args.record and only and RECORD.exists():         # keep the rows not measured now, in ROWS order
        kept = {r["model"]: r for r in json.loads(RECORD.read_text())["rows"] if r["model"] not in only}
        kept.update({r["model"]: r for r in rows})
        data["rows"] = [kept[n] for n in ROWS if n in kept]
        data["summary"] = summary(data["rows"])
    from gen_docs import render_rewrite_cost

    print(render_rewrite_cost(data))
    out = RECORD if args.record else args.json
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
