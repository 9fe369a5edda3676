"""Padded average pooling (llvmpipe, software Vulkan, ai-edge-litert 2.3.0): PAD + AVERAGE_POOL_2D is computed
wrongly at full residency (fp16 and fp32); count_include_pad=False converts to a REDUCE_WINDOW the GPU rejects.
`patch_avg_pool` writes it as a ones-kernel depthwise conv over the zero-padded input divided by torch's
divisor: equal to torch to fp32 rounding, no AVERAGE_POOL_2D / REDUCE_WINDOW left, GPU-only and right."""
import itertools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.avg_pool import avg_pool2d_as_conv


def test_matches_torch_for_every_option():
    g = torch.Generator().manual_seed(0)
    for h, w, k, s, p, ceil, inc in itertools.product((7, 8, 9), (5, 8), (2, 3), (1, 2, 3), (0, 1), (False, True),
                                                      (False, True)):
        if p > k // 2:
            continue
        x = torch.randn(2, 3, h, w, generator=g) * 10
        got, ref = avg_pool2d_as_conv(x, k, s, p, ceil, inc), F.avg_pool2d(x, k, s, p, ceil, inc)
        assert got.shape == ref.shape
        assert torch.allclose(got, ref, rtol=0, atol=4e-6 * float(x.abs().max())), (h, w, k, s, p, ceil, inc)
    x = torch.randn(1, 2, 9, 9, generator=g)
    assert torch.allclose(avg_pool2d_as_conv(x, 3, 2, 1, divisor_override=4), F.avg_pool2d(x, 3, 2, 1,
                                                                                            divisor_override=4))


class Pools(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.AvgPool2d(3, 2, 1)
        self.b = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.c = nn.AvgPool2d(2, 2, ceil_mode=True)

    def forward(self, x):
        return self.a(x), self.b(x), self.c(x)


def test_a_window_longer_than_the_map_builds_no_kernel_of_its_length():
    """Hugging Face EfficientNet pools its 7x7 map with AvgPool2d(1280, ceil_mode=True): one window. Written as a
    1280x1280 ones kernel per channel that constant was 8.4 GB (a full-size EfficientNet-B0 ran out of memory);
    the window is cut to the padded map, the same sum."""
    from torch.overrides import TorchFunctionMode

    class Largest(TorchFunctionMode):
        numel = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor):
                Largest.numel = max(Largest.numel, out.numel())
            return out

    x = torch.randn(1, 1280, 7, 7)
    with Largest():
        got = avg_pool2d_as_conv(x, 1280, ceil_mode=True)
    assert torch.allclose(got, F.avg_pool2d(x, 1280, ceil_mode=True), atol=1e-6)
    assert Largest.numel <= 2 * x.numel(), Largest.numel


@pytest.mark.gpu
def test_gpu(gpu, tmp_path):
    x = torch.randn(1, 8, 9, 9, generator=torch.Generator().manual_seed(1))
    plain = convert_for_gpu(nn.AvgPool2d(3, 2, 1), (x,), tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "NUMERICS_FAIL", plain.summary()
    fixed = convert_for_gpu(Pools(), (x,), tmp_path / "fixed.tflite", only=["patch_avg_pool"])
    assert fixed.ok, fixed.summary()
    ops = read_model_info(fixed.path).op_histogram()
    assert "AVERAGE_POOL_2D" not in ops and not any("REDUCE_WINDOW" in o for o in ops), ops
