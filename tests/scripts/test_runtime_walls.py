"""scripts/runtime_walls.py: how a wall's GPU output is judged, and that every wall maps to the spec's table."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.core.symptoms import BY_ID
from litert_gpu_toolkit.lint.runtime_walls import MATCHERS

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("runtime_walls", ROOT / "scripts" / "runtime_walls.py")
runtime_walls = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = runtime_walls          # its dataclasses look their module up while being defined
spec.loader.exec_module(runtime_walls)


def test_a_one_value_output_is_judged_by_relative_error_not_correlation():
    ok, why = runtime_walls._agrees(np.array([[100.05]]), np.array([[100.0]]))
    assert ok and "max error" in why
    assert not runtime_walls._agrees(np.array([[103.0]]), np.array([[100.0]]))[0]


def test_wrong_zero_and_non_finite_outputs_fail():
    want = np.linspace(-1, 1, 64)
    assert runtime_walls._agrees(want + 1e-4, want)[0]
    assert not runtime_walls._agrees(-want, want)[0]
    assert runtime_walls._agrees(np.zeros(64), want) == (False, "all zeros")
    assert runtime_walls._agrees(np.full(64, np.inf), want) == (False, "non-finite where the CPU is finite")


def test_every_wall_names_a_known_symptom_and_has_a_lint_matcher():
    for wall in runtime_walls.WALLS:
        assert wall.symptom in BY_ID, wall.name
        assert wall.name in MATCHERS, wall.name
