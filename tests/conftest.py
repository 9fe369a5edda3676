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
