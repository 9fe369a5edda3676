#!/usr/bin/env python3
"""Export PP-OCRv4's text detector (DBNet, from rapidocr's ONNX via onnx2torch) for a fixed image size.

  python export_det.py                         # 480x640 -> artifacts/det_480x640.tflite
  python export_det.py --height 160 --width 256
  python export_det.py --plain                 # no rewrites: what the plain conversion hits (see README)

Two ops of the network do not reach the GPU as converted: the HardSigmoid of the squeeze-excite blocks lowers
to RELU_0_TO_1 (rejected by LiteRT >= 2.1.5) and the two upsampling ConvTranspose2d to TRANSPOSE_CONV version 4
(the GPU takes up to 3). The toolkit's `patch_hardsigmoid` and `patch_conv_transpose` rewrite both, exactly.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import (add_image_size_arguments, add_model_argument, add_weights_argument,
                                       check_image_size, finish_export, script_parser)

HERE = Path(__file__).resolve().parent
WEIGHTS = "ch_PP-OCRv4_det_infer.onnx in the rapidocr-onnxruntime wheel; or a path to that ONNX file"
REWRITES = ["patch_hardsigmoid", "patch_conv_transpose"]


def graph_name(height: int, width: int, plain: bool) -> str:
    return f"det_{height}x{width}{'_plain' if plain else ''}"


def main() -> int:
    parser = script_parser(__doc__)
    add_weights_argument(parser, WEIGHTS)
    add_model_argument(parser, None, writes=True, default_text="artifacts/det_<height>x<width>[_plain].tflite")
    add_image_size_arguments(parser, multiple=32)
    parser.add_argument("--plain", action="store_true",
                        help="export without the rewrites (reproduces the README's plain run)")
    args = parser.parse_args()
    check_image_size(parser, args, 32)

    import numpy as np
    import ppocr_det
    import torch

    from litert_gpu_toolkit.export import export_tflite
    from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
    from litert_gpu_toolkit.weights import WeightsError

    try:
        model = ppocr_det.load(args.weights)
    except WeightsError as exc:
        parser.exit(2, f"error: {exc}\n")
    if not args.plain:
        print("rewrites:", ", ".join(REWRITES))
        model = GpuRewriteWrapper(model, include=REWRITES)
    name = graph_name(args.height, args.width, args.plain)
    out = args.model or HERE / "artifacts" / f"{name}.tflite"
    x = torch.from_numpy(ppocr_det.preprocess(np.zeros((args.height, args.width, 3), np.uint8)))
    start = time.perf_counter()
    export_tflite(model, (x,), out)
    print(f"converted in {time.perf_counter() - start:.1f} s")
    finish_export(out, args, graph=name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
