"""The toolchain works end to end: torch -> litert-torch -> strict GPU compile -> numbers match torch."""
import os

import numpy as np
import pytest

from litert_gpu_toolkit.runtime.gpu_info import describe
from litert_gpu_toolkit.runtime.compiled import STATUS_NO_GPU, compile_and_run, probe_gpu


def test_probe_reports_a_named_adapter(gpu):
    assert gpu.ok
    assert gpu.gpu.adapter, gpu.log_tail()
    assert gpu.gpu.backend == "Vulkan"


def test_tiny_torch_model_runs_gpu_only_and_matches_torch(gpu, tmp_path):
    torch = pytest.importorskip("torch")
    litert_torch = pytest.importorskip("litert_torch")

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8, 5)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))

    torch.manual_seed(0)
    model = Tiny().eval()
    x = torch.randn(1, 3, 16, 16)
    path = tmp_path / "tiny.tflite"
    litert_torch.convert(model, (x,)).export(str(path))
    expected = model(x).detach().numpy()

    result = compile_and_run(path, {"serving_default": {"args_0": x.numpy()}}, accelerator="gpu")
    assert result.ok, f"{result.status}: {result.error}\n{result.log_tail()}"
    assert not result.gpu.rejected
    (got,) = result.outputs["serving_default"].values()
    assert got.shape == expected.shape
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, expected, rtol=1e-2, atol=1e-2)
    assert np.corrcoef(got.ravel(), expected.ravel())[0, 1] > 0.999
    # fp16 on a real (or software) GPU drifts in the last digits; bit-identical would mean a CPU run
    assert not np.array_equal(got, expected)


def test_hidden_vulkan_driver_is_reported_as_no_gpu():
    env = {**os.environ, "VK_ICD_FILENAMES": "/nonexistent/icd.json", "VK_DRIVER_FILES": "/nonexistent/icd.json"}
    result = probe_gpu(env=env)
    assert result.status == STATUS_NO_GPU, (result.status, result.log_tail())
    reason = (result.gpu.no_gpu_reason or "").lower()
    assert "adapter" in reason or "driver" in reason or "vulkan" in reason, reason
    message = describe(result)
    assert "Vulkan driver" in message and "install_software_gpu.py" in message
