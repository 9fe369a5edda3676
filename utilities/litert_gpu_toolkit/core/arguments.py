"""Shared command-line pieces: argparse value types and the guard every command puts on its output paths.

No heavy imports here: every command's `--help` is built from these.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Sequence

from .files import same_file

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


# the shortest timeout a runtime child is given: starting it (Python, numpy, LiteRT) alone takes 2-3 s on an idle
# 2-core machine, so a shorter limit would only ever report a valid model as hung
MIN_TIMEOUT_S = 10.0


def seconds(text: str) -> float:
    """argparse type: a timeout, a finite number of seconds >= MIN_TIMEOUT_S."""
    value = _number(text)
    if value < MIN_TIMEOUT_S:
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds > 0, at least {MIN_TIMEOUT_S:g} (starting a runtime child alone takes "
            f"seconds), got {text!r}")
    return value


def positive_ints(text: str) -> tuple[int, ...]:
    """argparse type: one whole number >= 1, or several separated by commas ("32,64,128"): sorted, each once."""
    parts = [part.strip() for part in str(text).split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"not a comma-separated list of whole numbers: {text!r}")
    return tuple(sorted({positive_int(part) for part in parts}))


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (a length, a count)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (a duration, a size)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def positive_floats(text: str) -> tuple[float, ...]:
    """argparse type: one positive number, or several separated by commas ("1,2.5"): sorted, each once."""
    parts = [part.strip() for part in str(text).split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}")
    return tuple(sorted({positive_float(part) for part in parts}))


def seed(text: str) -> int:
    """argparse type: an integer >= 0 (numpy seeds cannot be negative)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def output_path_problem(path: str | os.PathLike, inputs: Sequence[str | os.PathLike | None] = ()) -> str | None:
    """Why `path` cannot be written (checked before any work is done), or None when it can.

    `inputs` are the files the same command reads: an output that is one of them -- spelled with ./ or ..,
    through a symbolic or a hard link -- would destroy it, and is refused."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    for given in inputs:
        if given and same_file(p, given):
            return (f"{p} is {given}, an input of this command: writing the report there would destroy it "
                    "(choose another name)")
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


def refuse_output_path(option: str, path: str | os.PathLike | None,
                       inputs: Sequence[str | os.PathLike | None] = ()) -> bool:
    """Print why `path` (given as `option`) cannot be written and return True; False when it can or is unset.
    `inputs`: the files the command reads (see `output_path_problem`). Commands call it before any work,
    then exit 2 on True."""
    problem = output_path_problem(path, inputs) if path and path != "-" else None
    if problem:
        print(f"error: {option} {path}: {problem}", file=sys.stderr)
    return problem is not None


def write_output(path: str | os.PathLike, text: str) -> str | None:
    """Write `text` to `path` atomically (`atomic_file`: a failed write leaves the old file whole, a symbolic
    link there is replaced, never followed); the error message (no traceback) when that fails, else None."""
    from .atomic_file import write_text_atomic

    try:
        write_text_atomic(path, text)
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}"
    return None


# the help text of every --json option: what the guard and the writer promise
JSON_OUTPUT_HELP = ("never one of this command's input files (refused, exit 2); written atomically, and a symbolic "
                    "link at OUT is replaced, not followed")


class _Verbose(argparse.Action):
    """Sets LITERT_GPU_VERBOSE=1 for this process, so every conversion it runs shows the converter's output."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from .quiet import VERBOSE_ENV

        os.environ[VERBOSE_ENV] = "1"
        setattr(namespace, self.dest, True)


def add_verbose_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action=_Verbose,
                        help="show the converter's own output live (default: it goes to a .convert.log, named on "
                             "failure; LITERT_GPU_VERBOSE=1 does the same)")
