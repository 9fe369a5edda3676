"""The recipe scripts' exit statuses and the errors that map to them (no imports: every layer may use these)."""
from __future__ import annotations

EXIT_PASSED = 0       # every gate passed
EXIT_FAILED = 1       # a gate failed; the run is recorded
EXIT_USAGE = 2        # a user mistake (argparse uses 2 too): unknown device, missing/corrupt artifact
EXIT_NO_GPU = 3       # a GPU device was asked for and this machine has no usable GPU; nothing recorded


class RecipeError(Exception):
    """A mistake a user can fix (bad device name, missing or corrupt file): verify scripts exit 2, no traceback."""

    exit_code = EXIT_USAGE


class DeviceError(RecipeError, ValueError):
    """The device cannot be used: unknown name, or a phone that is not reachable (`phone.PhoneError` is one)."""


class NoGpuError(DeviceError):
    """A GPU device was asked for and no GPU driver / adapter is usable here. Exit status 3; nothing is recorded."""

    exit_code = EXIT_NO_GPU


class ArtifactError(RecipeError):
    """A model or reference file is missing, empty or unreadable."""


class ResultsFileError(RecipeError):
    """results.json cannot be read or written safely."""
