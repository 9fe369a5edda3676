"""Export openWakeWord's three stages (ported by hand to torch from the wheel's ONNX files) as GPU-clean graphs.

Graphs, at the fixed shapes openWakeWord streams with (one call per 80 ms of audio):
  mel        [1, 1760] samples (1280 new + 480 of context)  -> [1, 1, 8, 32] log-mel (dB, top 80 dB kept)
  embedding  [1, 76, 32, 1] mel features                    -> [1, 1, 1, 96]
  hey_jarvis [1, 16, 96] embeddings                         -> [1, 1] wake-word score
The toolkit's default exact rewrites are applied first (`apply_patches`); each graph's torch output after them is
compared with the port before it on a real input shape.

    python export_oww.py                       # all three -> artifacts/{mel,embedding,hey_jarvis}.tflite
    python export_oww.py --graph mel
"""
from __future__ import annotations

import sys
from pathlib import Path

from litert_gpu_toolkit.recipe import add_model_argument, add_weights_argument, finish_export, script_parser

HERE = Path(__file__).resolve().parent
WEIGHTS = "the openwakeword wheel's resources/models folder; or a folder with the same .onnx files"
WALLS = ("GATHER_ND", "SPLIT", "SELECT", "SELECT_V2", "BROADCAST_TO", "IF", "RELU_0_TO_1")
# graph name -> (ONNX stem, example input shape)
STAGES = {"mel": ("melspectrogram", (1, 1760)), "embedding": ("embedding_model", (1, 76, 32, 1)),
          "hey_jarvis": ("hey_jarvis_v0.1", (1, 16, 96))}


def main(argv=None) -> int:
    parser = script_parser(__doc__)
    add_weights_argument(parser, WEIGHTS)
    add_model_argument(parser, HERE / "artifacts", writes=True)
    parser.add_argument("--graph", nargs="+", choices=tuple(STAGES), default=list(STAGES),
                        help="which stages to export (default: all three)")
    args = parser.parse_args(argv)
    out_dir = args.model

    import torch
    from oww import load_stage

    from litert_gpu_toolkit.lowering.export import export_tflite
    from litert_gpu_toolkit.core.model_info import read_model_info
    from litert_gpu_toolkit.rewrites.apply import apply_patches

    torch.manual_seed(0)
    for graph in args.graph:
        stem, shape = STAGES[graph]
        module = load_stage(stem, args.weights)
        example = torch.rand(shape) * (0.5 if graph == "mel" else 2.0) - (0.25 if graph == "mel" else 0.0)
        with torch.no_grad():
            before = module(example)
        for change in apply_patches(module, (example,)):
            print(f"  {graph}: rewrite {change.path or '(root)'}: {change.what}")
        with torch.no_grad():
            after = module(example)
        print(f"{graph}: rewritten vs port in torch: max |diff| = {(after - before).abs().max().item():.3g}")
        out = out_dir / f"{graph}.tflite"
        export_tflite(module, (example,), out, verbose=args.verbose or None)
        info = read_model_info(out)
        print(f"{graph}: " + ", ".join(f"{op} x{n}" for op, n in sorted(info.op_histogram().items())))
        left = [op for op in WALLS if info.has_op(op)]
        if left:
            print(f"error: GPU walls left in {out.name}: {', '.join(left)}")
            return 1
        finish_export(out, args, graph=graph)
    return 0


if __name__ == "__main__":
    sys.exit(main())
