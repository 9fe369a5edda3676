"""The --device <phone> path, exercised end to end against a TEST DOUBLE of adb (tests/toolkit/phone/fakes/adb).

The double emulates a phone's file system in a temp folder and runs the runner protocol with this
machine's LiteRT runtime: the Python twin (host_runner.py), or -- FAKE_ADB_RUNNER -- the native runner
built for this machine, i.e. the phone's own code. It proves the host side (push, run, pull, parse,
compare) and that code; it proves nothing about a real phone, its GPU or the Android build.
"""
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.phone import Adb, PhoneError, load_registry, push_runner, residency_from_log, run_on_phone
from litert_gpu_toolkit.phone.protocol import (ProtocolError, input_file, read_manifest, read_outputs, write_job,
                                               write_outputs)
from litert_gpu_toolkit.recipe import DeviceError, resolve_device, residency_line, run_on_device
from litert_gpu_toolkit.runtime.tiny_models import PROBE_SHAPE, add_model_bytes

FAKES = Path(__file__).resolve().parent / "fakes"


@pytest.fixture()
def fake_phone(tmp_path, monkeypatch):
    root = tmp_path / "phone_fs"
    root.mkdir()
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ADB_ROOT", str(root))
    monkeypatch.setenv("FAKE_ADB_PYTHON", sys.executable)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).resolve().parents[3] / "utilities"),
                                                      os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    return root


@pytest.fixture()
def model(tmp_path):
    path = tmp_path / "add.tflite"
    path.write_bytes(add_model_bytes())
    return path


def _inputs():
    x = np.linspace(-3, 3, int(np.prod(PROBE_SHAPE)), dtype=np.float32).reshape(PROBE_SHAPE)
    return {"serving_default": {"x": x, "y": 2 * x}}, 3 * x


def _push_placeholder_runner(tmp_path, phone_name="pixel8"):
    build = tmp_path / "build"
    build.mkdir()
    phone = load_registry()[phone_name]
    for name in ("litert_gpu_runner", "libLiteRt.so", phone.accelerator_lib):
        (build / name).write_bytes(b"placeholder for the test double")
    return push_runner(build, phone)


def test_registry_and_unknown_device_error():
    phones = load_registry()
    assert {"pixel8", "pixel8a", "pixel9", "galaxy-s24"} <= set(phones)
    assert resolve_device("pixel8") == "pixel8"
    with pytest.raises(DeviceError) as err:
        resolve_device("pixel99")
    assert "pixel8" in str(err.value) and "host-gpu" in str(err.value)


def test_protocol_round_trip(tmp_path, model):
    inputs, _ = _inputs()
    job = write_job(tmp_path / "job", model, [("serving_default", inputs["serving_default"])], repeats=3)
    manifest, entries = read_manifest(job)
    assert manifest["repeats"] == 3 and manifest["accelerator"] == "gpu" and manifest["version"] == 2
    [(key, arrays)] = entries
    assert key == "serving_default"
    np.testing.assert_array_equal(arrays["x"], inputs["serving_default"]["x"])
    write_outputs(job / "out", "ok", entries=[(key, {"out": arrays["x"]}, [2.0])], compile_ms=1.0)
    status, outs = read_outputs(job / "out")
    assert status["status"] == "ok" and status["compile_ms"] == 1.0
    np.testing.assert_array_equal(outs[0][1]["out"], arrays["x"])


HOSTILE_NAMES = ["a name", "two\nlines", "../../escape", "/abs/path", "quote\" and \\", "tab\there", "ünï",
                 "input x float32 in_0.raw 1,2"]


def test_protocol_names_are_strings_and_never_paths(tmp_path, model):
    """A name with a space, a newline, `../` or the old line format inside it round-trips as itself, binds
    only to itself, and the files are named by index: nothing a name says reaches a path."""
    rng = np.random.default_rng(1)
    named = {n: rng.standard_normal((2, 3)).astype(np.float32) for n in HOSTILE_NAMES}
    job = write_job(tmp_path / "job", model, [("sig ../x", named)])
    assert sorted(p.name for p in job.iterdir()) == sorted(["model.tflite", "manifest.json"] +
                                                           [input_file(0, i) for i in range(len(named))])
    _, [(key, back)] = read_manifest(job)
    assert key == "sig ../x" and list(back) == HOSTILE_NAMES
    for n in HOSTILE_NAMES:
        np.testing.assert_array_equal(back[n], named[n])
    write_outputs(job / "out", "ok", entries=[(key, back, [1.0])])
    assert sorted(p.name for p in (job / "out").iterdir()) == ["out_0_%d.raw" % i for i in range(len(named))] + \
        ["result.json"]
    _, [(_, outs)] = read_outputs(job / "out")
    assert list(outs) == HOSTILE_NAMES
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file() and job not in p.parents) == ["add.tflite"]


