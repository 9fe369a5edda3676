#!/usr/bin/env python3
"""Run the exported Real-ESRGAN tiles on a device and compare with the torch reference.

  python verify_sr.py                      # host GPU (fp16), x4, tile 128
  python verify_sr.py --device cpu
  python verify_sr.py --device pixel8      # a phone over adb (see utilities/litert_gpu_toolkit/phone)

Prints the residency line, per-photo PSNR (GPU vs torch, stitched, clipped to [0, 1]) and max abs error,
writes artifacts/compare_<photo>.png (input | torch | device | |diff| x 50) and records the run in
results.json. Gates: strict GPU residency N/N; PSNR >= 45 dB on every photo.
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3] / "utilities"))
from litert_gpu_toolkit.model_info import read_model_info  # noqa: E402
from litert_gpu_toolkit.recipe import (add_device_argument, report_gates, residency_line, run_on_device,  # noqa: E402
                                       write_results)
from litert_gpu_toolkit.tiling import stitch  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(parser)
    parser.add_argument("--scale", type=int, default=4, choices=(2, 3, 4))
    parser.add_argument("--tile", type=int, default=128)
    parser.add_argument("--model", type=Path, help=".tflite (default: the export for --scale/--tile)")
    args = parser.parse_args()

    model_path = args.model or HERE / "artifacts" / f"realesrgan_x{args.scale}_t{args.tile}.tflite"
    ref_path = HERE / "artifacts" / f"ref_x{args.scale}_t{args.tile}.npz"
    for p, how in ((model_path, "export_sr.py"), (ref_path, "dump_sr_ref.py")):
        if not p.exists():
            sys.exit(f"missing {p.name}: run python {how} --scale {args.scale} --tile {args.tile}")
    info = read_model_info(model_path)
    key, (in_name,) = info.signatures[0].key, info.signatures[0].inputs
    ref = np.load(ref_path)
    metrics, gates, residency, run = {}, {}, None, None
    run_times = []
    for name in [str(p) for p in ref["photos"]]:
        tiles, where, torch_tiles = ref[f"{name}/tiles"], ref[f"{name}/where"], ref[f"{name}/torch"]
        outs = []
        for i, tile in enumerate(tiles):
            x = np.ascontiguousarray(tile.transpose(2, 0, 1))[None]
            run = run_on_device(model_path, {key: {in_name: x}}, args.device)
            if residency is None:
                residency = residency_line(info, run)
                print(residency)
            if not run.ok:
                sys.exit(f"{run.status}: {run.error}\n{run.log_tail()}")
            outs.append(next(iter(run.outputs[key].values()))[0].transpose(1, 2, 0))
            run_times.append(run.run_s[key])
            print(f"\r{name}: tile {i + 1}/{len(tiles)} ({run.run_s[key]:.2f} s)", end="", flush=True)
        print()
        image = ref[f"{name}/image"]
        dev = stitch(outs, [tuple(w) for w in where], image.shape[:2], args.tile, args.scale)
        tor = stitch(list(torch_tiles), [tuple(w) for w in where], image.shape[:2], args.tile, args.scale)
        metrics[f"psnr_db_{name}"] = round(psnr(dev, tor), 2)
        metrics[f"max_abs_{name}"] = float(np.abs(np.stack(outs) - torch_tiles).max())
        save_png(HERE / "artifacts" / f"compare_{name}.png", image, tor, dev, args.device)
        print(f"{name}: PSNR {metrics[f'psnr_db_{name}']:.2f} dB, max abs {metrics[f'max_abs_{name}']:.4f}")
    metrics["tile_latency_ms_median"] = round(1e3 * float(np.median(run_times)), 1)
    if args.device != "cpu":
        gates["strict GPU residency N/N"] = run is not None and run.ok and "(strict GPU)" in (residency or "")
    gates[f"PSNR >= {PSNR_GATE_DB} dB on every photo"] = all(
        v >= PSNR_GATE_DB for k, v in metrics.items() if k.startswith("psnr_db_"))
    ok = report_gates(gates)
    write_results(HERE, graph=f"x{args.scale}_t{args.tile}", device=args.device, run=run, residency=residency,
                  metrics=metrics, gates=gates)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
