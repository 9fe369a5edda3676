"""Shared by every test: the `gpu` fixture, and the `gpu` marker added to every test that uses it.

The fast lane is `./scripts/test.sh -m "not gpu and not slow"`: a test that asks for the GPU is in the
`gpu` lane whether or not its author remembered the marker.
"""
import sys
from pathlib import Path

import pytest

from litert_gpu_toolkit.runtime.testing import require_gpu

sys.path.insert(0, str(Path(__file__).resolve().parent))   # shared helpers: script_runner, measurements
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "zoo"))   # litert_zoo: not part of the toolkit

import measurements

# Files whose tests take minutes on CI's two cores (seconds, rounded, from CI's --durations list at stop 54).
# They are collected first: under `--dist loadfile` a long file that starts last keeps one worker busy for
# minutes after the other has finished.
LONG_FILES = {"recipes/test_smollm2.py": 560, "recipes/test_minilm.py": 400, "zoo/test_zoo.py": 230,
              "recipes/test_xfeat.py": 230, "recipes/test_hifigan.py": 200, "recipes/test_openwakeword.py": 200,
              "toolkit/test_repair.py": 180, "toolkit/test_export.py": 180, "recipes/test_mtcnn.py": 100,
              "recipes/test_smollm2_litertlm.py": 100, "recipes/test_fcpe.py": 90}
TESTS = Path(__file__).resolve().parent


def pytest_addoption(parser):
    parser.addoption(measurements.OPTION, action="store_true",
                     help="write the numbers tests measured (the `measured` fixture) into docs/data/measured.json")


@pytest.fixture(scope="session")
def measured():
    """`measured(block, row, **values)`: a number the docs quote, recorded next to the assertion on it."""
    return measurements.RECORDER


def pytest_sessionfinish(session):
    measurements.finish(session.config)


@pytest.fixture(scope="session")
def gpu():
    """The GPU probe result; fails under LITERT_GPU_REQUIRED=1 and skips otherwise when there is no GPU."""
    return require_gpu()


@pytest.hookimpl(tryfirst=True)     # before -m deselects, so "not gpu" sees the marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.gpu)
    items.sort(key=lambda item: -LONG_FILES.get(_under_tests(item), 0))    # stable: file order kept otherwise


def _under_tests(item) -> str:
    try:
        return Path(item.fspath).resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return ""
