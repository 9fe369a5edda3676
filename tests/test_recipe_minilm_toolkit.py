"""Toolkit pieces the MiniLM recipe added: many samples on one compile, and --model resolution."""
from pathlib import Path

import numpy as np
import pytest

from litert_gpu_toolkit.runtime import compile_and_run
from litert_gpu_toolkit.tiny_models import PROBE_SHAPE, add_model_bytes
from litert_gpu_toolkit.weights import WeightsError, resolve_model_dir


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
    from litert_gpu_toolkit.runtime import parse_gpu_log

    info = parse_gpu_log("ERROR: Following operations are not supported by GPU delegate:\nDEQUANTIZE: \n"
                         "EMBEDDING_LOOKUP: EMBEDDING_LOOKUP: Empty quantization params.\n"
                         "351 operations will run on the GPU, and the remaining 46 operations will run on the CPU.\n")
    assert [r.op for r in info.rejected] == ["DEQUANTIZE", "EMBEDDING_LOOKUP"]
    assert info.rejected[0].reason == "(no reason given)"
    assert (info.gpu_ops, info.cpu_ops) == (351, 46)
