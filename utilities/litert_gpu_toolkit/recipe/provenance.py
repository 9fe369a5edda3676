"""Provenance: which command made a .tflite, so every recorded number traces to the graph it came from.

An export script calls `write_provenance(model_path, args)` after writing the file: a sidecar
`<model>.provenance.json` beside it holds the command line, every flag, the git commit (and whether the
tree had uncommitted changes), the file's sha256, size and op count, and the converter's versions.
A verify script's record (`results.json`) copies the sidecar in; when the sidecar is missing or its
sha256 is not the file's, the record says so instead of vouching for a graph it cannot trace.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import sys
from pathlib import Path

from ..core.model_info import read_model_info
from .results import git_commit, git_dirty

SUFFIX = ".provenance.json"


def sidecar_path(model_path: str | os.PathLike) -> Path:
    model_path = Path(model_path)
    return model_path.with_name(model_path.name + SUFFIX)


def sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("torch", "litert-torch", "ai-edge-litert", "litert-quantizer"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def _flag(value, base: Path):
    """A flag's value as JSON; a path inside the recipe folder `base` relative to it, so a record committed from
    one machine names no folder of that machine."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_flag(v, base) for v in value]
    if isinstance(value, Path) and value.is_absolute():
        try:
            return value.resolve().relative_to(base).as_posix()
        except ValueError:
            return str(value)
    return str(value)


def write_provenance(model_path: str | os.PathLike, args=None, *, graph: str | None = None,
                     extra: dict | None = None) -> Path:
    """Write `<model>.provenance.json` for the file an export script just wrote; returns the sidecar's path."""
    model_path = Path(model_path)
    script_dir = Path(sys.argv[0]).resolve().parent
    record = {
        "graph": graph or model_path.stem,
        "file": model_path.name,
        "sha256": sha256(model_path),
        "bytes": model_path.stat().st_size,
        "ops": read_model_info(model_path).num_ops,
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "flags": {k: _flag(v, script_dir) for k, v in sorted(vars(args).items())} if args is not None else {},
        "git_commit": git_commit(script_dir),
        "git_dirty": git_dirty(script_dir),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": _versions(),
        **(extra or {}),
    }
    path = sidecar_path(model_path)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def read_provenance(model_path: str | os.PathLike) -> dict:
    """What a results record says about the graph it measured: the sidecar, checked against the file."""
    model_path = Path(model_path)
    actual = sha256(model_path)
    path = sidecar_path(model_path)
    if not path.exists():
        return {"file": model_path.name, "sha256": actual,
                "note": f"no {path.name}: this file was not written by a recipe's export script"}
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"file": model_path.name, "sha256": actual, "note": f"unreadable {path.name}: {exc}"}
    if record.get("sha256") != actual:
        record = {**record, "sha256_recorded": record.get("sha256"), "sha256": actual,
                  "note": f"{path.name} describes another file (sha256 differs): re-run the export"}
    return record
