"""Check a .tflite on the GPU: does every op run there (strict GPU-only compile), and are the numbers right?

Steps, each timed in the report: static (read the flatbuffer), inputs (seeded random, integer ids kept in
range, or your .npz), cpu (LiteRT CPU: the fp32 reference), gpu_fp16 (strict GPU-only, the phone's default
precision), gpu_fp32 (strict GPU-only with enforce_f32: tells fp16 range trouble from wrong kernels), and,
only when the strict compile fails, a GPU+CPU fallback run so the numbers are still checked. Every compile
runs in a child process: a native crash or hang becomes part of the report.

Verdicts: PASS, FALLBACK (runs only with CPU fallback), COMPILE_FAIL, NUMERICS_FAIL (nonfinite, all_zero or
degraded), NO_GPU, INVALID_MODEL. Default tolerance: finite where the CPU is, not all-zero, correlation
>= 0.999; --rtol / --atol add an elementwise test.

--runtime VERSION (repeatable; `all`: every ai-edge-litert version pip's index lists from 2.0.0 on) checks the
file under those runtime versions too: each in a side environment made on first use and kept (numpy and that
ai-edge-litert only; LITERT_GPU_RUNTIMES sets the folder; with `all`, a version whose wheel has no GPU accelerator
is named and left out), with the same inputs, compared with the installed
runtime's CPU outputs (or --reference). It prints the installed runtime's report, then a matrix -- per version the
verdict, residency, lowest fp16 correlation and rejected ops -- and where an op's acceptance changes between
versions. Exit status then: 0 when every version PASSes, else that of the first version (installed first) that
does not.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core.arguments import (JSON_OUTPUT_HELP, correlation, non_negative, refuse_output_path, seconds, seed,
                              write_output)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `check` command's flags."""
    p.add_argument("model", metavar="MODEL", help="the .tflite file to check")
    p.add_argument("--json", metavar="OUT", help="also write the report as JSON to OUT ('-' = stdout, no text); "
                                                 + JSON_OUTPUT_HELP)
    p.add_argument("--inputs", metavar="NPZ", help="input arrays (.npz keyed by input name or SIGNATURE/NAME), each "
                                                   "of the signature's dtype (never cast) and without NaN; default: "
                                                   "seeded random, integer ids kept in their table's range")
    p.add_argument("--reference", metavar="NPZ", help="the source model's outputs (.npz keyed by output name or "
                                                      "SIGNATURE/NAME; no NaN): CPU and GPU are compared to them too")
    p.add_argument("--min-corr", type=correlation, default=None, metavar="C",
                   help="minimum Pearson correlation, in (0, 1] (default 0.999 unless --rtol/--atol given)")
    p.add_argument("--rtol", type=non_negative, default=None, help="relative tolerance (>= 0) for an elementwise "
                                                                   "allclose test")
    p.add_argument("--atol", type=non_negative, default=None, help="absolute tolerance (>= 0) for an elementwise "
                                                                   "allclose test")
    p.add_argument("--seed", type=seed, default=0, help="seed (>= 0) of the random inputs (default 0)")
    p.add_argument("--shape", action="append", metavar="NAME=D0,D1,...",
                   help="shape of a dynamic input (repeatable; dynamic dims default to 1)")
    p.add_argument("--int-range", action="append", metavar="NAME=LOW:HIGH",
                   help="value range [LOW, HIGH) of an integer input (repeatable; default: from the graph)")
    p.add_argument("--fp16-only", action="store_true", help="skip the fp32 (enforce_f32) GPU run")
    p.add_argument("--timeout", type=seconds, default=600.0,
                   help="seconds per compile+run child, at least 10 (default 600)")
    p.add_argument("--full", action="store_true", help="print every detail even when the model passes")
    p.add_argument("--runtime", action="append", metavar="VERSION",
                   help="also check under this ai-edge-litert version (repeatable; 'all' = every listed version "
                        "from 2.0.0); see above")
    p.add_argument("--explorer", metavar="DIR", help="also write DIR/<model>.residency.json, Model Explorer node "
                                                     "data (per op: GPU, or CPU with the GPU's reason), and print "
                                                     "the command that opens the graph with it")


