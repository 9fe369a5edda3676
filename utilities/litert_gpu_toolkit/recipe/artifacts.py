"""Loading a recipe's artifacts: a missing, empty or corrupt file is a user mistake naming the script that makes it."""
from __future__ import annotations

from pathlib import Path

from ..core.errors import (EXIT_FAILED, EXIT_NO_GPU, EXIT_PASSED, EXIT_USAGE, ArtifactError, DeviceError,  # noqa: F401
                     NoGpuError, RecipeError, ResultsFileError)
from ..core.model_info import InvalidModelError, ModelInfo, read_model_info
from ..runtime.residency import Residency, residency, residency_line, runtime_version  # noqa: F401  (recipes import them here)


def require_file(path: Path, how: str) -> Path:
    """`path` if it is a non-empty file; else an ArtifactError that says which script makes it."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"{path} not found: run {how} first")
    if path.stat().st_size == 0:
        raise ArtifactError(f"{path} is empty: run {how} again")
    return path


def load_model(path: Path, how: str) -> ModelInfo:
    """Read a .tflite's structure; missing, empty or corrupt -> ArtifactError naming the script that makes it."""
    require_file(path, how)
    try:
        return read_model_info(path)
    except InvalidModelError as exc:
        raise ArtifactError(f"{exc} (re-run {how})") from None


def load_reference(path: Path, how: str):
    """np.load a reference .npz; missing, empty or corrupt -> ArtifactError naming the script that makes it."""
    import zipfile

    import numpy as np

    require_file(path, how)
    try:
        data = np.load(path)
        data.files  # an .npy instead of an .npz has no .files
        return data
    except (OSError, ValueError, EOFError, AttributeError, zipfile.BadZipFile) as exc:
        raise ArtifactError(f"{path} is not a readable .npz ({type(exc).__name__}: {exc}): re-run {how}") from None


def save_reference(path: Path, arrays: dict) -> Path:
    """Write a dump script's reference arrays to `path` (.npz, its folder created) and say where; returns the path.
    Written beside and then renamed, so an interrupted dump never leaves a truncated reference behind."""
    import os

    import numpy as np

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.stem}.partial.npz")
    np.savez(partial, **{k: np.asarray(v) for k, v in arrays.items()})
    os.replace(partial, path)
    print(f"wrote {path}")
    return path
