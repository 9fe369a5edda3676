"""The phone's runner (phone/runner/litert_gpu_runner.cc, LiteRT's C API) compiled for this machine and run for real.

Against the Python path on the same models and inputs: CPU outputs bit-identical, GPU outputs within fp16
tolerance, the same residency line and status, rejected ops and a missing GPU reported the same way. The
hardening: names that look like paths or protocol lines bind only to themselves; a fuzz of bad manifests and
inputs, run on the ASan + UBSan build, must end in a clean exit status with a result saying why -- never a
signal, never a file outside the job's out/ folder.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from litert_gpu_toolkit.core.errors import NoGpuError
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.phone.native import SANITIZER_ENV, NativeRunnerError, build_host_runner, run_native
from litert_gpu_toolkit.phone.protocol import input_file, read_outputs, write_job
from litert_gpu_toolkit.recipe import device_label, residency, residency_line, run_on_device, strict_gates
from litert_gpu_toolkit.runtime.compiled import STATUS_NO_GPU, STATUS_OPS_REJECTED
from litert_gpu_toolkit.runtime.tiny_models import (PROBE_SHAPE, add_model_bytes, bucketed_add_model_bytes,
                                                    single_op_model_bytes)

from native_compare import compare_native_with_python

HOSTILE = ["../../a b", "b\nc \"q\" \\", "out/../../z"]


@pytest.fixture(scope="module")
def runner():
    return build_host_runner()


@pytest.fixture()
def add_model(tmp_path):
    path = tmp_path / "add.tflite"
    path.write_bytes(add_model_bytes())
    return path


@pytest.fixture()
def hostile_model(tmp_path):
    """SUB (not symmetric, so a swapped binding shows) whose input and output names look like paths and lines."""
    path = tmp_path / "sub.tflite"
    path.write_bytes(single_op_model_bytes("SUB", [(HOSTILE[0], (1, 4, 4, 2), None), (HOSTILE[1], (1, 4, 4, 2), None)],
                                          [(HOSTILE[2], (1, 4, 4, 2))]))
    return path


def _samples(n, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": (4 * rng.standard_normal(PROBE_SHAPE)).astype(np.float32),
             "y": rng.standard_normal(PROBE_SHAPE).astype(np.float32)} for _ in range(n)]


def test_build_is_idempotent(runner):
    mtime = runner.stat().st_mtime_ns
    assert build_host_runner() == runner and runner.stat().st_mtime_ns == mtime   # up to date: not rebuilt
    proc = subprocess.run([str(runner)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage: litert_gpu_runner" in proc.stderr


def test_the_runner_links_against_an_older_runtime(tmp_path):
    """Built against the oldest GPU wheel's libLiteRt.so (its side environment, the one the fast lane already
    uses): the C API calls it lacks are weak, so it links and starts; the binary lives apart from the default one."""
    from litert_gpu_toolkit.phone.native import runtime_lib_dir
    from litert_gpu_toolkit.runtime.versions import OLDEST_WITH_GPU

    assert runtime_lib_dir(OLDEST_WITH_GPU) != runtime_lib_dir()
    binary = build_host_runner(tmp_path, runtime=OLDEST_WITH_GPU)
    assert binary.parent.name == f"runtime-{OLDEST_WITH_GPU}"
    proc = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage: litert_gpu_runner" in proc.stderr


def test_native_matches_python_on_the_cpu(runner, add_model):
    report = compare_native_with_python(add_model, {"serving_default": _samples(3)}, settings=(("cpu", False),))
    assert report["cpu"]["residency"] == "CPU: 1 ops (no GPU involved)"


def test_native_matches_python_on_the_gpu(gpu, runner, add_model, hostile_model):
    x = _samples(1)[0]["x"]
    report = compare_native_with_python(add_model, {"serving_default": _samples(3)})
    assert report["gpu"]["residency"] == "GPU residency: 1/1 ops, 1 partition (strict GPU)"
    # really fp16 on the GPU: the native run differs from the exact sum, and fp32 does not
    fp16 = run_native(add_model, {"serving_default": {"x": x, "y": x / 3}})
    fp32 = run_native(add_model, {"serving_default": {"x": x, "y": x / 3}}, enforce_f32=True)
    exact = x + x / 3
    assert np.abs(fp16.outputs["serving_default"]["out"] - exact).max() > 1e-4
    np.testing.assert_allclose(fp32.outputs["serving_default"]["out"], exact, rtol=1e-6)
    hostile = compare_native_with_python(hostile_model, {"serving_default": {
        HOSTILE[1]: np.full((1, 4, 4, 2), 3, np.float32), HOSTILE[0]: np.ones((1, 4, 4, 2), np.float32)}})
    assert hostile["gpu"]["residency"] == "GPU residency: 1/1 ops, 1 partition (strict GPU)"
    print("native vs python, max |diff|:", {k: v["max_abs_diff"] for k, v in report.items()})


def test_hostile_names_bind_only_to_themselves(runner, hostile_model, tmp_path):
    a, b = np.ones((1, 4, 4, 2), np.float32), np.full((1, 4, 4, 2), 3, np.float32)
    run = run_native(hostile_model, {"serving_default": {HOSTILE[1]: b, HOSTILE[0]: a}}, accelerator="cpu")
    assert run.ok, run.error
    assert list(run.outputs["serving_default"]) == [HOSTILE[2]]
    np.testing.assert_array_equal(run.outputs["serving_default"][HOSTILE[2]], a - b)   # SUB(a, b): not b - a
    assert not any((tmp_path / part).exists() for part in ("z", "a b", "escape")), "a name reached a path"


def test_rejected_ops_are_reported_like_the_python_path(gpu, runner, tmp_path):
    model = tmp_path / "add5.tflite"
    shape = (1, 2, 3, 4, 5)     # rank 5: the GPU declines the ADD
    model.write_bytes(single_op_model_bytes("ADD", [("x", shape, None), ("y", shape, None)], [("out", shape)]))
    x = np.ones(shape, np.float32)
    report = compare_native_with_python(model, {"serving_default": {"x": x, "y": x}}, settings=(("gpu", False),))
    assert report["gpu"]["status"] == STATUS_OPS_REJECTED
    assert report["gpu"]["residency"] == "0/1 ops on GPU, 1 on CPU"
    run = run_native(model, {"serving_default": {"x": x, "y": x}})
    assert [r.op for r in run.gpu.rejected] == ["ADD"] and "strict GPU-only compile failed" in run.error
    assert strict_gates("host-native", residency(read_model_info(model), run)) == {"strict GPU residency N/N": False}


def test_no_gpu_is_no_gpu(runner, add_model, tmp_path, monkeypatch):
    monkeypatch.setenv("VK_ICD_FILENAMES", str(tmp_path / "nonexistent_icd.json"))
    x = np.ones(PROBE_SHAPE, np.float32)
    run = run_native(add_model, {"serving_default": {"x": x, "y": x}})
    assert run.status == STATUS_NO_GPU, (run.status, run.error, run.log_tail())
    with pytest.raises(NoGpuError, match="host-native"):
        run_on_device(add_model, {"serving_default": {"x": x, "y": x}}, "host-native", timeout=120)


def test_run_on_device_host_native_is_labelled_as_the_native_runner(gpu, runner, add_model):
    x = np.ones(PROBE_SHAPE, np.float32)
    run = run_on_device(add_model, {"serving_default": [{"x": x, "y": x}] * 2}, "host-native")
    assert run.ok and run.outputs["serving_default"]["out"].shape == (2, *PROBE_SHAPE)
    assert residency_line(read_model_info(add_model), run) == "GPU residency: 1/1 ops, 1 partition (strict GPU)"
    label = device_label("host-native", run)
    assert "native runner (LiteRT C API)" in label and "fp16" in label and "ai-edge-litert" in label
    assert "native runner" not in device_label("host-gpu", run)
    cpu = run_on_device(add_model, {"serving_default": {"x": x, "y": x}}, "host-native-cpu")
    assert device_label("host-native-cpu", cpu).startswith("CPU (") and strict_gates("host-native-cpu") == {}


def _ramp(n: int) -> dict[str, np.ndarray]:
    return {"input_ids": np.arange(1, n + 1, dtype=np.float32)[None], "attention_mask": np.ones((1, n), np.float32)}


def _padded(n: int, size: int) -> np.ndarray:
    return np.pad(np.arange(2, n + 2, dtype=np.float32), (0, size - n))[None]     # input_ids + mask, then zeros


def _twin(job: Path):
    """The Python twin of the runner (host_runner.py) on a job folder: (exit status, result, [(key, outputs)])."""
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[3] / "utilities"),
                                                         os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "litert_gpu_toolkit.phone.host_runner", "--manifest",
                           str(job / "manifest.json"), "--out", str(job / "out")], capture_output=True, text=True,
                          env=env, timeout=300)
    return (proc.returncode, *read_outputs(job / "out"))


def test_a_bucket_entry_runs_the_shortest_bucket_that_holds_it_zero_padded(runner, tmp_path):
    """`seq_*` in a job: lengths 3 and 4 run seq_4, length 6 runs seq_8, each padded on the right with zeros; the
    outputs come back under the bucket that ran (samples stacked per bucket). The native runner (CPU, so no GPU is
    needed) and its Python twin agree; a length over the largest bucket is refused, naming both."""
    model = tmp_path / "buckets.tflite"
    model.write_bytes(bucketed_add_model_bytes())
    run = run_native(model, {"seq_*": [_ramp(3), _ramp(6), _ramp(4)]}, accelerator="cpu", runner=runner)
    assert run.ok, run.error
    assert sorted(run.outputs) == ["seq_4", "seq_8"]
    np.testing.assert_array_equal(run.outputs["seq_4"]["out"], np.stack([_padded(3, 4), _padded(4, 4)]))
    np.testing.assert_array_equal(run.outputs["seq_8"]["out"], _padded(6, 8)[None])
    one = run_native(model, {"seq_*": _ramp(2)}, accelerator="cpu", runner=runner)
    np.testing.assert_array_equal(one.outputs["seq_4"]["out"], _padded(2, 4))
    too_long = run_native(model, {"seq_*": _ramp(9)}, accelerator="cpu", runner=runner)
    assert not too_long.ok and "no seq_<N> bucket holds the entry's inputs" in too_long.error

    job = write_job(tmp_path / "twin", model, [("seq_*", _ramp(3)), ("seq_*", _ramp(6))], accelerator="cpu")
    code, _, records = _twin(job)
    assert code == 0 and [key for key, _ in records] == ["seq_4", "seq_8"]
    np.testing.assert_array_equal(records[0][1]["out"], _padded(3, 4))
    np.testing.assert_array_equal(records[1][1]["out"], _padded(6, 8))
    job = write_job(tmp_path / "twin_long", model, [("seq_*", _ramp(9))], accelerator="cpu")
    code, result, _ = _twin(job)
    assert code == 2 and "no seq_<N> bucket holds the entry's inputs" in result["error"]


def test_a_bucket_entry_on_the_gpu_is_strict_and_padded(gpu, runner, tmp_path):
    model = tmp_path / "buckets.tflite"
    model.write_bytes(bucketed_add_model_bytes())
    run = run_native(model, {"seq_*": [_ramp(5), _ramp(8)]}, runner=runner)
    assert run.ok, run.error
    assert residency(read_model_info(model), run).strict
    np.testing.assert_allclose(run.outputs["seq_8"]["out"], np.stack([_padded(5, 8), _padded(8, 8)]), atol=1e-3)


def test_an_image_bucket_entry_pads_every_dimension_into_the_smallest_bucket_that_holds_it(runner, tmp_path):
    """`img_*`: [1, 2, 3, 5] does not fit img_4 (5 > 4), so img_8 runs it; [1, 2, 4, 2] runs img_4; each padded at
    the end of every dimension with zeros. Native runner and Python twin alike; a model without the family, or
    without a bucket large enough, is refused."""
    model = tmp_path / "images.tflite"
    model.write_bytes(bucketed_add_model_bytes({"img_4": (1, 2, 4, 4), "img_8": (1, 2, 8, 8)}, names=("a", "b")))
    rng = np.random.default_rng(0)
    wide, small = (rng.standard_normal(s).astype(np.float32) for s in ((1, 2, 3, 5), (1, 2, 4, 2)))
    run = run_native(model, {"img_*": [{"a": wide, "b": wide}, {"a": small, "b": small}]}, accelerator="cpu",
                     runner=runner)
    assert run.ok, run.error
    np.testing.assert_array_equal(run.outputs["img_8"]["out"][0], np.pad(2 * wide, [(0, 0), (0, 0), (0, 5), (0, 3)]))
    np.testing.assert_array_equal(run.outputs["img_4"]["out"][0], np.pad(2 * small, [(0, 0), (0, 0), (0, 0), (0, 2)]))
    job = write_job(tmp_path / "twin", model, [("img_*", {"a": wide, "b": wide})], accelerator="cpu")
    code, _, records = _twin(job)
    assert code == 0 and records[0][0] == "img_8"
    np.testing.assert_array_equal(records[0][1]["out"], np.pad(2 * wide, [(0, 0), (0, 0), (0, 5), (0, 3)]))
    huge = np.ones((1, 2, 9, 9), np.float32)
    run = run_native(model, {"img_*": {"a": huge, "b": huge}}, accelerator="cpu", runner=runner)
    assert not run.ok and "no img_<N> bucket holds the entry's inputs" in run.error
    plain = tmp_path / "add.tflite"
    plain.write_bytes(add_model_bytes())
    run = run_native(plain, {"seq_*": _ramp(3)}, accelerator="cpu", runner=runner)
    assert not run.ok and "the model has no seq_<N> bucket signatures" in run.error


def test_timeout_kills_the_runner(runner, add_model, tmp_path):
    """A runner that hangs is killed at the timeout and reported as such (a stand-in binary that sleeps)."""
    sleeper = tmp_path / "sleeper"
    sleeper.write_text("#!/bin/sh\nsleep 60\n")
    sleeper.chmod(0o755)
    x = np.ones(PROBE_SHAPE, np.float32)
    run = run_native(add_model, {"serving_default": {"x": x, "y": x}}, timeout=1, runner=sleeper)
    assert run.status == "timeout" and "within 1 s" in run.error


# ---------------------------------------------------------------------------------------------------------------
# The fuzz: bad manifests and inputs -> a clean exit status and a result that says why
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fuzz_runner():
    """The ASan + UBSan build: an out-of-bounds read or an undefined operation aborts (a signal), so 'no crash'
    also means 'no silent memory error'. Falls back to the plain build only where the sanitizers cannot link."""
    try:
        binary = build_host_runner(sanitize=True)
        smoke = subprocess.run([str(binary)], capture_output=True, text=True, errors="replace", timeout=120,
                               env={**os.environ, **SANITIZER_ENV})
        if smoke.returncode == 2 and "usage:" in smoke.stderr:
            return binary, SANITIZER_ENV
        why = f"it does not start here (exit {smoke.returncode}): {smoke.stderr[-300:]}"
    except NativeRunnerError as exc:
        why = str(exc)[:300]
    print(f"sanitizer build unavailable, fuzzing the plain build: {why}")
    return build_host_runner(), {}


def _valid_job(root: Path, model: Path) -> Path:
    x = np.ones(PROBE_SHAPE, np.float32)
    return write_job(root / "job", model, [("serving_default", {"x": x, "y": x})], accelerator="cpu")


def _snapshot(root: Path, skip: Path) -> dict:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
            if p.is_file() and skip not in p.parents}


def _run(fuzz_runner, job: Path, out: Path | None = None, args: list[str] | None = None):
    binary, env = fuzz_runner
    argv = [str(binary), *(args if args is not None else ["--manifest", str(job / "manifest.json"),
                                                          "--out", str(out or job / "out")])]
    return subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=120,
                          env={**os.environ, **env})


def _manifest(job: Path) -> dict:
    return json.loads((job / "manifest.json").read_text())


def _edit(job: Path, change) -> None:
    m = _manifest(job)
    change(m)
    (job / "manifest.json").write_text(json.dumps(m))


def _inp(m, i=0):
    return m["entries"][0]["inputs"][i]


# name: (manifest bytes, what the result's error must say)
BAD_MANIFESTS = {
    "empty": (b"", "unexpected end"),
    "not an object": (b"[1, 2]", "not a JSON object"),
    "a bare string": (b'"manifest"', "not a JSON object"),
    "trailing garbage": (b'{"protocol": "litert-gpu-runner"} x', "unexpected text after"),
    "deep nesting": (b"[" * 100000, "nested too deeply"),
    "deep objects": (b'{"a":' * 5000, "nested too deeply"),
    "invalid utf-8": (b'{"protocol": "litert-gpu-\xff\xfe"}', "invalid UTF-8"),
    "lone surrogate": (b'{"protocol": "\\ud800"}', "lone high surrogate"),
    "raw newline in a string": (b'{"protocol": "litert-gpu\nrunner"}', "control character"),
    "NaN": (b'{"version": NaN}', "invalid value"),
    "number overflow": (b'{"protocol": "litert-gpu-runner", "version": 99999999999999999999999999999999}',
                        '"version" must be 2'),
    "duplicate keys": (b'{"protocol": "litert-gpu-runner", "protocol": "litert-gpu-runner"}', "duplicate key"),
    "unterminated string": (b'{"protocol": "litert-gpu-runner', "unterminated string"),
    "unterminated escape": (b'{"protocol": "\\', "unterminated escape"),
    "truncated unicode escape": (b'{"protocol": "\\u12', "truncated \\u escape"),
    "too many entries": (b'{"protocol": "litert-gpu-runner", "version": 2, "accelerator": "cpu", "entries": ['
                         + b",".join([b'{"signature": "s", "inputs": []}'] * 100001) + b"]}",
                         "a list of 1 to 100000 entries"),
    "larger than the limit": (b'{"protocol": "litert-gpu-runner"}' + b" " * (17 << 20), "is larger than"),
}

# name: (change to a valid manifest, what the result's error must say)
BAD_EDITS = {
    "wrong version": (lambda m: m.update(version=1), '"version" must be 2'),
    "version as text": (lambda m: m.update(version="2"), '"version" must be 2'),
    "unknown accelerator": (lambda m: m.update(accelerator="npu"), '"accelerator" must be'),
    "enforce_f32 as text": (lambda m: m.update(enforce_f32="yes"), '"enforce_f32" must be'),
    "repeats zero": (lambda m: m.update(repeats=0), '"repeats" must be'),
    "repeats huge": (lambda m: m.update(repeats=10**30), '"repeats" must be'),
    "repeats fractional": (lambda m: m.update(repeats=1.5), '"repeats" must be'),
    "repeats bool": (lambda m: m.update(repeats=True), '"repeats" must be'),
    "no entries": (lambda m: m.update(entries=[]), '"entries" must be'),
    "entries not a list": (lambda m: m.update(entries={"0": 1}), '"entries" must be'),
    "entry not an object": (lambda m: m.update(entries=[7]), "entry 0 is not an object"),
    "unknown field": (lambda m: m.update(extra=1), 'unknown field "extra"'),
    "unknown input field": (lambda m: _inp(m).update(file="../../etc/passwd"), 'unknown field "file"'),
    "signature not in the model": (lambda m: m["entries"][0].update(signature="../serving_default"),
                                   "no such signature"),
    "name with ../": (lambda m: _inp(m).update(name="../x"), 'no data for the model\'s input "x"'),
    "name with a newline": (lambda m: _inp(m).update(name="x\ninput y float32 in_0_0.raw 1"),
                            'no data for the model\'s input "x"'),
    "name with a NUL": (lambda m: _inp(m).update(name="x\u0000y"), 'no data for the model\'s input "x"'),
    "duplicate name": (lambda m: _inp(m, 1).update(name="x"), 'name "x" given twice'),
    "missing input": (lambda m: m["entries"][0]["inputs"].pop(), "gives 1 inputs; the signature takes 2"),
    "extra input": (lambda m: m["entries"][0]["inputs"].append({"name": "z", "dtype": "float32", "shape": [1]}),
                    "gives 3 inputs; the signature takes 2"),
    "dtype not carried": (lambda m: _inp(m).update(dtype="float64"), '"dtype" must be one of'),
    "dtype of another input type": (lambda m: _inp(m).update(dtype="int32"), "the model takes float32"),
    "shape as text": (lambda m: _inp(m).update(shape="1,8,8,4"), '"shape" must be a list'),
    "negative size": (lambda m: _inp(m).update(shape=[1, -8, 8, 4]), "from 0 to 2^31-1"),
    "huge sizes": (lambda m: _inp(m).update(shape=[2**31 - 1] * 4), "the model takes float32 [1, 8, 8, 4]"),
    "size past int32": (lambda m: _inp(m).update(shape=[2**31, 1, 1, 1]), "from 0 to 2^31-1"),
    "rank 9": (lambda m: _inp(m).update(shape=[1] * 9), "at most 8 sizes"),
    "wrong shape": (lambda m: _inp(m).update(shape=[1, 8, 4, 8]), "the model takes float32 [1, 8, 8, 4]"),
}


def _check_clean(proc, job: Path, out: Path, before: dict, root: Path, expect=(2,), error_has: str | None = None):
    where = f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    assert proc.returncode >= 0, "the runner died on a signal (a crash or a sanitizer abort): " + where
    assert proc.returncode in expect, where
    assert "AddressSanitizer" not in proc.stderr and "runtime error" not in proc.stderr, where
    assert _snapshot(root, out) == before, "a file outside out/ was written or changed"
    if proc.returncode in (0, 1, 2):
        result, _ = read_outputs(out)   # valid protocol JSON, whatever the input was
        assert result["status"] == {0: "ok", 1: "compile_failed", 2: "bad_request"}.get(proc.returncode,
                                                                                     result["status"])
        assert proc.returncode == 0 or result["error"]
        assert error_has is None or error_has in result["error"], (error_has, result["error"])
        for p in out.iterdir():
            assert p.name == "result.json" or p.name.startswith("out_"), p


@pytest.mark.parametrize("case", sorted(BAD_MANIFESTS))
def test_fuzz_bad_manifest_text(fuzz_runner, add_model, tmp_path, case):
    job = _valid_job(tmp_path, add_model)
    text, error = BAD_MANIFESTS[case]
    (job / "manifest.json").write_bytes(text)
    before = _snapshot(tmp_path, job / "out")
    _check_clean(_run(fuzz_runner, job), job, job / "out", before, tmp_path, error_has=error)


@pytest.mark.parametrize("case", sorted(BAD_EDITS))
def test_fuzz_bad_manifest_fields(fuzz_runner, add_model, tmp_path, case):
    job = _valid_job(tmp_path, add_model)
    change, error = BAD_EDITS[case]
    _edit(job, change)
    before = _snapshot(tmp_path, job / "out")
    _check_clean(_run(fuzz_runner, job), job, job / "out", before, tmp_path, error_has=error)


def test_fuzz_truncated_manifests(fuzz_runner, add_model, tmp_path):
    job = _valid_job(tmp_path, add_model)
    text = (job / "manifest.json").read_bytes()
    for cut in range(0, len(text) - 1, max(1, len(text) // 40)):
        (job / "manifest.json").write_bytes(text[:cut])
        before = _snapshot(tmp_path, job / "out")
        _check_clean(_run(fuzz_runner, job), job, job / "out", before, tmp_path)


def test_fuzz_random_mutations(fuzz_runner, add_model, tmp_path):
    """Seeded byte-level mutations of a valid manifest: each ends ok (the mutation kept it valid) or as a bad
    request, never anything else."""
    job = _valid_job(tmp_path, add_model)
    text = (job / "manifest.json").read_bytes()
    rng = np.random.default_rng(25)
    outcomes = {0: 0, 2: 0}
    for _ in range(60):
        data = bytearray(text)
        for _ in range(int(rng.integers(1, 4))):
            pos = int(rng.integers(0, len(data)))
            kind = int(rng.integers(0, 4))
            if kind == 0:
                data[pos] = int(rng.integers(0, 256))
            elif kind == 1:
                del data[pos:pos + int(rng.integers(1, 16))]
            elif kind == 2:
                data[pos:pos] = data[pos:pos + int(rng.integers(1, 16))]
            else:
                data[pos:pos] = bytes([int(rng.choice(list(b'{}[]",:\\0-e.')))])
        (job / "manifest.json").write_bytes(bytes(data))
        (job / "out" / "result.json").unlink(missing_ok=True)
        before = _snapshot(tmp_path, job / "out")
        proc = _run(fuzz_runner, job)
        _check_clean(proc, job, job / "out", before, tmp_path, expect=(0, 2))
        outcomes[proc.returncode] += 1
    assert outcomes[2] > 30, outcomes   # most mutations break the manifest: the fuzz reached the checks


BAD_FILES = {"one byte short": "holds 1023 bytes; the model's tensor needs 1024", "one byte long": "holds 1025 bytes",
             "empty": "holds 0 bytes", "missing": "cannot open", "a folder": "not a regular file",
             "a symlink": "cannot open", "model missing": "missing or not a regular file",
             "model garbage": "loading model.tflite failed", "model a symlink": "missing or not a regular file"}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_fuzz_bad_input_files(fuzz_runner, add_model, tmp_path, case):
    job = _valid_job(tmp_path, add_model)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.raw").write_bytes(b"\0" * (4 * int(np.prod(PROBE_SHAPE))))
    first = job / input_file(0, 0)
    data = first.read_bytes()
    if case == "one byte short":
        first.write_bytes(data[:-1])
    elif case == "one byte long":
        first.write_bytes(data + b"\0")
    elif case == "empty":
        first.write_bytes(b"")
    elif case == "missing":
        first.unlink()
    elif case == "a folder":
        first.unlink()
        first.mkdir()
    elif case == "a symlink":   # right size, but a link: refused, so a job cannot read outside its folder
        first.unlink()
        first.symlink_to(outside / "secret.raw")
    elif case == "model missing":
        (job / "model.tflite").unlink()
    elif case == "model garbage":
        (job / "model.tflite").write_bytes(os.urandom(4096))
    else:
        (job / "model.tflite").unlink()
        (job / "model.tflite").symlink_to(add_model)
    before = _snapshot(tmp_path, job / "out")
    _check_clean(_run(fuzz_runner, job), job, job / "out", before, tmp_path, error_has=BAD_FILES[case])


def test_fuzz_output_folder_that_is_a_symlink_is_refused(fuzz_runner, add_model, tmp_path):
    job = _valid_job(tmp_path, add_model)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (job / "out").symlink_to(elsewhere)
    proc = _run(fuzz_runner, job)
    assert proc.returncode == 3 and "is not a folder" in proc.stderr, proc.stderr[-2000:]
    assert list(elsewhere.iterdir()) == [], "the runner wrote through a symlinked out/ folder"


@pytest.mark.parametrize("args", [[], ["--manifest"], ["--out", "x"], ["--manifest", "m", "--out"],
                                  ["--manifest", "m", "--out", "o", "--extra", "1"]])
def test_fuzz_usage(fuzz_runner, tmp_path, args):
    proc = _run(fuzz_runner, tmp_path, args=args)
    assert proc.returncode == 2 and "usage:" in proc.stderr


@pytest.mark.parametrize("shape, expect", [((1, 2, 3, 5), 0), ((1, 2, 8, 8), 0), ((1, 2, 9, 1), 2), ((2, 2, 1, 1), 2),
                                           ((1, 2, 0, 3), 0), ((2, 3), 2)])
def test_fuzz_bucket_entries_pad_inside_the_tensor(fuzz_runner, tmp_path, shape, expect):
    """The padding copy under ASan + UBSan: shapes that fit (an empty dimension too) run, the rest are refused."""
    model = tmp_path / "images.tflite"
    model.write_bytes(bucketed_add_model_bytes({"img_4": (1, 2, 4, 4), "img_8": (1, 2, 8, 8)}, names=("a", "b")))
    x = np.ones(shape, np.float32)
    job = write_job(tmp_path / "job", model, [("img_*", {"a": x, "b": x})], accelerator="cpu")
    before = _snapshot(tmp_path, job / "out")
    _check_clean(_run(fuzz_runner, job), job, job / "out", before, tmp_path, expect=(expect,),
                 error_has=None if expect == 0 else "no img_<N> bucket holds")


def test_fuzz_valid_job_still_runs(fuzz_runner, add_model, tmp_path):
    """The control: the same sanitized binary runs a valid job to the end (so the refusals above are real)."""
    job = _valid_job(tmp_path, add_model)
    before = _snapshot(tmp_path, job / "out")
    proc = _run(fuzz_runner, job)
    _check_clean(proc, job, job / "out", before, tmp_path, expect=(0,))
    _, [(key, outs)] = read_outputs(job / "out")
    assert key == "serving_default"
    np.testing.assert_array_equal(outs["out"], np.full(PROBE_SHAPE, 2, np.float32))


def test_cli_build_native_and_run_on_host_native(gpu, runner, add_model):
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[3] / "utilities"),
                                                         os.environ.get("PYTHONPATH", "")])}
    cli = [sys.executable, "-m", "litert_gpu_toolkit", "phone"]
    built = subprocess.run([*cli, "build-native"], capture_output=True, text=True, env=env, timeout=600)
    assert built.returncode == 0 and built.stdout.strip().endswith(str(runner)), built.stderr[-2000:]
    proc = subprocess.run([*cli, "run", str(add_model), "--device", "host-native"], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[:2] == ["GPU residency: 1/1 ops, 1 partition (strict GPU)", "status: ok"]
    assert proc.stdout.splitlines()[2].startswith("init (compile) ") and "9 runs)" in proc.stdout   # --runs 10


def test_program_cache_is_written_then_read_and_keyed_by_the_model(gpu, runner, add_model, tmp_path):
    """The GPU program cache through the C API: the first compile writes the model's programs, the second reads
    them (the accelerator's own log says so), a changed model or the other precision gets its own key and compiles
    cold, and the outputs with a warm cache are the outputs without one."""
    cache = tmp_path / "cache"
    cache.mkdir()
    x = {"serving_default": _samples(1)[0]}
    plain = run_native(add_model, x, runner=runner)
    cold = run_native(add_model, x, runner=runner, cache_dir=cache)
    warm = run_native(add_model, x, runner=runner, cache_dir=cache)
    assert plain.ok and cold.ok and warm.ok, (cold.error, warm.error)
    assert plain.cache is None
    assert (cold.cache["files_before"], cold.cache["files_after"], cold.cache["read"]) == (0, 1, False)
    assert warm.cache["key"] == cold.cache["key"] and warm.cache["read"] and warm.cache["files_before"] == 1
    assert [p.name for p in cache.iterdir()] == [f"{cold.cache['key']}_mldrift_program_cache.bin"]
    np.testing.assert_array_equal(warm.outputs["serving_default"]["out"], plain.outputs["serving_default"]["out"])
    other = tmp_path / "sub.tflite"
    other.write_bytes(single_op_model_bytes("SUB", [("x", PROBE_SHAPE, None), ("y", PROBE_SHAPE, None)],
                                            [("out", PROBE_SHAPE)]))
    changed = run_native(other, x, runner=runner, cache_dir=cache)
    assert changed.ok and changed.cache["key"] != cold.cache["key"] and not changed.cache["read"]
    np.testing.assert_allclose(changed.outputs["serving_default"]["out"], x["serving_default"]["x"] -
                               x["serving_default"]["y"], rtol=1e-2, atol=1e-2)
    f32 = run_native(add_model, x, runner=runner, cache_dir=cache, enforce_f32=True)
    assert f32.ok and f32.cache["key"].endswith("_f32") and not f32.cache["read"]


def test_program_cache_folder_must_exist(runner, add_model, tmp_path):
    with pytest.raises(NativeRunnerError, match="does not exist"):
        run_native(add_model, {"serving_default": _samples(1)[0]}, runner=runner, cache_dir=tmp_path / "none")


def test_fuzz_cache_dir_with_a_quote_is_refused(fuzz_runner, add_model, tmp_path):
    """The folder is written into the accelerator's TOML options: a name that could end the string is refused."""
    x = np.ones(PROBE_SHAPE, np.float32)
    job = write_job(tmp_path / "job", add_model, [("serving_default", {"x": x, "y": x})], accelerator="gpu")
    bad = tmp_path / 'a"b'
    bad.mkdir()
    before = _snapshot(tmp_path, job / "out")
    proc = _run(fuzz_runner, job, args=["--manifest", str(job / "manifest.json"), "--out", str(job / "out"),
                                        "--cache-dir", str(bad)])
    _check_clean(proc, job, job / "out", before, tmp_path, error_has="plain name")