def run(args: argparse.Namespace) -> int:
    """Run `check`; the exit status follows the verdict (EXIT_STATUS)."""
    from ..check.checker import EXIT_CODES, PRECISIONS, check_gpu_compatibility
    from ..core.inputs import InputError, parse_int_range_args, parse_shape_args
    from ..check.report import print_report
    from ..runtime.versions import RuntimeVersionError

    if refuse_output_path("--json", args.json, inputs=(args.model, args.inputs, args.reference)):
        return 2
    explicit_tol = args.rtol is not None or args.atol is not None
    min_corr = args.min_corr if args.min_corr is not None else (None if explicit_tol else 0.999)
    try:
        kwargs = dict(inputs=args.inputs, reference=args.reference, seed=args.seed,
                      shapes=parse_shape_args(args.shape), int_ranges=parse_int_range_args(args.int_range),
                      min_corr=min_corr, rtol=args.rtol, atol=args.atol,
                      precisions=("fp16",) if args.fp16_only else PRECISIONS, timeout=args.timeout)
        if args.runtime:
            return _run_matrix(args, kwargs)
        report = check_gpu_compatibility(args.model, **kwargs)
    except (InputError, RuntimeVersionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json == "-":
        print(report.to_json())
    else:
        print_report(report, full=args.full)
        if args.json:
            problem = write_output(args.json, report.to_json() + "\n")
            if problem:  # the verdict stands; the report just could not be saved
                print(f"error: {problem}", file=sys.stderr)
            else:
                print(f"report written to {args.json}")
    if args.explorer and report.verdict != "INVALID_MODEL":
        _write_explorer(args.model, report, args.explorer, sys.stderr if args.json == "-" else sys.stdout)
    return EXIT_CODES[report.verdict]


def _run_matrix(args: argparse.Namespace, kwargs: dict) -> int:
    """check --runtime: the installed runtime's report, then the matrix over the versions asked for."""
    import json

    from ..check.checker import EXIT_CODES
    from ..check.report import print_report
    from ..check.runtimes import runtime_matrix
    from ..runtime.versions import resolve

    quiet = args.json == "-"
    def say(text: str) -> None:                   # progress: on stderr when stdout carries the JSON
        print(text, file=sys.stderr if quiet else sys.stdout, flush=True)
    matrix = runtime_matrix(args.model, resolve(args.runtime), progress=say, skip_unusable="all" in args.runtime,
                            **kwargs)
    text = json.dumps(matrix.to_dict(), indent=1, default=str)
    if quiet:
        print(text)
    else:
        print_report(matrix.rows[0].report, full=args.full)
        print(f"\nai-edge-litert versions ({matrix.rows[0].report.environment.get('gpu_adapter') or 'no GPU'}):")
        print(matrix.table())
        for line in matrix.transitions():
            print(f"  {line}")
        for version, why in matrix.skipped.items():
            print(f"  {version}: not checked: {why}")
        for row in matrix.rows[1:]:
            for warning in row.report.warnings:
                print(f"  {row.version}: {warning}")
        if args.json:
            problem = write_output(args.json, text + "\n")
            print(f"error: {problem}" if problem else f"matrix written to {args.json}",
                  file=sys.stderr if problem else sys.stdout)
    failing = next((r for r in matrix.rows if r.report.verdict != "PASS"), None)
    return 0 if failing is None else EXIT_CODES[failing.report.verdict]


def _write_explorer(model: str, report, folder: str, stream) -> None:
    from ..check.explorer import explorer_command, residency_overlay, write_overlay

    try:
        path = write_overlay(folder, f"{Path(model).stem}.residency", residency_overlay(model, report))
    except OSError as exc:  # the verdict stands; only the overlay is missing
        print(f"error: cannot write the Model Explorer overlay in {folder}: {exc}", file=sys.stderr)
        return
    print(f"Model Explorer overlay: {path}\n  open it with: {explorer_command(model, [path])}",
          file=stream)
