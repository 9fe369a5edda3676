"""Assignment into a strided slice (YOLO pose's `y[:, 2::3] = y[:, 2::3].sigmoid()`) converts to STABLEHLO_PAD,
which the GPU rejects (llvmpipe, software Vulkan, ai-edge-litert 2.3.0). `patch_strided_assign` swaps the
component by concatenation on an (n, step) view: bit-exact in torch, no STABLEHLO_PAD left, GPU-only and right."""
import pytest
import torch
import torch.nn as nn

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper


class Decode(nn.Module):
    def forward(self, x):
        y = x.clone()
        y[:, 2::3] = y[:, 2::3].sigmoid()
        y[:, 0::3] = y[:, 0::3] * 2.0 + 1.0
        y[..., 1::4] = 0.5
        return y


def test_exact_in_torch():
    x = torch.randn(2, 12, 8)
    with torch.no_grad():
        assert torch.equal(GpuRewriteWrapper(Decode(), include=["patch_strided_assign"])(x), Decode()(x))


@pytest.mark.gpu
def test_gpu(gpu, tmp_path):
    x = torch.randn(1, 12, 8, generator=torch.Generator().manual_seed(0))
    plain = convert_for_gpu(Decode(), (x,), tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "FALLBACK" and "STABLEHLO_PAD" in plain.summary(), plain.summary()
    fixed = convert_for_gpu(Decode(), (x,), tmp_path / "fixed.tflite", only=["patch_strided_assign"])
    assert fixed.ok, fixed.summary()
    assert "STABLEHLO_PAD" not in read_model_info(fixed.path).op_histogram()
