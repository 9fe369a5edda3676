import pytest

from litert_gpu_toolkit.testing import require_gpu


@pytest.fixture(scope="session")
def gpu():
    """The GPU probe result; fails under LITERT_GPU_REQUIRED=1 and skips otherwise when there is no GPU."""
    return require_gpu()
