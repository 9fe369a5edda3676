#!/usr/bin/env python
"""LiteRT's published GPU leaderboard, reproduced: the same architectures at the same shapes through convert_for_gpu.

    .venv-zoo/bin/python scripts/leaderboard.py --record                 # every row below (tens of minutes)
    .venv-zoo/bin/python scripts/leaderboard.py --only mobilenet_v2,whisper_tiny_encoder

The leaderboard (litert-samples, benchmark/leaderboard/) times litert-community's `.tflite` files on phones with
`benchmark_model`; its GPU rows give nodes on the GPU N/M, partitions, init / first / median latency. Several
popular architectures are only partly on the GPU there. Here each architecture is built from its library's config at
the leaderboard file's input shape; which ops a graph holds, and so its GPU residency, does not depend on trained
weights. The numerics are checked against torch on weights redrawn by the zoo's rule (`--weights o1`, default:
activations of order one, like a trained network's) -- with the library's own initialisation (`--weights library`) a
deep CNN's activations drift far from a trained one's and fp16 loses them in torch itself (measured: MobileNetV2
degraded at features.11, torch in fp16 wrong too). Each is then converted twice -- plain (`patches=False`, litert-
torch as it is) and through `convert_for_gpu` with the defaults -- and the second file is timed with `benchmark`'s
fields. The published rows are docs/data/leaderboard_published.json (copied from the board's data, with its commit).
Runs in .venv-zoo (timm, torchvision, transformers). --record writes docs/data/leaderboard.json and the table in
docs/performance.md. Device: llvmpipe (software Vulkan) here -- its milliseconds are not a phone's; the N/M and the
numerics are what carries over.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "utilities"))

from litert_gpu_toolkit.core.atomic_file import write_text_atomic  # noqa: E402

RECORD = ROOT / "docs" / "data" / "leaderboard.json"
PUBLISHED = ROOT / "docs" / "data" / "leaderboard_published.json"


@dataclass(frozen=True)
class Row:
    name: str
    file: str                   # the leaderboard's file this row stands for
    what: str
    build: Callable[[], tuple]  # -> (model, example inputs tuple)


def _image(size=224):
    import torch

    return (torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0)),)


def _torchvision(name: str, size: int = 224):
    def build():
        import torchvision

        return getattr(torchvision.models, name)(weights=None).eval(), _image(size)
    return build


def _vit_b16():
    import timm

    return timm.create_model("vit_base_patch16_224", pretrained=False).eval(), _image()


def _gecko_like():
    """A text embedder the Gecko way: a BERT-base encoder, the mean of its token states under the mask, L2-normed."""
    import torch
    from transformers import BertConfig, BertModel

    class Embedder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = BertModel(BertConfig(), add_pooling_layer=False)   # 12 layers, 768 wide: ~110M parameters

        def forward(self, input_ids, attention_mask):
            states = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(states.dtype)
            pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            return torch.nn.functional.normalize(pooled, dim=-1)

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (1, 256), generator=g)
    mask = torch.ones(1, 256, dtype=torch.long)
    mask[0, 200:] = 0                                                     # a padded sentence, as users feed it
    return Embedder().eval(), (ids, mask)


def _whisper_encoder(config_kwargs: dict):
    def build():
        import torch
        from transformers import WhisperConfig
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        class Encoder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder = WhisperEncoder(WhisperConfig(**config_kwargs))

            def forward(self, input_features):
                return self.encoder(input_features).last_hidden_state

        feats = torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(0))   # 30 s of log-mel frames
        return Encoder().eval(), (feats,)
    return build


TINY = dict(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536, num_mel_bins=80)
ROWS = [
    Row("vit_b16", "vit_base_patch16_224_fp32.tflite", "timm ViT-B/16 at 224 px", _vit_b16),
    Row("gecko_like", "Gecko_256_f32.tflite", "BERT-base encoder, masked mean pooling, 256 tokens (Gecko-110m's "
        "size; Gecko itself is not available offline)", _gecko_like),
    Row("mobilenet_v2", "mobilenet_v2.tflite", "torchvision MobileNetV2 at 224 px", _torchvision("mobilenet_v2")),
    Row("whisper_tiny_encoder", "whisper_tiny_30s_f32.tflite", "Whisper-tiny's encoder on 30 s of log-mel frames",
        _whisper_encoder(TINY)),
    Row("resnet18", "resnet18.tflite", "torchvision ResNet-18 at 224 px", _torchvision("resnet18")),
    Row("mobilenet_v3_small", "mobilenet_v3_small.tflite", "torchvision MobileNetV3-Small at 224 px",
        _torchvision("mobilenet_v3_small")),
    Row("squeezenet1_1", "squeezenet1_1.tflite", "torchvision SqueezeNet 1.1 at 224 px", _torchvision("squeezenet1_1")),
    Row("shufflenet_v2_x0_5", "shufflenet_v2_x0_5.tflite", "torchvision ShuffleNetV2 x0.5 at 224 px",
        _torchvision("shufflenet_v2_x0_5")),
    Row("efficientnet_b0", "efficientnet_b0.tflite", "torchvision EfficientNet-B0 at 224 px",
        _torchvision("efficientnet_b0")),
]
BY_NAME = {r.name: r for r in ROWS}


def recorded_command(argv: list[str]) -> str:
    """The command line as the record keeps it: --keep's folder left out (where the files went changes nothing
    measured, and it is a path of this machine)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--keep":
            skip = True
        elif not arg.startswith("--keep="):
            kept.append(arg)
    return "scripts/leaderboard.py " + " ".join(kept)


