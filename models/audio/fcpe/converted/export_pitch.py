"""Export FCPE (real torchfcpe weights) as one fixed-length graph: 16 kHz waveform in, pitch salience out.

The log-mel front end is inside the graph (the toolkit's conv STFT: no FFT op, no host-side spectrogram), then the
conv-only conformer and the 360-bin salience. Decoding the salience to Hz stays on the host (fcpe.decode). The
toolkit's default exact rewrites are applied first (`apply_patches`: fp16-safe LayerNorm / GroupNorm among them);
the plain graph also runs GPU-only but its fp16 output is wrong (see the README).

    python export_pitch.py                        # artifacts/pitch_48000.tflite (3 s, 301 frames)
    python export_pitch.py --samples 8000         # 0.5 s, 51 frames (what CI runs)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import add_model_argument, add_weights_argument, finish_export, script_parser

HERE = Path(__file__).resolve().parent
WEIGHTS = "the torchfcpe wheel's fcpe_c_v001.pt; or the path of a conv-only FCPE .pt checkpoint"
WALLS = ("GATHER_ND", "SPLIT", "SELECT", "SELECT_V2", "BROADCAST_TO", "RFFT2D", "COMPLEX_ABS")


def default_path(samples: int) -> Path:
    return HERE / "artifacts" / f"pitch_{samples}.tflite"


def main(argv=None) -> int:
    parser = script_parser(__doc__)
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

    from litert_gpu_toolkit.lowering.export import export_tflite
    from litert_gpu_toolkit.core.model_info import read_model_info
    from litert_gpu_toolkit.rewrites.apply import apply_patches

    model, config = load_model(args.weights)
    graph = PitchGraph(model, config["mel"]).eval()
    t = torch.arange(args.samples) / config["mel"]["sr"]
    example = (0.5 * torch.sin(2 * torch.pi * 220.0 * t))[None]
    reference = reference_salience(model, example[0].numpy(), config["mel"])
    if not args.plain:
        for change in apply_patches(graph, (example,)):
            print(f"  rewrite: {change.path or '(root)'}: {change.what}")
    with torch.no_grad():
        got = graph(example)[0].numpy()
    print(f"graph (conv STFT{'' if args.plain else ', rewrites'}) vs source (torch.stft) on a 220 Hz tone: "
          f"max |d salience| = {abs(got - reference).max():.3g}")

    start = time.perf_counter()
    export_tflite(graph, (example,), out, verbose=args.verbose or None)
    info = read_model_info(out)
    print(f"converted in {time.perf_counter() - start:.0f} s; "
          + ", ".join(f"{op} x{n}" for op, n in sorted(info.op_histogram().items())))
    left = [op for op in WALLS if info.has_op(op)]
    if left:
        print(f"error: GPU walls left in the graph: {', '.join(left)}")
        return 1
    finish_export(out, args, graph=out.stem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
