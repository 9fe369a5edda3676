"""Quantize a .tflite's weights and keep only what runs fully on the GPU with the right numbers.

Modes: fp16 (fp16 weights behind a DEQUANTIZE the GPU folds; the embedding table stays fp32, a GPU wall),
int8 (8-bit weights per output channel, on FULLY_CONNECTED / EMBEDDING_LOOKUP in the form the GPU reads;
convolutions weight-only), int4 (4-bit per channel where the GPU runs it, else int8). Built on LiteRT's quantizer
(litert-quantizer). Every FULLY_CONNECTED that reads a rank-3+ input is first moved to a rank-2 input (bit-exact):
with integer weights the GPU computes the rank-3 form wrong.

Each quantized file is checked strictly GPU-only (no CPU fallback) on the same inputs: GPU vs the source
(--reference, else the float file's CPU output) at the mode's corr floor (--min-corr; defaults: fp16 0.999, int8
0.99, int4 0.97), and GPU vs LiteRT's CPU on that file where the CPU computes the same arithmetic (not for integer
weights on the op: the CPU quantizes the activations on the fly, the GPU does not). A weight type or layer whose
quantized form fails stays float, found by checking each type alone and adding its layers in halving chunks; the
result says which and why in one line. When nothing quantized passes, OUT gets the float file and the reason is printed.

    python -m litert_gpu_toolkit quantize model.tflite --weights int8 -o model_int8.tflite
    python -m litert_gpu_toolkit quantize model.tflite --weights int4 --inputs in.npz --reference ref.npz -o m4.tflite
"""
from __future__ import annotations

import argparse
import json
import sys

from ..core.arguments import JSON_OUTPUT_HELP, correlation, refuse_output_path, seconds, seed, write_output


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..quantize.plan import MODES

    p.add_argument("model", metavar="MODEL", help="the float .tflite to quantize (read, never written)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="the .tflite to write (never MODEL)")
    p.add_argument("--weights", choices=list(MODES), default="int8", help="the weights' mode (default int8)")
    p.add_argument("--inputs", metavar="NPZ", help="input arrays (.npz keyed by input name or SIGNATURE/NAME); "
                                                   "default: seeded random, integer ids kept in range")
    p.add_argument("--reference", metavar="NPZ", help="the source model's outputs on those inputs; default: the "
                                                      "float file's CPU output")
    p.add_argument("--min-corr", type=correlation, default=None, metavar="C",
                   help="the corr floor vs the source and vs the CPU (default: per mode, see above)")
    p.add_argument("--budget", type=seconds, default=900.0, metavar="S",
                   help="seconds the per-layer search may spend (default 900)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--json", metavar="OUT", help="also write the result as JSON ('-' = stdout, no text); "
                                                 + JSON_OUTPUT_HELP)


def run(args: argparse.Namespace) -> int:
    """0: the quantized file passed (some layers may have stayed float); 1: nothing quantized passed (OUT is the
    float file); 2: bad arguments or files; 3: no GPU to check on (OUT is the float file)."""
    from ..core.inputs import InputError
    from ..core.model_info import InvalidModelError
    from ..quantize.gpu import quantize_for_gpu

    if refuse_output_path("-o", args.output, inputs=(args.model, args.inputs, args.reference)) or \
            refuse_output_path("--json", args.json, inputs=(args.model, args.inputs, args.reference, args.output)):
        return 2
    try:
        result = quantize_for_gpu(args.model, args.output, args.weights, inputs=args.inputs,
                                  reference=args.reference, min_corr=args.min_corr, budget_s=args.budget,
                                  seed=args.seed)
    except (InputError, InvalidModelError, ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result.to_dict(), indent=1, default=str) + "\n"
    if args.json == "-":
        print(text, end="")
    else:
        print(result.summary())
        print(f"written: {args.output}")
        if args.json:
            problem = write_output(args.json, text)
            print(f"error: {problem}" if problem else f"result written to {args.json}",
                  file=sys.stderr if problem else sys.stdout)
    return 0 if result.ok else 3 if result.no_gpu else 1
