"""Grouped convs the desktop GPU miscomputes (llvmpipe, software Vulkan, ai-edge-litert 2.3.0), fp16 and fp32:
channels per group not multiples of 4, and a 1x1 depthwise conv with a channel multiplier (FastViT's
`conv_scale`; 3x3 kernels are right). `patch_grouped_conv` splits the first and writes the second as per-channel
products interleaved by rank-4 reshapes: exact in torch, no grouped 1x1 CONV_2D left, GPU-only and right."""
import pytest
import torch
import torch.nn as nn

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.grouped_conv import DepthwiseMultiplier1x1, patch_grouped_conv


@pytest.mark.parametrize("mult,bias", [(2, True), (3, False), (4, True)])
def test_depthwise_multiplier_is_exact(mult, bias):
    torch.manual_seed(mult)
    conv = nn.Conv2d(6, 6 * mult, 1, groups=6, bias=bias)
    x = torch.randn(2, 6, 5, 7)
    assert torch.equal(DepthwiseMultiplier1x1(conv)(x), conv(x))


def test_patch_picks_only_the_miscomputed_forms():
    model = nn.Sequential(nn.Conv2d(8, 16, 1, groups=8), nn.Conv2d(16, 32, 3, padding=1, groups=16),
                          nn.Conv2d(32, 32, 1, groups=32), nn.Conv2d(32, 12, 3, padding=1, groups=2))
    changes = patch_grouped_conv(model)
    assert [c.path for c in changes] == ["0", "3"]
    assert isinstance(model[0], DepthwiseMultiplier1x1)


@pytest.mark.gpu
def test_gpu(gpu, tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(8, 16, 1, groups=8), nn.GELU()).eval()
    x = torch.randn(1, 8, 6, 6)
    plain = convert_for_gpu(model, (x,), tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "NUMERICS_FAIL", plain.summary()
    fixed = convert_for_gpu(model, (x,), tmp_path / "fixed.tflite", only=["patch_grouped_conv"])
    assert fixed.ok, fixed.summary()
    assert "CONV_2D" not in read_model_info(fixed.path).op_histogram()
