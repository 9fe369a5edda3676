"""A stepped slice of a bool tensor (Funnel Transformer's pooled masks, `mask[:, ::2]`) converts to the bool form
of STRIDED_SLICE (version 3), which the GPU rejects (llvmpipe, software Vulkan, ai-edge-litert 2.3.0); the same slice
of a float tensor runs. `patch_bool_slice` slices the mask as 0.0 / 1.0 and compares back: bit-exact in torch, no
bool STRIDED_SLICE left, GPU-only and right."""
import pytest
import torch
import torch.nn as nn

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper


class PooledMask(nn.Module):
    """Funnel's stride_pool on a mask: the first row kept apart, then every second row; a stepped column slice."""

    def forward(self, x):
        mask = x > 0
        pooled = torch.cat([mask[:, :1], mask], 1)[:, 0:-1:2]
        return torch.where(pooled, x[:, ::2], -x[:, ::2]) + mask[:, ::2, 1::3].float().sum(-1, keepdim=True)


def _x():
    return torch.randn(2, 16, 12, generator=torch.Generator().manual_seed(0))


def test_exact_in_torch():
    with torch.no_grad():
        assert torch.equal(GpuRewriteWrapper(PooledMask(), include=["patch_bool_slice"])(_x()), PooledMask()(_x()))


def _bool_strided_slices(path):
    info = read_model_info(path)
    return [op.index for op in info.ops_named("STRIDED_SLICE") if info.tensor(op.inputs[0]).dtype == "bool"]


@pytest.mark.gpu
def test_gpu(gpu, tmp_path):
    plain = convert_for_gpu(PooledMask(), (_x(),), tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "FALLBACK" and "STRIDED_SLICE" in plain.summary(), plain.summary()
    assert _bool_strided_slices(plain.path)
    fixed = convert_for_gpu(PooledMask(), (_x(),), tmp_path / "fixed.tflite", only=["patch_bool_slice"])
    assert fixed.ok, fixed.summary()
    assert not _bool_strided_slices(fixed.path)
