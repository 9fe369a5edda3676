#!/usr/bin/env python
"""What shape buckets cost in file size: one bucketed file against one bucket and against separate files.

    .venv/bin/python scripts/measure_buckets.py --record       # a MiniLM-size BERT (6 layers, 384 wide), 32,64,128

Saves a BERT encoder of the given size with library initialisation (sizes do not depend on trained values), then
runs `export --task feature-extraction` three ways: `--seq-len 32,64,128` (one file, a signature per length, each
bucket checked on the GPU against torch), and each length alone (`--no-check`: only the size is wanted). --record
writes docs/data/buckets.json and the line in docs/performance.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "utilities"))

from litert_gpu_toolkit.core.atomic_file import write_text_atomic  # noqa: E402

RECORD = ROOT / "docs" / "data" / "buckets.json"


def export(model: Path, out: Path, lengths: str, check: bool) -> dict:
    cmd = [sys.executable, "-m", "litert_gpu_toolkit", "export", "--model", str(model), "--task",
           "feature-extraction", "--seq-len", lengths, "-o", str(out)] + ([] if check else ["--no-check"])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"export --seq-len {lengths} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    graph = json.loads((out / "export.json").read_text())["graphs"][0]
    return {"bytes": (out / "model.tflite").stat().st_size, "verdict": graph["verdict"],
            "residency": graph.get("residency"), "min_corr_vs_torch": graph.get("min_corr_vs_torch")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="32,64,128", help="the buckets (default 32,64,128)")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=384)
    p.add_argument("--record", action="store_true", help=f"write {RECORD.relative_to(ROOT)} and the docs")
    args = p.parse_args(argv)
    import torch
    import transformers

    lengths = sorted({int(x) for x in args.lengths.split(",")})
    with tempfile.TemporaryDirectory(prefix="buckets_") as tmp:
        tmp = Path(tmp)
        torch.manual_seed(0)
        cfg = transformers.BertConfig(hidden_size=args.hidden, num_hidden_layers=args.layers,
                                      num_attention_heads=max(1, args.hidden // 64),
                                      intermediate_size=4 * args.hidden, max_position_embeddings=512)
        model = transformers.BertModel(cfg)
        model.save_pretrained(tmp / "bert")
        params = sum(p.numel() for p in model.parameters())
        print(f"BERT {args.layers} layers x {args.hidden}: {params / 1e6:.1f} M parameters", flush=True)
        bucketed = export(tmp / "bert", tmp / "bucketed", ",".join(map(str, lengths)), check=True)
        print(f"bucketed {lengths}: {bucketed}", flush=True)
        alone = {n: export(tmp / "bert", tmp / f"alone_{n}", str(n), check=False)["bytes"] for n in lengths}
        print(f"alone: {alone}", flush=True)
    result = {"command": "scripts/measure_buckets.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "date": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d}", "params": params, "lengths": lengths,
              "layers": args.layers, "hidden": args.hidden, "bucketed": bucketed, "alone_bytes": alone,
              "separate_total_bytes": sum(alone.values())}
    print(f"one bucketed file {bucketed['bytes'] / 1e6:.2f} MB; the longest bucket alone {alone[lengths[-1]] / 1e6:.2f}"
          f" MB; {len(lengths)} separate files {sum(alone.values()) / 1e6:.2f} MB")
    if args.record:
        write_text_atomic(RECORD, json.dumps(result, indent=1, sort_keys=True) + "\n")
        subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py")], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
