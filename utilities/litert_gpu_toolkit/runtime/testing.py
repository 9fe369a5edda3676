"""Helpers for test suites (ours and yours): a GPU gate that fails in CI and skips elsewhere.

Set `LITERT_GPU_REQUIRED=1` (our `.ci/run` does) and every test that asks for the GPU fails when
no adapter is found; without it such tests skip with the reason.
"""
from __future__ import annotations

import functools
import os

from .gpu_info import describe
from .compiled import RunResult, probe_gpu

GPU_REQUIRED_ENV = "LITERT_GPU_REQUIRED"


def gpu_required() -> bool:
    return os.environ.get(GPU_REQUIRED_ENV, "").strip().lower() in ("1", "true", "yes")


@functools.lru_cache(maxsize=1)
def cached_probe() -> RunResult:
    return probe_gpu()


def require_gpu() -> RunResult:
    """Return the probe result when the GPU works; otherwise pytest-fail (CI) or pytest-skip."""
    import pytest

    result = cached_probe()
    if result.ok:
        return result
    message = describe(result)
    if gpu_required():
        pytest.fail(f"{GPU_REQUIRED_ENV}=1 and the GPU is unusable: {message}", pytrace=False)
    pytest.skip(message)
