"""The --device <phone> path, exercised end to end against a TEST DOUBLE of adb (tests/toolkit/phone/fakes/adb).

The double emulates a phone's file system in a temp folder and runs the runner protocol with this
machine's LiteRT runtime. It proves the host side (push, run, pull, parse, compare); it proves
nothing about a real phone.
"""
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from litert_gpu_toolkit.model_info import read_model_info
from litert_gpu_toolkit.phone import Adb, PhoneError, load_registry, push_runner, residency_from_log, run_on_phone
from litert_gpu_toolkit.phone.protocol import read_manifest, read_outputs, write_job, write_outputs
from litert_gpu_toolkit.recipe import DeviceError, resolve_device, residency_line, run_on_device
from litert_gpu_toolkit.tiny_models import PROBE_SHAPE, add_model_bytes

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
    job = write_job(tmp_path / "job", model, "serving_default", inputs["serving_default"], repeats=3)
    manifest, arrays = read_manifest(job)
    assert manifest["repeats"] == 3 and manifest["accelerator"] == "gpu"
    np.testing.assert_array_equal(arrays["x"], inputs["serving_default"]["x"])
    write_outputs(job / "out", "ok", outputs={"out": arrays["x"]}, compile_ms=1.0, run_ms=[2.0])
    status, outs = read_outputs(job / "out")
    assert status["status"] == "ok"
    np.testing.assert_array_equal(outs["out"], arrays["x"])


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


def test_run_on_fake_phone_matches_host(gpu, fake_phone, model, tmp_path):
    assert _push_placeholder_runner(tmp_path)
    inputs, expected = _inputs()
    result = run_on_device(model, inputs, "pixel8", repeats=2)
    assert result.ok, (result.status, result.error, result.log[-2000:])
    got = result.outputs["serving_default"]["out"]
    np.testing.assert_allclose(got, expected, rtol=1e-2, atol=1e-2)
    assert result.run_s["serving_default"] > 0
    line = residency_line(read_model_info(model), result)
    assert line == "GPU residency: 1/1 ops, 1 partition (strict GPU)"
    host = run_on_device(model, inputs, "host-gpu")
    np.testing.assert_array_equal(got, host.outputs["serving_default"]["out"])


def test_serial_is_passed_to_adb(fake_phone, monkeypatch):
    monkeypatch.setenv("FAKE_ADB_SERIAL", "ABC123")
    assert Adb(serial="ABC123").state() == "device"
    assert Adb(serial="WRONG").state() == ""


ODD_NAMES = ["x y", "a\nb", "../../evil", "tab\there", "%41", "\u00df", "-", 'q"uote\\']


def test_odd_names_round_trip_through_the_line_manifest(tmp_path, model):
    """Names with spaces, newlines, quotes, '../' survive manifest.txt (percent-encoded) and never name a file."""
    inputs = {n: np.full((2,), i, np.float32) for i, n in enumerate(ODD_NAMES)}
    job = write_job(tmp_path / "job", model, "serving default", inputs)
    manifest, arrays = read_manifest(job)
    assert manifest["signature"] == "serving default" and list(arrays) == ODD_NAMES
    assert [e["file"] for e in manifest["inputs"]] == [f"in_{i}.raw" for i in range(len(ODD_NAMES))]
    assert all(len(line.split(" ")) in (2, 5) for line in (job / "manifest.txt").read_text().splitlines())
    assert sorted(p.name for p in tmp_path.rglob("*") if p.parent != job) == ["add.tflite", "job"]
    with pytest.raises(ValueError, match="empty name"):
        write_job(tmp_path / "job2", model, "serving_default", {"": np.zeros(2, np.float32)})


def test_cpp_runner_reads_the_manifest_the_host_writes(tmp_path, model):
    """The C++ runner's manifest reader and JSON writer (everything of litert_gpu_runner.cc but main, which needs
    the LiteRT SDK), compiled with the host's g++: the names it decodes and writes back are the host's."""
    import json
    import shutil
    import subprocess

    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++ on this machine")
    source = (Path(__file__).resolve().parents[3] / "utilities" / "litert_gpu_toolkit" / "phone" / "runner"
              / "litert_gpu_runner.cc").read_text()
    helpers = source[source.index("namespace {"):source.index("}  // namespace") + len("}  // namespace")]
    headers = "".join(line + "\n" for line in source.splitlines() if line.startswith("#include <"))
    main = """
int main(int argc, char** argv) {
  Manifest m;
  std::string err;
  if (!ReadManifest(argv[1], &m, &err)) { std::cout << JsonString(err) << "\\n"; return 2; }
  std::cout << "[" << JsonString(m.signature);
  for (const auto& i : m.inputs) std::cout << ", [" << JsonString(i.name) << ", " << JsonString(i.file) << "]";
  std::cout << "]\\n";
  WriteResult(argv[2], "ok", "line 1\\nline \\"2\\"", 1.5, {2.0}, "{\\"name\\": " + JsonString(m.inputs[1].name) + "}");
  return 0;
}
"""
    (tmp_path / "reader.cc").write_text(headers + helpers + main)
    exe = tmp_path / "reader"
    build = subprocess.run([cxx, "-std=c++17", "-O0", "-o", str(exe), str(tmp_path / "reader.cc")],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    inputs = {n: np.zeros((2,), np.float32) for n in ODD_NAMES}
    job = write_job(tmp_path / "job", model, "serving default", inputs)
    (tmp_path / "out").mkdir()
    got = subprocess.run([str(exe), str(job / "manifest.txt"), str(tmp_path / "out")], capture_output=True,
                         text=True, timeout=60)
    assert got.returncode == 0, got.stdout + got.stderr
    parsed = json.loads(got.stdout)
    assert parsed[0] == "serving default"
    assert parsed[1:] == [[n, f"in_{i}.raw"] for i, n in enumerate(ODD_NAMES)]
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["error"] == 'line 1\nline "2"' and result["outputs"] == [{"name": ODD_NAMES[1]}]
    (job / "manifest.txt").write_text((job / "manifest.txt").read_text().replace("in_1.raw", "../x.raw"))
    refused = subprocess.run([str(exe), str(job / "manifest.txt"), str(tmp_path / "out")], capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 2 and "bad manifest line" in refused.stdout