def test_protocol_refuses_truncated_and_mislabelled_files(tmp_path, model):
    inputs, _ = _inputs()
    job = write_job(tmp_path / "job", model, [("serving_default", inputs["serving_default"])])
    data = (job / input_file(0, 0)).read_bytes()
    (job / input_file(0, 0)).write_bytes(data[:-1])
    with pytest.raises(ProtocolError, match="bytes"):
        read_manifest(job)
    (job / input_file(0, 0)).write_bytes(data)
    text = (job / "manifest.json").read_text()
    (job / "manifest.json").write_text(text.replace('"float32"', '"float64"', 1))
    with pytest.raises(ProtocolError, match="dtype"):
        read_manifest(job)
    (job / "manifest.json").write_text('{"protocol": "litert-gpu-runner", "version": 2, "version": 2}')
    with pytest.raises(ProtocolError, match="twice"):
        read_manifest(job)


def test_residency_line_parsed_from_delegate_log():
    assert residency_from_log("INFO: Replacing 118 out of 121 node(s) with delegate (TfLiteGpuDelegateV2) node, "
                              "yielding 3 partitions for the whole graph.") == (118, 121, 3)
    assert residency_from_log("nothing here") is None


def test_missing_runner_is_a_clear_error(fake_phone, model):
    inputs, _ = _inputs()
    with pytest.raises(PhoneError, match="runner is not on the phone"):
        run_on_phone(model, inputs, "pixel8")


def test_no_phone_attached(fake_phone, model, monkeypatch):
    monkeypatch.setenv("FAKE_ADB_STATE", "offline")
    with pytest.raises(PhoneError, match="no phone ready"):
        run_on_phone(model, _inputs()[0], "pixel8")


@pytest.mark.parametrize("runner", ["python-twin", "native"])
def test_run_on_fake_phone_matches_host(gpu, fake_phone, model, tmp_path, monkeypatch, runner):
    if runner == "native":   # the phone's own code behind the phone's host side, on this machine's GPU
        from litert_gpu_toolkit.phone.native import build_host_runner

        monkeypatch.setenv("FAKE_ADB_RUNNER", str(build_host_runner()))
    assert _push_placeholder_runner(tmp_path)
    inputs, expected = _inputs()
    result = run_on_device(model, inputs, "pixel8", repeats=2)
    assert result.ok, (result.status, result.error, result.log[-2000:])
    assert ("litert_gpu_runner: compiled for gpu" in result.log) == (runner == "native")
    got = result.outputs["serving_default"]["out"]
    np.testing.assert_allclose(got, expected, rtol=1e-2, atol=1e-2)
    assert result.run_s["serving_default"] > 0
    line = residency_line(read_model_info(model), result)
    assert line == "GPU residency: 1/1 ops, 1 partition (strict GPU)"
    host = run_on_device(model, inputs, "host-gpu")
    np.testing.assert_array_equal(got, host.outputs["serving_default"]["out"])
    # samples travel as one job (one compile), each row its own sample's output
    x = inputs["serving_default"]["x"]
    samples = run_on_device(model, {"serving_default": [{"x": x, "y": x}, {"x": x, "y": -x}]}, "pixel8")
    assert samples.ok and samples.outputs["serving_default"]["out"].shape == (2, *x.shape)
    np.testing.assert_allclose(samples.outputs["serving_default"]["out"][1], 0, atol=1e-6)
    assert samples.log.count("litert_gpu_runner: compiled") == (1 if runner == "native" else 0)


def test_serial_is_passed_to_adb(fake_phone, monkeypatch):
    monkeypatch.setenv("FAKE_ADB_SERIAL", "ABC123")
    assert Adb(serial="ABC123").state() == "device"
    assert Adb(serial="WRONG").state() == ""


def test_program_cache_on_the_phone_is_written_then_read(gpu, fake_phone, model, tmp_path, monkeypatch):
    """run_on_phone(program_cache=True): the runner gets a cache folder on the phone (made before it runs); the
    first compile writes the model's programs there, the second reads them (the phone's code, on this machine)."""
    from litert_gpu_toolkit.phone import CACHE_DIR
    from litert_gpu_toolkit.phone.native import build_host_runner

    monkeypatch.setenv("FAKE_ADB_RUNNER", str(build_host_runner()))
    assert _push_placeholder_runner(tmp_path)
    inputs, expected = _inputs()
    first = run_on_phone(model, inputs, "pixel8", program_cache=True)
    second = run_on_phone(model, inputs, "pixel8", program_cache=True)
    assert first.ok and second.ok, (first.error, second.error)
    assert not first.cache["read"] and second.cache["read"] and second.cache["key"] == first.cache["key"]
    assert [p.name for p in (fake_phone / CACHE_DIR.lstrip("/")).iterdir()] == [
        f"{first.cache['key']}_mldrift_program_cache.bin"]
    np.testing.assert_allclose(second.outputs["serving_default"]["out"], expected, rtol=1e-2, atol=1e-2)
    assert run_on_phone(model, inputs, "pixel8").cache is None          # off unless asked
