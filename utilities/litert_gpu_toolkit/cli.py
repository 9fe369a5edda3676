"""Command line: `python -m litert_gpu_toolkit <command> ...`, the `check` command, and shared argument checks.

Every command refuses a bad argument with a one-line message and exit status 2 (argparse's own
convention), reports a file it cannot read or write without a traceback, and exits 130 on Ctrl-C
after its child processes are gone. The exit statuses of all commands are listed in one place,
`EXIT_STATUS` (shown by `--help` and copied into the toolkit README).
"""
from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from pathlib import Path

EXIT_STATUS = """\
Exit status (every command):
  2    bad arguments, an unreadable / unwritable file, or (check, lint, phone run) not a readable model
  130  interrupted (Ctrl-C); the runtime child processes are killed first
  check:     0 PASS; 1 FALLBACK, COMPILE_FAIL or NUMERICS_FAIL; 2 INVALID_MODEL or unusable inputs; 3 NO_GPU
  lint:      0 no phone-only risks found; 1 findings
  bisect:    0 every boundary clean; 1 a boundary diverges (or does not run GPU-only)
  gpu-info:  0 a usable GPU; 1 the probe failed; 2 no GPU adapter
  phone:     0 done (run: the phone ran the model); 1 the phone's compile or run failed"""

# command -> (module that defines `add_arguments(parser)` and `run(args) -> int`, one-line help)
COMMANDS = {
    "check": ("litert_gpu_toolkit.cli", "prove GPU residency + numerics of a .tflite (exit 0 = PASS)"),
    "gpu-info": ("litert_gpu_toolkit.gpu_info", "probe this machine's GPU accelerator (exit 0 = usable)"),
    "bisect": ("litert_gpu_toolkit.bisect", "find the first block whose GPU output diverges from torch"),
    "lint": ("litert_gpu_toolkit.lint", "static lint for phone-only GPU walls (exit 0 = no findings)"),
    "phone": ("litert_gpu_toolkit.phone.cli", "list phones, push the on-device runner, run a model on a phone's GPU"),
    "zoo": ("litert_gpu_toolkit.zoo", "run tiny transformers architectures plain and through convert_for_gpu"),
}
EXIT_INTERRUPTED = 130


# ---------------------------------------------------------------------------------------- argument types

def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def correlation(text: str) -> float:
    """argparse type: a correlation floor in (0, 1]."""
    value = _number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1] (e.g. 0.999), got {text!r}")
    return value


def non_negative(text: str) -> float:
    """argparse type: a finite number >= 0 (a tolerance)."""
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def seed(text: str) -> int:
    """argparse type: an integer >= 0 (numpy seeds cannot be negative)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def output_path_problem(path: str | os.PathLike) -> str | None:
    """Why `path` cannot be written (checked before any work is done), or None when it can."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        return f"{p} is a directory"
    if not parent.is_dir():
        return f"the folder {parent} does not exist"
    if p.exists() and not os.access(p, os.W_OK):
        return f"{p} is not writable"
    if not p.exists() and not os.access(parent, os.W_OK | os.X_OK):
        return f"the folder {parent} is not writable" + (" (the current directory is read-only?)"
                                                           if parent == Path(".") else "")
    return None


def refuse_output_path(option: str, path: str | os.PathLike | None) -> bool:
    """Print why `path` (given as `option`) cannot be written and return True; False when it can or is unset.
    Commands call it before any work, then exit 2 on True."""
    problem = output_path_problem(path) if path and path != "-" else None
    if problem:
        print(f"error: {option} {path}: {problem}", file=sys.stderr)
    return problem is not None


def write_output(path: str | os.PathLike, text: str) -> str | None:
    """Write `text` to `path`; the error message (no traceback) when that fails, else None."""
    try:
        Path(path).write_text(text)
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}"
    return None


# ------------------------------------------------------------------------------------------ check command

def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `check` command's flags."""
    p.add_argument("model", metavar="MODEL", help="the .tflite file to check")
    p.add_argument("--json", metavar="OUT", help="also write the report as JSON to OUT ('-' = stdout, no text)")
    p.add_argument("--inputs", metavar="NPZ", help="input arrays (.npz keyed by input name or SIGNATURE/NAME); "
                                                   "default: seeded random, integer ids kept in their table's range")
    p.add_argument("--reference", metavar="NPZ", help="the source model's outputs (.npz keyed by output name or "
                                                      "SIGNATURE/NAME): CPU and GPU are compared to them too")
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
    p.add_argument("--timeout", type=seconds, default=600.0, help="seconds per compile+run child (default 600)")
    p.add_argument("--full", action="store_true", help="print every detail even when the model passes")


def run(args: argparse.Namespace) -> int:
    """Run `check`; the exit status follows the verdict (EXIT_STATUS)."""
    from .checker import EXIT_CODES, PRECISIONS, check_gpu_compatibility
    from .inputs import InputError, parse_int_range_args, parse_shape_args
    from .report import print_report

    if refuse_output_path("--json", args.json):
        return 2
    explicit_tol = args.rtol is not None or args.atol is not None
    min_corr = args.min_corr if args.min_corr is not None else (None if explicit_tol else 0.999)
    try:
        report = check_gpu_compatibility(
            args.model, inputs=args.inputs, reference=args.reference, seed=args.seed,
            shapes=parse_shape_args(args.shape), int_ranges=parse_int_range_args(args.int_range),
            min_corr=min_corr, rtol=args.rtol, atol=args.atol,
            precisions=("fp16",) if args.fp16_only else PRECISIONS, timeout=args.timeout)
    except InputError as exc:
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
    return EXIT_CODES[report.verdict]


# ------------------------------------------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m litert_gpu_toolkit", epilog=EXIT_STATUS,
                                     description="Tools for running PyTorch-converted .tflite models fully on the GPU.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        doc = importlib.import_module("litert_gpu_toolkit.checker").__doc__ if name == "check" else module.__doc__
        p = sub.add_parser(name, help=help_text, description=(doc or help_text), epilog=EXIT_STATUS,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
