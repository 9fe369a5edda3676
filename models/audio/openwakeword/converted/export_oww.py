"""Export openWakeWord's three stages (ported by hand to torch from the wheel's ONNX files) as GPU-clean graphs.

Graphs, at the fixed shapes openWakeWord streams with (one call per 80 ms of audio):
  mel        [1, 1760] samples (1280 new + 480 of context)  -> [1, 1, 8, 32] log-mel (dB, top 80 dB kept)
  embedding  [1, 76, 32, 1] mel features                    -> [1, 1, 1, 96]
  hey_jarvis [1, 16, 96] embeddings                         -> [1, 1] wake-word score
Each graph goes through the toolkit's front door, `convert_for_gpu`: the rewrites it finds, the conversion, and a
strict GPU-only check of the file against the port in torch.

    python export_oww.py                       # all three -> artifacts/{mel,embedding,hey_jarvis}.tflite
    python export_oww.py --graph mel
"""
from __future__ import annotations

import sys
from pathlib import Path

from litert_gpu_toolkit.recipe import (add_model_argument, add_quantize_argument, add_weights_argument, script_main,
                                       script_parser, WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent
WEIGHTS = "the openwakeword wheel's resources/models folder; or a folder with the same .onnx files"
WALLS = ("GATHER_ND", "SPLIT", "SELECT", "SELECT_V2", "BROADCAST_TO", "IF", "RELU_0_TO_1")
# graph name -> (ONNX stem, example input shape)
STAGES = {"mel": ("melspectrogram", (1, 1760)), "embedding": ("embedding_model", (1, 76, 32, 1)),
          "hey_jarvis": ("hey_jarvis_v0.1", (1, 16, 96))}


def main(argv=None) -> int:
    parser = script_parser(__doc__)
    add_quantize_argument(parser)
    add_weights_argument(parser, WEIGHTS)
    add_model_argument(parser, HERE / "artifacts", writes=True)
    parser.add_argument("--graph", nargs="+", choices=tuple(STAGES), default=list(STAGES),
                        help="which stages to export (default: all three)")
    args = parser.parse_args(argv)
    out_dir = args.model

    import torch
    from oww import load_stage

    from litert_gpu_toolkit import ConvertOptions
    from litert_gpu_toolkit.recipe import export_graph

    torch.manual_seed(0)
    for graph in args.graph:
        stem, shape = STAGES[graph]
        module = load_stage(stem, args.weights)
        example = torch.rand(shape) * (0.5 if graph == "mel" else 2.0) - (0.25 if graph == "mel" else 0.0)
        # the mel graph's fp16 numbers are judged by the recipe's verify on real speech (it needs fp32: see the
        # README), so no time goes to bisecting them here
        status = export_graph(module, (example,), out_dir / f"{graph}.tflite", args, graph=graph, walls=WALLS,
                              options=ConvertOptions(diagnose_budget_s=0))
        if status:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
