#!/usr/bin/env python3
"""Latency per tile of the three PixelShuffle forms, side by side, on the GPU accelerator and the CPU.

  python bench_pixelshuffle.py [--tile 64] [--repeats 3]

Exports x4 at one tile size with PixelShuffle left to the converter (`native`), as the toolkit's rank-4
depth-to-space (`rank4`) and as a one-hot transposed conv (`convtranspose`), checks each output against
torch, and prints a markdown table (median of --repeats runs after one warm-up compile).
"""
import argparse
import platform
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
import srvgg
from export_sr import convert_options
from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.metrics import compare
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.recipe import device_label
from litert_gpu_toolkit.runtime.compiled import compile_and_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tile", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.rand(1, 3, args.tile, args.tile)
    reference = srvgg.load(4)(x).detach().numpy()
    rows, label = [], None
    for form in ("native", "rank4", "convtranspose"):
        path = HERE / "artifacts" / f"bench_{form}_t{args.tile}.tflite"
        if convert_for_gpu(srvgg.load(4), (x,), path, convert_options(form), check=False).path is None:
            rows.append(f"| {form} | conversion failed | - | - | - |")
            continue
        info = read_model_info(path)
        feed = {info.signatures[0].key: {"args_0": x.numpy()}}
        gpu = compile_and_run(path, feed, accelerator="gpu", repeats=args.repeats)
        cpu = compile_and_run(path, feed, accelerator="cpu", repeats=args.repeats)
        if not gpu.ok:
            rows.append(f"| {form} | {gpu.status} | - | - | - |")
            continue
        label = label or device_label("host-gpu", gpu)
        corr = compare(next(iter(gpu.outputs[info.signatures[0].key].values())), reference).corr
        ops = ", ".join(
            f"{k} {v}"
            for k, v in info.op_histogram().items()
            if k in ("TRANSPOSE", "RESHAPE", "TRANSPOSE_CONV", "DEPTH_TO_SPACE")
        )
        rows.append(
            f"| {form} | {1e3 * gpu.run_s[info.signatures[0].key]:.0f} | "
            f"{1e3 * cpu.run_s[info.signatures[0].key]:.0f} | {corr:.6f} | {ops} |"
        )
    print(
        f"x4, {args.tile}x{args.tile} input tile; GPU: {label}; CPU: {platform.machine()} "
        f"({torch.get_num_threads()} threads available to torch), XNNPACK\n"
    )
    print("| PixelShuffle form | GPU ms / tile | CPU ms / tile | corr vs torch (GPU fp16) | shuffle ops |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
