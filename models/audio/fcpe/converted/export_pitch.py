"""Export FCPE (real torchfcpe weights) as one fixed-length graph: 16 kHz waveform in, pitch salience out.

The log-mel front end is inside the graph (the toolkit's conv STFT: no FFT op, no host-side spectrogram), then the
conv-only conformer and the 360-bin salience. Decoding the salience to Hz stays on the host (fcpe.decode). It
goes through the toolkit's front door, `convert_for_gpu`, which finds the rewrites the graph needs (fp16-safe
LayerNorm / GroupNorm among them) and checks the file strictly GPU-only; `--plain` converts it without them (the
plain graph also runs GPU-only, but its fp16 output is wrong: see the README).

    python export_pitch.py                        # artifacts/pitch_48000.tflite (3 s, 301 frames)
    python export_pitch.py --samples 8000         # 0.5 s, 51 frames (what CI runs)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import (add_model_argument, add_quantize_argument, add_weights_argument, script_main,
                                       script_parser, WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent
WEIGHTS = "the torchfcpe wheel's fcpe_c_v001.pt; or the path of a conv-only FCPE .pt checkpoint"
WALLS = ("GATHER_ND", "SPLIT", "SELECT", "SELECT_V2", "BROADCAST_TO", "RFFT2D", "COMPLEX_ABS")


def default_path(samples: int) -> Path:
    return HERE / "artifacts" / f"pitch_{samples}.tflite"


def main(argv=None) -> int:
    parser = script_parser(__doc__)
    add_quantize_argument(parser)
    add_weights_argument(parser, WEIGHTS)
    add_model_argument(parser, None, writes=True, default_text="artifacts/pitch_<samples>.tflite")
    parser.add_argument("--samples", type=int, default=48000,
                        help="waveform samples per graph at 16 kHz (default 48000 = 3 s; at least 1024)")
    parser.add_argument("--plain", action="store_true",
                        help="skip the toolkit's rewrites (to see what the plain graph does; fails in fp16)")
    args = parser.parse_args(argv)
    if args.samples < 1024:
        parser.error("--samples must be at least 1024 (one STFT window)")
    out = args.model or default_path(args.samples)

    import torch
    from fcpe import PitchGraph, load_model, reference_salience

    from litert_gpu_toolkit import ConvertOptions
    from litert_gpu_toolkit.recipe import export_graph

    model, config = load_model(args.weights)
    graph = PitchGraph(model, config["mel"]).eval()
    t = torch.arange(args.samples) / config["mel"]["sr"]
    example = (0.5 * torch.sin(2 * torch.pi * 220.0 * t))[None]
    reference = reference_salience(model, example[0].numpy(), config["mel"])
    with torch.no_grad():
        got = graph(example)[0].numpy()
    print(f"graph (conv STFT) vs source (torch.stft) on a 220 Hz tone: max |d salience| = "
          f"{abs(got - reference).max():.3g}")

    start = time.perf_counter()
    # --plain keeps the plain file even where it is worse (that is its point); the budget for bisecting wrong
    # numbers is off because the recipe's verify judges them on real audio
    options = ConvertOptions(patches=not args.plain, diagnose_budget_s=0)
    status = export_graph(graph, (example,), out, args, graph=out.stem, options=options, walls=WALLS)
    print(f"exported in {time.perf_counter() - start:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
