"""The symptom table is the one source of truth: complete, every rewrite real, README generated from it."""
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from litert_gpu_toolkit.core.symptoms import BY_ID, SYMPTOMS, for_log, for_numeric, for_op, suggestions

ROOT = Path(__file__).resolve().parents[2]
from litert_gpu_toolkit.rewrites.registry import rewrite_modules

REWRITE_MODULES = ["litert_gpu_toolkit.rewrites." + m for m in rewrite_modules()] + \
                  ["litert_gpu_toolkit.convert.pipeline", "litert_gpu_toolkit.diagnose.bisect", "litert_gpu_toolkit"]


def resolve(name: str):
    for module_name in REWRITE_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if hasattr(module, name):
            return getattr(module, name)
    return None


def test_ids_unique_and_fields_filled():
    assert len(BY_ID) == len(SYMPTOMS)
    for s in SYMPTOMS:
        assert s.seen and s.cause and s.rewrites, s.id
        assert s.ops or s.log or s.numeric or s.id in ("masked_attention", "output_aliasing", "constant_blowup"), s.id


@pytest.mark.parametrize("name", sorted({r for s in SYMPTOMS for r in s.rewrites}))
def test_every_named_rewrite_exists(name):
    assert resolve(name) is not None, f"{name} is named in symptoms.py but not defined in the toolkit"


def test_lookups():
    assert [s.id for s in for_op("GATHER_ND")] == ["gather_nd"]
    assert "rank_gt_4" in [s.id for s in for_log("MUL: Tensor dimensions must be less than 5.")]
    assert "patch_rmsnorm" in suggestions(for_numeric("all_zero"))


def test_readme_table_is_generated_from_the_data():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_suggestions_are_narrowed_to_the_failing_op():
    abs_const = suggestions(for_log("ABS: Expected 0 const input tensor(s), but node has 1 const input(s)."))
    assert "patch_relative_position_bias" in abs_const and "patch_degenerate_softmax" not in abs_const
    div_same = suggestions(for_log("DIV: No support of few identical inputs"))
    assert "patch_degenerate_softmax" in div_same and "patch_relative_position_bias" not in div_same
    assert "patch_cumsum" in suggestions(for_op("CUMSUM"))