def _summary(result) -> dict:
    from litert_gpu_toolkit.convert.result import _min_corr

    rep = result.report
    residency = (rep.residency or {}) if rep is not None else {}
    corr = _min_corr(rep) if rep is not None else -1.0          # -1: no GPU output was compared
    return {"verdict": result.verdict, "residency": residency.get("line"), "gpu_ops": residency.get("gpu_ops"),
            "total_ops": residency.get("total_ops"), "partitions": residency.get("partitions"),
            "min_corr": round(corr, 6) if corr > -1 else None,
            "rewrites": result.kept, "rejected": sorted({u["op"] for u in (rep.unsupported_ops or [])})
            if rep is not None else []}


def measure(row: Row, work: Path, runs: int, warmup: int, weights: str) -> dict:
    import torch

    from litert_gpu_toolkit import convert_for_gpu
    from litert_gpu_toolkit.cli.benchmark import benchmark_file

    torch.manual_seed(0)
    from litert_zoo.weights import redraw_weights

    model, args = row.build()
    redraw_weights(model, activations=weights)
    params = sum(p.numel() for p in model.parameters())
    out = {"what": row.what, "file": row.file, "params": params, "weights": weights}
    t0 = time.perf_counter()
    plain = convert_for_gpu(model, args, work / f"{row.name}_plain.tflite", patches=False, fallback=False,
                            diagnose_budget_s=0)          # residency of litert-torch as it is
    out["plain"] = {**_summary(plain), "seconds": round(time.perf_counter() - t0, 1)}
    t0 = time.perf_counter()
    ours = convert_for_gpu(model, args, work / f"{row.name}.tflite", diagnose_budget_s=120)
    out["ours"] = {**_summary(ours), "seconds": round(time.perf_counter() - t0, 1)}
    if ours.path is not None and ours.verdict == "PASS":
        bench = benchmark_file(Path(ours.path), runs=runs, warmup=warmup, accelerator="gpu", fp32=False, inputs=None,
                               runtime=None, timeout=1800)
        out["benchmark"] = {k: bench[k] for k in ("nodes_delegated", "nodes_total", "partitions", "latency_ms",
                                                  "runs", "device", "runtime_version", "model_size_mb", "status")}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="", help=f"comma-separated rows ({', '.join(BY_NAME)})")
    p.add_argument("--runs", type=int, default=10, help="timed steady runs per file (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="runs after the first, left out (default 2)")
    p.add_argument("--weights", choices=("o1", "library"), default="o1",
                   help="o1: the zoo's redraw, activations of order one (default); library: as initialised")
    p.add_argument("--keep", type=Path, help="keep the .tflite files in this folder (default: a temporary one)")
    p.add_argument("--record", action="store_true", help=f"merge into {RECORD.relative_to(ROOT)} and the docs")
    args = p.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(BY_NAME)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        p.error(f"unknown rows: {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")                     # nothing is downloaded
    sys.path.insert(0, str(ROOT / "zoo"))
    from litert_zoo.build import install_torchvision_placeholders   # torchvision beside the CPU torch (zoo/setup.sh)

    install_torchvision_placeholders()
    data = json.loads(RECORD.read_text()) if RECORD.exists() and args.record else {"rows": {}}
    with tempfile.TemporaryDirectory(prefix="leaderboard_") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for i, name in enumerate(names, 1):
            print(f"[{i}/{len(names)}] {name}: {BY_NAME[name].what}", flush=True)
            try:
                found = measure(BY_NAME[name], work, args.runs, args.warmup, args.weights)
            except Exception as exc:   # noqa: BLE001 - a row that cannot be built is that row's result
                found = {"what": BY_NAME[name].what, "file": BY_NAME[name].file,
                         "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            found["date"] = f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d}"
            found["command"] = recorded_command(argv if argv is not None else sys.argv[1:])
            data["rows"][name] = found
            print(f"  plain {found.get('plain', {}).get('verdict')} {found.get('plain', {}).get('residency')}; "
                  f"convert_for_gpu {found.get('ours', {}).get('verdict')} {found.get('ours', {}).get('residency')} "
                  f"corr {found.get('ours', {}).get('min_corr')} {found.get('error', '')}", flush=True)
            if args.record:
                data.pop("command", None)          # each row names the command that measured it
                write_text_atomic(RECORD, json.dumps(data, indent=1, sort_keys=True) + "\n")
    if args.record:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py")], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
