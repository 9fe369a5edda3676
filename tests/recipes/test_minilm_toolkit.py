"""Toolkit pieces the MiniLM recipe added: many samples on one compile, and --model resolution."""
from pathlib import Path

import numpy as np
import pytest

from litert_gpu_toolkit.runtime.compiled import compile_and_run
from litert_gpu_toolkit.runtime.tiny_models import PROBE_SHAPE, add_model_bytes
from litert_gpu_toolkit.core.weights import WeightsError, resolve_model_dir


def _samples(n):
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal(PROBE_SHAPE).astype(np.float32),
             "y": rng.standard_normal(PROBE_SHAPE).astype(np.float32)} for _ in range(n)]


@pytest.mark.parametrize("accelerator", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_samples_run_on_one_compile_and_stack(accelerator, request):
    if accelerator == "gpu":
        request.getfixturevalue("gpu")
    samples = _samples(3)
    result = compile_and_run(add_model_bytes(), {"serving_default": samples}, accelerator=accelerator)
    assert result.ok, result.error
    out = result.outputs["serving_default"]["out"]
    assert out.shape == (3, *PROBE_SHAPE)
    for i, s in enumerate(samples):  # row i belongs to sample i, in order
        np.testing.assert_allclose(out[i], s["x"] + s["y"], rtol=1e-2, atol=1e-2)
    assert result.run_s["serving_default"] > 0


def test_single_dict_keeps_its_shape():
    s = _samples(1)[0]
    result = compile_and_run(add_model_bytes(), {"serving_default": s}, accelerator="cpu")
    assert result.ok, result.error
    assert result.outputs["serving_default"]["out"].shape == PROBE_SHAPE


def test_resolve_model_dir(tmp_path, monkeypatch):
    assert resolve_model_dir(None, default=lambda: tmp_path) == tmp_path
    assert resolve_model_dir(str(tmp_path)) == tmp_path
    with pytest.raises(WeightsError, match="offline default"):
        resolve_model_dir(None)
    with pytest.raises(WeightsError, match="neither a model directory"):
        resolve_model_dir(str(tmp_path / "missing" / "dir"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache: an offline hub id must fail clearly
    with pytest.raises(WeightsError, match="local cache"):
        resolve_model_dir("no-such-owner/no-such-model")


def test_rejected_op_with_empty_reason_is_parsed():
    # seen with litert-torch's all-weights fp16 recipe on all-MiniLM-L6-v2 (ai-edge-litert 2.3.0, llvmpipe)
    from litert_gpu_toolkit.runtime.compiled import parse_gpu_log

    info = parse_gpu_log("ERROR: Following operations are not supported by GPU delegate:\nDEQUANTIZE: \n"
                         "EMBEDDING_LOOKUP: EMBEDDING_LOOKUP: Empty quantization params.\n"
                         "351 operations will run on the GPU, and the remaining 46 operations will run on the CPU.\n")
    assert [r.op for r in info.rejected] == ["DEQUANTIZE", "EMBEDDING_LOOKUP"]
    assert info.rejected[0].reason == "(no reason given)"
    assert (info.gpu_ops, info.cpu_ops) == (351, 46)


def test_l2_normalize_matches_f_normalize_and_has_no_identical_input_node(tmp_path):
    import torch
    import torch.nn.functional as F

    from litert_gpu_toolkit.lowering.export import export_tflite
    from litert_gpu_toolkit.core.model_info import read_model_info
    from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
    from litert_gpu_toolkit.rewrites.identical_or_constant_inputs import l2_normalize

    x = torch.randn(3, 384) * 5
    torch.testing.assert_close(l2_normalize(x, dim=1), F.normalize(x, dim=1), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(l2_normalize(x, dim=0), F.normalize(x, dim=0), rtol=1e-6, atol=1e-7)
    assert torch.equal(l2_normalize(torch.zeros(1, 4), dim=1), torch.zeros(1, 4))  # eps, like F.normalize

    class Norm(torch.nn.Module):
        def forward(self, v):
            return F.normalize(v, p=2, dim=1)

    def identical_input_nodes(path):
        return [op.op for op in read_model_info(path).ops if len(op.inputs) == 2 and op.inputs[0] == op.inputs[1]]

    plain = export_tflite(Norm(), (x[:1],), tmp_path / "plain.tflite")
    assert identical_input_nodes(plain) == ["MUL"]  # what the rewrite is for
    wrapped = GpuRewriteWrapper(Norm(), include=["l2_normalize"])
    rewritten = export_tflite(wrapped, (x[:1],), tmp_path / "rewritten.tflite")
    assert identical_input_nodes(rewritten) == []
    torch.testing.assert_close(wrapped(x), F.normalize(x, dim=1), rtol=1e-6, atol=1e-7)
    assert [c.rewrite for c in wrapped.changes] == ["l2_normalize"]


@pytest.mark.gpu
def test_phone_path_takes_samples_too(gpu, tmp_path, monkeypatch):
    """run_on_device(<phone>, {sig: [samples]}) -- all samples in one job (one compile) over the adb TEST DOUBLE
    (tests/toolkit/phone/fakes/adb)."""
    import os
    import sys

    from litert_gpu_toolkit.phone import load_registry, push_runner
    from litert_gpu_toolkit.recipe import run_on_device

    fakes = Path(__file__).resolve().parents[1] / "toolkit" / "phone" / "fakes"
    root = tmp_path / "phone_fs"
    root.mkdir()
    monkeypatch.setenv("PATH", f"{fakes}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ADB_ROOT", str(root))
    monkeypatch.setenv("FAKE_ADB_PYTHON", sys.executable)
    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join([str(Path(__file__).resolve().parents[2] / "utilities"), os.environ.get("PYTHONPATH", "")]),
    )
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    phone = load_registry()["pixel8"]
    build = tmp_path / "build"
    build.mkdir()
    for name in ("litert_gpu_runner", "libLiteRt.so", phone.accelerator_lib):
        (build / name).write_bytes(b"placeholder for the test double")
    push_runner(build, phone)
    model = tmp_path / "add.tflite"
    model.write_bytes(add_model_bytes())

    samples = _samples(2)
    result = run_on_device(model, {"serving_default": samples}, "pixel8")
    assert result.ok, (result.status, result.error)
    out = result.outputs["serving_default"]["out"]
    assert out.shape == (2, *PROBE_SHAPE)
    for i, s in enumerate(samples):
        np.testing.assert_allclose(out[i], s["x"] + s["y"], rtol=1e-2, atol=1e-2)
