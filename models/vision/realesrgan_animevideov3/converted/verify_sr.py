#!/usr/bin/env python3
"""Run the exported Real-ESRGAN tiles on a device and compare with the torch reference.

  python verify_sr.py                      # host GPU (fp16), x4, tile 128
  python verify_sr.py --device cpu
  python verify_sr.py --device pixel8      # a phone over adb (see utilities/litert_gpu_toolkit/phone)

Prints the residency line, per-photo PSNR (GPU vs torch, stitched, clipped to [0, 1]) and max abs error,
writes artifacts/compare_<photo>.png (input | torch | device | |diff| x 50) and records the run in
results.json (here, or in --results-dir). All tiles of all photos run on one compile.
Gates: strict GPU residency N/N (GPU devices); PSNR >= 45 dB on every photo. Exit status: 0 passed, 1 a gate
failed (recorded), 2 unknown device or a missing / corrupt artifact, 3 no usable GPU (nothing recorded).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.recipe import (LATENCY_METRIC, add_model_argument, finish_verify, latency_ms, load_model,
                                       load_reference, print_failure, residency, run_on_device, strict_gates,
                                       verify_main, verify_parser)
from litert_gpu_toolkit.recipe.tiling import stitch

HERE = Path(__file__).resolve().parent

PSNR_GATE_DB = 45.0


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((np.clip(a, 0, 1) - np.clip(b, 0, 1)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)


def save_png(path: Path, image: np.ndarray, torch_out: np.ndarray, device_out: np.ndarray, label: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale = torch_out.shape[0] // image.shape[0]
    panels = [np.repeat(np.repeat(image, scale, 0), scale, 1), torch_out, device_out,
              np.clip(np.abs(torch_out - device_out) * 50, 0, 1)]
    titles = ["input (nearest x%d)" % scale, "torch", label, "|torch - device| x 50"]
    fig, axes = plt.subplots(1, 4, figsize=(16, 4.4))
    for ax, img, title in zip(axes, panels, titles):
        ax.imshow(np.clip(img, 0, 1))
        ax.set_title(title)
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main() -> int:
    parser = verify_parser(__doc__, HERE)
    parser.add_argument("--scale", type=int, default=4, choices=(2, 3, 4), help="upscale factor of the export")
    parser.add_argument("--tile", type=int, default=128, help="tile side of the export (pixels)")
    add_model_argument(parser, None, writes=False, default_text="artifacts/realesrgan_x<scale>_t<tile>.tflite")
    parser.add_argument("--ref", type=Path, default=None, metavar="NPZ",
                        help="the reference outputs to compare with (default: artifacts/ref_x<scale>_t<tile>.npz)")
    parser.add_argument("--artifacts", type=Path, default=HERE / "artifacts",
                        help="where the comparison PNGs go (default: artifacts)")
    args = parser.parse_args()

    args.model = args.model or HERE / "artifacts" / f"realesrgan_x{args.scale}_t{args.tile}.tflite"
    model_path = args.model
    info = load_model(model_path, f"export_sr.py --scale {args.scale} --tile {args.tile}")
    ref = load_reference(args.ref or HERE / "artifacts" / f"ref_x{args.scale}_t{args.tile}.npz",
                         f"dump_sr_ref.py --scale {args.scale} --tile {args.tile}")
    key, (in_name,) = info.signatures[0].key, info.signatures[0].inputs
    photos = [str(p) for p in ref["photos"]]
    counts = [len(ref[f"{name}/tiles"]) for name in photos]
    samples = [{in_name: np.ascontiguousarray(tile.transpose(2, 0, 1))[None]}
               for name in photos for tile in ref[f"{name}/tiles"]]
    print(f"{sum(counts)} tiles of {len(photos)} photo(s) through {model_path.name} on {args.device} (one compile)")
    run = run_on_device(model_path, {key: samples}, args.device)
    res = residency(info, run)
    print(res.line)
    gates = strict_gates(args.device, res)
    psnr_gate = f"PSNR >= {PSNR_GATE_DB} dB on every photo"
    metrics: dict = {}
    if not run.ok:
        print_failure(run)
        gates[psnr_gate] = False
    else:
        out_tiles = next(iter(run.outputs[key].values()))[:, 0].transpose(0, 2, 3, 1)  # (tiles, H, W, C)
        ends = np.cumsum(counts)
        args.artifacts.mkdir(parents=True, exist_ok=True)
        for name, count, end in zip(photos, counts, ends):
            outs, where = list(out_tiles[end - count:end]), [tuple(w) for w in ref[f"{name}/where"]]
            torch_tiles, image = ref[f"{name}/torch"], ref[f"{name}/image"]
            dev = stitch(outs, where, image.shape[:2], args.tile, args.scale)
            tor = stitch(list(torch_tiles), where, image.shape[:2], args.tile, args.scale)
            metrics[f"psnr_db_{name}"] = round(psnr(dev, tor), 2)
            metrics[f"max_abs_{name}"] = float(np.abs(np.stack(outs) - torch_tiles).max())
            save_png(args.artifacts / f"compare_{name}.png", image, tor, dev, args.device)
            print(f"{name}: PSNR {metrics[f'psnr_db_{name}']:.2f} dB, max abs {metrics[f'max_abs_{name}']:.4f}")
        metrics[LATENCY_METRIC] = latency_ms(run.run_s[key])  # per tile
        metrics["compile_s"] = round(run.compile_s or 0.0, 3)
        print(f"compile {metrics['compile_s']:.2f} s, {metrics[LATENCY_METRIC]:.0f} ms per tile (median)")
        gates[psnr_gate] = all(v >= PSNR_GATE_DB for k, v in metrics.items() if k.startswith("psnr_db_"))
    return finish_verify(args, graph=f"x{args.scale}_t{args.tile}", run=run, residency=res.line, metrics=metrics,
                         gates=gates,
                         headline=[f"psnr_db_{photos[0]}", f"max_abs_{photos[0]}", LATENCY_METRIC] if photos else [])


if __name__ == "__main__":
    sys.exit(verify_main(main))
