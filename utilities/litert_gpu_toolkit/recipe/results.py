"""results.json: one record per graph and device, merged under a lock, written atomically."""
from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from ..core.atomic_file import write_text_atomic
from ..core.errors import (EXIT_FAILED, EXIT_NO_GPU, EXIT_PASSED, EXIT_USAGE, ArtifactError, DeviceError,  # noqa: F401
                     NoGpuError, RecipeError, ResultsFileError)
from ..runtime.residency import Residency, residency, residency_line, runtime_version  # noqa: F401  (recipes import them here)
from ..runtime.compiled import STATUS_NO_GPU, RunResult
from .devices import device_label, refuse_no_gpu


def git_commit(cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None



def git_dirty(cwd: Path, ignore=None) -> bool | None:
    """True when the work tree has uncommitted changes (a record made then is not fully reproducible); `ignore`
    (path from the repository root -> bool) leaves out changes that do not bear on it, e.g. the results being
    written."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return any(not (ignore and ignore(ln[3:].strip())) for ln in out.stdout.splitlines() if ln.strip())

def write_results(recipe_converted_dir: Path, *, graph: str, device: str, run: RunResult, residency: str,  # noqa: F811  (the record keeps the line)
                  metrics: dict, gates: dict[str, bool], headline: list[str] | None = None,
                  extra: dict | None = None) -> Path:
    """Merge one verify run into `<dir>/results.json` under key `<graph>@<device>`; returns the file's path.

    `headline` names the (up to three) metrics the README tables show, in order; each must be in `metrics`
    (a failed run that measured nothing may leave them out). LITERT_RESULTS_DIR overrides the folder (tests
    set it, so a test run never edits the committed records the README tables are generated from).

    Safe against the ways a results file gets lost: the merge happens under an exclusive lock on
    `results.json.lock` (two verify runs at once both land), the new file is written to a temporary file,
    fsynced and renamed over the old one (a full disk or a crash leaves the old file intact), and a
    results.json that is not valid JSON is moved aside to `results.json.corrupt-<time>` with a warning on
    stderr, never silently replaced. A run that found no GPU (status no_gpu) is refused (NoGpuError): it
    must not replace a recorded result.
    """
    if run is not None and run.status == STATUS_NO_GPU:
        refuse_no_gpu(run, device)
    headline = list(headline or [])
    missing = [k for k in headline if k not in metrics]
    if metrics and missing:
        raise ValueError(f"headline metrics {missing} are not in metrics ({sorted(metrics)})")
    target = Path(os.environ.get("LITERT_RESULTS_DIR") or recipe_converted_dir)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsFileError(f"cannot create {target}: {exc.strerror}") from None
    path = target / "results.json"
    record = {
        "graph": graph,
        "device": device,
        # a runtime other than ai-edge-litert (LiteRT-LM) names itself through extra["device_label"]
        "device_label": (extra or {}).get("device_label") or device_label(device, run),
        "residency": residency,
        "metrics": metrics,
        "headline": headline,
        "gates": gates,
        "passed": all(gates.values()),
        "date": _dt.date.today().isoformat(),
        "git_commit": git_commit(Path(recipe_converted_dir)),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "python": platform.python_version(),
        **(extra or {}),
    }
    with _locked(path):
        data = _read_results(path)
        data[f"{graph}@{device}"] = record
        _atomic_write(path, json.dumps(dict(sorted(data.items())), indent=2, sort_keys=False) + "\n")
    return path


def read_results(path: Path) -> dict:
    """The records in a results.json ({} if absent). A file that is not a JSON object raises ResultsFileError."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsFileError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ResultsFileError(f"{path} holds a {type(data).__name__}, not an object of records")
    return data


def _read_results(path: Path) -> dict:
    """read_results, but a corrupt file is moved aside (kept, named on stderr) and the merge starts empty."""
    try:
        return read_results(path)
    except ResultsFileError as exc:
        stamp = _dt.datetime.now().strftime("%Y%m%dT%H%M%S")
        aside = path.with_name(f"{path.name}.corrupt-{stamp}")
        n = 1
        while aside.exists():
            aside, n = path.with_name(f"{path.name}.corrupt-{stamp}-{n}"), n + 1
        os.replace(path, aside)
        print(f"warning: {exc}; kept it as {aside.name} (its records are NOT in the new {path.name}: "
              "restore them from that file or from git)", file=sys.stderr)
        return {}


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on the sidecar `<path>.lock` (fcntl.flock; released when the block ends)."""
    import fcntl

    lock_path = path.with_name(path.name + ".lock")
    try:
        # O_NOFOLLOW: a link planted at the lock's name must not make us create or open a file elsewhere
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ResultsFileError(f"the lock file {lock_path} is a symbolic link (to {os.readlink(lock_path)!r}); "
                                   "it is never followed: remove it") from None
        raise ResultsFileError(f"cannot open the lock file {lock_path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _atomic_write(path: Path, text: str) -> None:
    """`write_text_atomic`, with its failure worded: the old file is untouched and a ResultsFileError names why."""
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        why = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise ResultsFileError(f"could not write {path} ({why}); the previous file is unchanged") from None


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")
