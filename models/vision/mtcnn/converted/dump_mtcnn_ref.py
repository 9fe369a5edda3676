"""Run the torch MTCNN pipeline on the verify photos and save what it found to artifacts/mtcnn_ref.npz.

Saved per photo: final boxes, scores, landmarks, the candidate count after each stage, and the P-Net maps
(regression + probability) at every pyramid level, so verify_mtcnn.py can compare without torch networks.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "artifacts" / "mtcnn_ref.npz")
    parser.add_argument("--photos", nargs="+", default=None, help="subset of the verify photos (default: all)")
    parser.add_argument("--weights-dir", type=Path, default=None,
                        help="folder with pnet.pt, rnet.pt, onet.pt (default: the facenet-pytorch wheel's data/)")
    args = parser.parse_args()

    from mtcnn import NETS, PHOTOS, detect, load_net, load_photo, torch_runners

    photos = args.photos or PHOTOS
    start = time.perf_counter()
    found = detect(
        [load_photo(p) for p in photos], *torch_runners({name: load_net(name, args.weights_dir) for name in NETS})
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
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.out, photos=np.array(photos), **saved)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
