"""`lint --runtime VERSION`: the walls a runtime version rejects or computes wrong, found in a model's graph."""
from __future__ import annotations

import subprocess
import sys

import pytest

from litert_gpu_toolkit.lint.runtime_walls import MATCHERS, UnmeasuredRuntime, load, runtime_findings, versions_needing
from litert_gpu_toolkit.runtime.tiny_models import single_op_model_bytes

SHAPE = (1, 8, 8, 4)
DATA = {"versions": ["2.1.3", "2.1.5"], "device": "llvmpipe",
        "walls": {"relu_0_to_1": {"symptom": "relu_0_to_1", "upstream": "google-ai-edge/LiteRT#8598", "what": "RELU",
                                  "results": {"2.1.3": {"class": "accepted"},
                                              "2.1.5": {"class": "rejected", "why": "Not supported op"}}},
                  "broadcast_to": {"symptom": "broadcast_to", "what": "BROADCAST_TO",
                                   "results": {"2.1.3": {"class": "rejected"}, "2.1.5": {"class": "rejected"}}}}}


def _relu01() -> bytes:
    return single_op_model_bytes("RELU_0_TO_1", [("x", SHAPE, None)], [("y", SHAPE)])


def test_a_wall_is_reported_only_for_the_versions_that_have_it():
    assert runtime_findings(_relu01(), "2.1.3", DATA) == []
    found = runtime_findings(_relu01(), "2.1.5", DATA)
    assert [(f.node, f.op, f.symptom) for f in found] == [(0, "RELU_0_TO_1", "relu_0_to_1")]
    assert "2.1.5: rejected" in found[0].why and "patch_hardsigmoid" in found[0].rewrites


def test_an_unmeasured_version_is_an_error_naming_the_measured_ones():
    with pytest.raises(UnmeasuredRuntime, match="measured: 2.1.3, 2.1.5"):
        runtime_findings(_relu01(), "2.0.9", DATA)


def test_every_measured_wall_has_a_matcher():
    assert set(load()["walls"]) <= set(MATCHERS), "a wall the lint cannot find in a graph"


def test_the_shipped_table_records_relu_0_to_1_leaving_in_2_1_5():
    """The spec's runtime wall, as scripts/runtime_walls.py measured it (llvmpipe): accepted by 2.1.3 and 2.1.4,
    rejected from 2.1.5 on."""
    results = load()["walls"]["relu_0_to_1"]["results"]
    assert results["2.1.3"]["class"] == results["2.1.4"]["class"] == "accepted"
    assert results["2.1.5"]["class"] == results["2.3.0"]["class"] == "rejected"


def test_a_rewrite_for_a_wall_of_some_versions_says_which_need_it():
    assert versions_needing("patch_hardsigmoid", DATA) == [
        "patch_hardsigmoid meets RELU: needed on ai-edge-litert 2.1.5; not on 2.1.3 (measured, docs/runtime-walls.md)"]
    assert versions_needing("patch_broadcast_to", DATA) == []        # every version measured needs it
    assert versions_needing("patch_safe_softmax", DATA) == []        # meets no wall of the suite
    shipped = versions_needing("patch_hardsigmoid")[0]             # the committed measurement
    assert "needed on ai-edge-litert 2.1.5" in shipped and "not on 2.1.2, 2.1.3, 2.1.4 " in shipped


def test_convert_result_names_the_versions_a_kept_rewrite_is_for(tmp_path):
    from litert_gpu_toolkit.convert.result import ConvertResult
    from litert_gpu_toolkit.rewrites.registry import Change

    (tmp_path / "m.tflite").write_bytes(_relu01())
    change = Change("act", "Hardsigmoid -> relu6 form", "patch_hardsigmoid", True)
    result = ConvertResult(path=tmp_path / "m.tflite", changes=[change])
    assert result.runtime_dependent and "runtime-dependent: patch_hardsigmoid meets" in result.summary()


def test_lint_runtime_on_the_command_line(tmp_path):
    model = tmp_path / "relu01.tflite"
    model.write_bytes(_relu01())
    run = [sys.executable, "-m", "litert_gpu_toolkit", "lint", str(model)]
    old = subprocess.run(run + ["--runtime", "2.1.3"], capture_output=True, text=True, timeout=120)
    new = subprocess.run(run + ["--runtime", "2.1.5"], capture_output=True, text=True, timeout=120)
    bad = subprocess.run(run + ["--runtime", "0.0.1"], capture_output=True, text=True, timeout=120)
    assert "ai-edge-litert 2.1.5: rejected" in new.stdout and new.returncode == 1, new.stdout + new.stderr
    assert "ai-edge-litert 2.1.3" not in old.stdout, old.stdout
    assert bad.returncode == 2 and "no runtime-wall measurements for ai-edge-litert 0.0.1" in bad.stderr
