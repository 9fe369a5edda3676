"""Quiet conversions: the converter's and its imports' output goes to a log file, the toolkit prints one line a stage.

litert-torch, torch.export, absl, oneDNN and torchao print dozens of lines (and FutureWarnings) per
conversion, from Python and from native code. `converter_output()` sends file descriptors 1 and 2
and Python's warnings to a log file while the block runs, so a user sees the toolkit's own progress
lines; when the block raises, the log's path is printed so nothing is lost. Live output instead:
`verbose=True`, or LITERT_GPU_VERBOSE=1 in the environment.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from pathlib import Path

VERBOSE_ENV = "LITERT_GPU_VERBOSE"


def verbose_from_env() -> bool:
    return os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes")


def stage(message: str) -> None:
    """One progress line of the toolkit's own (to stderr, so a script's stdout stays its own)."""
    print(f"[litert-gpu] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def converter_output(log_path: str | os.PathLike | None = None, *, verbose: bool | None = None,
                     announce: bool = True):
    """Capture everything printed inside the block into `log_path` (default: a new file in the temp folder).

    Yields the log's Path (None when verbose). A named log is kept: it is small, and it is the only record
    of what the converter said. A temp-folder log is removed when the block succeeds and kept when it
    raises. On an exception the path is printed (unless `announce` is False: the caller moves the log and
    names its final place), then the exception propagates."""
    if verbose if verbose is not None else verbose_from_env():
        yield None
        return
    temporary = log_path is None
    if temporary:
        fd, name = tempfile.mkstemp(prefix="litert_gpu_convert_", suffix=".log")
        os.close(fd)
        log_path = name
    log_path = Path(log_path)
    sys.stdout.flush()
    sys.stderr.flush()
    # Both levels: file descriptors 1 and 2 (native code, subprocesses) and sys.stdout / sys.stderr, which
    # are not fd 1 / 2 under pytest's capture or in a notebook, where Python prints would otherwise leak.
    saved = os.dup(1), os.dup(2), sys.stdout, sys.stderr
    with open(log_path, "ab") as log, open(log_path, "a", buffering=1) as text, warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda m, c, f, n, file=None, line=None: text.write(
            warnings.formatwarning(m, c, f, n, line))
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr = text
        try:
            yield log_path
        except BaseException:
            _restore(saved)
            if announce:
                stage(f"the converter's output is in {log_path}")
            raise
        finally:
            _restore(saved)
            os.close(saved[0])
            os.close(saved[1])
    if temporary:
        log_path.unlink(missing_ok=True)


def _restore(saved: tuple) -> None:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os.dup2(saved[0], 1)
    os.dup2(saved[1], 2)
    sys.stdout, sys.stderr = saved[2], saved[3]


def quiet_import_litert_torch(verbose: bool | None = None):
    """`import litert_torch` with its import-time chatter (absl, oneDNN, torchao, pytree) in a log."""
    if "litert_torch" in sys.modules:
        return sys.modules["litert_torch"]
    with converter_output(verbose=verbose):
        import litert_torch
    return litert_torch
