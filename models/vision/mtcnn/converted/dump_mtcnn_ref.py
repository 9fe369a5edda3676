"""Run the torch MTCNN pipeline on the verify photos and save what it found to artifacts/mtcnn_ref.npz.

Saved per photo: final boxes, scores, landmarks, the candidate count after each stage, and the P-Net maps
(regression + probability) at every pyramid level, so verify_mtcnn.py can compare without torch networks.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.recipe import (add_ref_argument, add_weights_argument, script_main, script_parser,
                                       WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = script_parser(__doc__)
    add_weights_argument(parser, "facenet-pytorch's pnet.pt, rnet.pt, onet.pt; or a folder holding those")
    add_ref_argument(parser, HERE / "artifacts" / "mtcnn_ref.npz", writes=True)
    parser.add_argument("--photos", nargs="+", default=None, metavar="NAME",
                        help="subset of the verify photos (default: all)")
    args = parser.parse_args()

    from mtcnn import NETS, PHOTOS, detect, load_net, load_photo, torch_runners

    photos = args.photos or PHOTOS
    start = time.perf_counter()
    found = detect(
        [load_photo(p) for p in photos], *torch_runners({name: load_net(name, args.weights) for name in NETS})
    )
    print(f"torch pipeline (CPU) on {len(photos)} photos: {time.perf_counter() - start:.2f} s")
    saved = {}
    for photo, faces in zip(photos, found):
        saved.update(
            {
                f"{photo}/boxes": faces.boxes,
                f"{photo}/scores": faces.scores,
                f"{photo}/landmarks": faces.landmarks,
                f"{photo}/stage_counts": np.array(faces.stage_counts),
            }
        )
        for sig, (reg, prob) in faces.pnet_maps.items():
            saved[f"{photo}/{sig}/reg"], saved[f"{photo}/{sig}/prob"] = reg, prob
        print(
            f"{photo}: {len(faces.boxes)} face(s) {np.round(faces.boxes, 1).tolist()} scores "
            f"{np.round(faces.scores, 4).tolist()}; boxes after each stage {faces.stage_counts}"
        )
    args.ref.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.ref, photos=np.array(photos), **saved)
    print(f"wrote {args.ref}")
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
