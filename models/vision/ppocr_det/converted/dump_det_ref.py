#!/usr/bin/env python3
"""Reference probability maps and text boxes from the torch detector on real images.

Images: `rendered` (three lines of text Pillow draws on a textured page) and scikit-image photos (`coffee` has
lettering on the cup), each resized to the export's size. The torch network's probability map and the boxes
the host post-processing finds in it are saved, so verify compares the device's map and boxes with them.

  python dump_det_ref.py                       # 480x640 -> artifacts/det_480x640_ref.npz
  python dump_det_ref.py --height 160 --width 256 --images rendered
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.recipe import (add_image_size_arguments, add_weights_argument, check_image_size,
                                       save_reference, script_main, script_parser, WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent
WEIGHTS = "ch_PP-OCRv4_det_infer.onnx in the rapidocr-onnxruntime wheel; or a path to that ONNX file"
IMAGES = ("rendered", "coffee")


def main() -> int:
    parser = script_parser(__doc__)
    add_weights_argument(parser, WEIGHTS)
    parser.add_argument("--ref", type=Path, default=None, metavar="NPZ",
                        help="the reference .npz to write (default: artifacts/det_<height>x<width>_ref.npz)")
    add_image_size_arguments(parser)
    parser.add_argument("--images", nargs="+", default=list(IMAGES), metavar="NAME",
                        help=f"'rendered' or scikit-image photo names (default: {' '.join(IMAGES)})")
    args = parser.parse_args()
    check_image_size(parser, args, 32)

    import ppocr_det
    import torch

    from litert_gpu_toolkit.core.weights import WeightsError

    try:
        model = ppocr_det.load(args.weights)
    except WeightsError as exc:
        parser.exit(2, f"error: {exc}\n")
    record: dict = {"images": np.array(args.images), "size": np.array([args.height, args.width])}
    for name in args.images:
        try:
            img = ppocr_det.image(name, args.height, args.width)
        except AttributeError:
            parser.exit(2, f"error: unknown image {name!r} (not 'rendered' nor a scikit-image photo)\n")
        x = ppocr_det.preprocess(img)
        with torch.no_grad():
            prob = model(torch.from_numpy(x)).numpy()
        found = ppocr_det.boxes_from_map(prob)
        print(f"{name}: {len(found.boxes)} text box(es) from torch")
        record[f"{name}/input"], record[f"{name}/prob"] = x, prob
        record[f"{name}/boxes"], record[f"{name}/scores"] = found.boxes, found.scores
    out = args.ref or HERE / "artifacts" / f"det_{args.height}x{args.width}_ref.npz"
    save_reference(out, record)
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
