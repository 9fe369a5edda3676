"""Other ai-edge-litert versions: side environments, the worker on an older Python API, `check --runtime`.

The older version used is 2.1.2, the oldest wheel with a GPU accelerator (the zoo's CI subset runs under it too):
it accepts RELU_0_TO_1 on the GPU (rejected from 2.1.5 on), and its Python API predates `GpuOptions` and
`get_output_tensor_details`. Its side environment is made once per machine (~60 MB from the package index) and
kept in the runtimes folder.
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from litert_gpu_toolkit.check.runtimes import RuntimeMatrix, RuntimeRow
from litert_gpu_toolkit.check.verdicts import Report
from litert_gpu_toolkit.runtime.compiled import compile_and_run
from litert_gpu_toolkit.runtime.tiny_models import PROBE_SHAPE, add_model_bytes, single_op_model_bytes
from litert_gpu_toolkit.runtime.versions import (NIGHTLY, OLDEST_WITH_GPU, PACKAGE, RuntimeVersionError, _order,
                                                 installed_version, package_of, resolve, side_runtime,
                                                 validate_version)

OLD = OLDEST_WITH_GPU


@pytest.mark.parametrize("bad, why", [("latest", "not a version number"), ("1.4.0", "predates the CompiledModel"),
                                      ("2.1", "not a version number")])
def test_a_version_that_cannot_be_used_is_refused_before_anything_runs(bad, why):
    with pytest.raises(RuntimeVersionError, match=why):
        validate_version(bad)


def test_a_development_version_comes_from_the_nightly_package_and_sorts_before_its_release():
    assert package_of("2.4.0.dev20261026") == NIGHTLY and package_of("2.3.0") == PACKAGE
    assert validate_version("2.4.0.dev20261026") == "2.4.0.dev20261026"
    ordered = sorted(["2.4.0", "2.4.0.dev20261026", "2.3.0", "2.4.0.dev20261008", "2.1.2"], key=_order)
    assert ordered == ["2.1.2", "2.3.0", "2.4.0.dev20261008", "2.4.0.dev20261026", "2.4.0"]


def test_installed_names_this_environments_version():
    assert resolve(["installed", "installed"]) == [installed_version()]


def test_a_version_pip_cannot_install_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("LITERT_GPU_RUNTIMES", str(tmp_path))
    with pytest.raises(RuntimeVersionError, match="pip could not install ai-edge-litert==9.9.9"):
        side_runtime("9.9.9")
    assert not any(tmp_path.iterdir()), "a failed environment must not be left behind to be reused"


def test_the_worker_runs_on_an_older_runtime_api():
    """The older CompiledModel takes `hardware_accel` and has no output-details call: the worker's compatibility path
    (fast lane: the CPU accelerator, no GPU needed)."""
    assert side_runtime(OLD).python.exists()
    x = np.arange(np.prod(PROBE_SHAPE), dtype=np.float32).reshape(PROBE_SHAPE)
    run = compile_and_run(add_model_bytes(), {"serving_default": {"x": x, "y": 2 * x}}, accelerator="cpu",
                          runtime=OLD)
    assert run.ok, run.error
    assert run.runtime == OLD
    np.testing.assert_array_equal(run.outputs["serving_default"]["out"], 3 * x)
    f32 = compile_and_run(add_model_bytes(), {"serving_default": {"x": x, "y": x}}, accelerator="gpu",
                          enforce_f32=True, runtime=OLD)
    assert not f32.ok and "no enforce_f32 option" in (f32.error or "")      # refused, never a silent fp16 run


def _row(version, verdict, rejected=()):
    return RuntimeRow(version, Report(model="m", verdict=verdict, summary="",
                                      unsupported_ops=[{"op": op, "reason": "Not supported"} for op in rejected]))


def test_transitions_name_where_an_ops_acceptance_changes():
    matrix = RuntimeMatrix("m", [_row("2.3.0", "FALLBACK", ["RELU_0_TO_1"]), _row("2.1.3", "PASS"),
                                 _row("2.1.5", "FALLBACK", ["RELU_0_TO_1", "CAST"]), _row("2.2.0", "NO_GPU")])
    assert matrix.transitions() == ["RELU_0_TO_1: rejected from 2.1.5 on (accepted before)",
                                    "CAST: rejected from 2.1.5 on (accepted before)",      # 2.2.0: no GPU, unknown
                                    "CAST: accepted from 2.3.0 on (rejected before)"]
    assert not matrix.ok and "| 2.1.3 | PASS |" in matrix.table()


@pytest.mark.gpu
def test_check_runtime_shows_relu_0_to_1_accepted_by_the_older_runtime_only(gpu, tmp_path):
    """The spec's runtime wall: the same one-op file is GPU-only under the oldest GPU runtime and rejected under
    2.3.0."""
    model = tmp_path / "relu01.tflite"
    model.write_bytes(single_op_model_bytes("RELU_0_TO_1", [("x", (1, 8, 8, 4), None)], [("y", (1, 8, 8, 4))]))
    out = tmp_path / "matrix.json"
    proc = subprocess.run([sys.executable, "-m", "litert_gpu_toolkit", "check", str(model), "--runtime", OLD,
                           "--json", str(out)], capture_output=True, text=True, timeout=900)
    data = json.loads(out.read_text())
    installed = data["runtimes"][installed_version()]["report"]
    old = data["runtimes"][OLD]["report"]
    assert old["verdict"] == "PASS", old["summary"]
    assert old["environment"]["ai_edge_litert"] == OLD
    assert installed_version() == "2.3.0", "the pin moved: re-measure which versions accept RELU_0_TO_1"
    assert installed["verdict"] == "FALLBACK" and "RELU_0_TO_1" in [r["op"] for r in installed["unsupported_ops"]]
    assert data["transitions"] == ["RELU_0_TO_1: rejected from 2.3.0 on (accepted before)"], data["transitions"]
    assert proc.returncode != 0                              # not every version PASSes
    assert "| ai-edge-litert | verdict |" in proc.stdout and f"| {OLD} | PASS |" in proc.stdout, proc.stdout


def test_all_leaves_out_a_version_without_a_gpu_accelerator_and_names_it(monkeypatch):
    from litert_gpu_toolkit.check import runtimes
    from litert_gpu_toolkit.runtime import versions

    def prepare(version, progress=None):
        raise RuntimeVersionError(f"ai-edge-litert {version}'s wheel has no GPU accelerator library")

    monkeypatch.setattr(versions, "prepare", prepare)
    monkeypatch.setattr(runtimes, "check_gpu_compatibility", lambda model, **kw: Report("m", "PASS", ""))
    matrix = runtimes.runtime_matrix("m.tflite", ["2.0.2"], skip_unusable=True)
    assert [r.version for r in matrix.rows] == [installed_version()] and "no GPU accelerator" in matrix.skipped["2.0.2"]
    with pytest.raises(RuntimeVersionError):                 # named explicitly, it is the caller's error
        runtimes.runtime_matrix("m.tflite", ["2.0.2"])


def test_litert_gpu_runtime_picks_the_version_for_every_run_of_a_process(monkeypatch):
    monkeypatch.setenv("LITERT_GPU_RUNTIME", OLD)
    x = np.ones(PROBE_SHAPE, dtype=np.float32)
    run = compile_and_run(add_model_bytes(), {"serving_default": {"x": x, "y": x}}, accelerator="cpu")
    assert run.ok and run.runtime == OLD, run.error
    monkeypatch.setenv("LITERT_GPU_RUNTIME", installed_version())
    assert compile_and_run(add_model_bytes(), {"serving_default": {"x": x, "y": x}}, accelerator="cpu").runtime is None


def test_an_older_runtimes_cpu_refusing_the_graph_falls_back_to_the_installed_cpu(monkeypatch):
    """2.1.x's CPU (XNNPACK) can refuse to prepare a graph its GPU runs ("failed to reshape runtime"): the file is
    valid when the installed runtime's CPU runs it, so that run becomes the reference and a warning says so --
    the GPU verdict under the old version no longer stops at INVALID_MODEL."""
    import time

    from litert_gpu_toolkit.check import steps
    from litert_gpu_toolkit.check.verdicts import Report, Tolerance
    from litert_gpu_toolkit.runtime.compiled import STATUS_OK, STATUS_RUN_ERROR, RunResult

    out = {"serving_default": {"out": np.ones(3, np.float32)}}
    asked = []

    def fake(model, feeds, *, accelerator, enforce_f32=False, timeout=0, runtime=None, **kw):
        asked.append(runtime)
        if runtime == OLD:
            return RunResult(STATUS_RUN_ERROR, accelerator, enforce_f32, error="XNNPack failed to reshape runtime")
        return RunResult(STATUS_OK, accelerator, enforce_f32, outputs=out)

    monkeypatch.setattr(steps, "compile_and_run", fake)
    ctx = steps._Context(b"m", "m", Report(model="m", verdict="INVALID_MODEL", summary=""), Tolerance(), ("fp16",),
                         60.0, time.perf_counter(), runtime=OLD)
    cpu = steps._step_cpu_reference(ctx, steps.PreparedInputs({"serving_default": {}}, [], {}))
    assert cpu.ok and cpu.outputs is out and asked == [OLD, installed_version()]
    assert ctx.runs["cpu"] is cpu and f"ai-edge-litert {OLD}'s CPU could not run the model" in ctx.report.warnings[0]
    ctx.runtime = None                                   # the installed runtime's own CPU failure stays fatal
    monkeypatch.setattr(steps, "compile_and_run", lambda *a, **k: RunResult(STATUS_RUN_ERROR, "cpu", False, error="x"))
    with pytest.raises(steps._Verdict):
        steps._step_cpu_reference(ctx, steps.PreparedInputs({"serving_default": {}}, [], {}))
