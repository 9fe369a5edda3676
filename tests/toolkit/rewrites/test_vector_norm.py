"""An L2 norm over a whole feature map (ConvNeXt-V2's global response normalisation) whose sum of squares leaves
fp16's range: `patch_safe_vector_norm` computes it scaled. The spec's three checks: equal to torch in fp32 within a
few ulps (bound: 1e-6 relative), the graph's squares no longer summed at full size, and on the GPU the plain model's
non-finite output turned into a match."""

import pytest
import torch
import torch.nn as nn

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.rewrites.fp16_overflow import safe_vector_norm
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from wall_checks import _gpu_clean, _gpu_wrong


class GlobalResponseNorm(nn.Module):
    """timm's GRN, channels last: each channel's L2 norm over the map, divided by its mean over channels."""

    def __init__(self, channels: int = 8):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, channels))
        self.bias = nn.Parameter(torch.linspace(-0.1, 0.1, channels))

    def forward(self, x):
        g = x.norm(p=2, dim=(1, 2), keepdim=True)
        n = g / (g.mean(dim=-1, keepdim=True) + 1e-6)
        return x + torch.addcmul(self.bias, self.weight, x * n)


def _map(scale=40.0, seed=0):
    return torch.randn(1, 24, 24, 8, generator=torch.Generator().manual_seed(seed)) * scale


@pytest.mark.parametrize("dims,keepdim", [((1, 2), True), ((1, 2), False), ((-1,), False), ((0, 1, 2, 3), True)])
def test_safe_vector_norm_matches_torch(dims, keepdim):
    for x in (_map(), _map(1e-3, 1), _map(1e4, 2)):
        want = torch.linalg.vector_norm(x, 2, dim=dims, keepdim=keepdim)
        got = safe_vector_norm(x, dims, keepdim=keepdim)
        assert got.shape == want.shape
        assert torch.allclose(got, want, rtol=1e-6, atol=0), float(((got - want).abs() / want).max())


def test_handlers_route_every_spelling_and_leave_others():
    x = _map()
    calls = {"Tensor.norm": lambda t: t.norm(p=2, dim=(1, 2)), "torch.norm": lambda t: torch.norm(t, 2, (1, 2)),
             "vector_norm": lambda t: torch.linalg.vector_norm(t, dim=(1, 2)),
             "p=1 (untouched)": lambda t: t.norm(p=1, dim=(1, 2)), "no dim (untouched)": lambda t: t.norm()}
    for name, f in calls.items():
        class M(nn.Module):
            def forward(self, t, f=f):
                return f(t)
        wrapped = GpuRewriteWrapper(M(), include=["patch_safe_vector_norm"])
        with torch.no_grad():
            got, want = wrapped(x), M()(x)
        assert torch.allclose(got, want, rtol=1e-6), name
        changed = any(c.rewrite == "patch_safe_vector_norm" for c in wrapped.changes)
        assert changed == ("untouched" not in name), name


@pytest.mark.slow
def test_safe_vector_norm_on_the_gpu(gpu, tmp_path):
    x = (_map(),)
    _gpu_wrong(GlobalResponseNorm(), x, tmp_path / "plain.tflite")
    _gpu_clean(GpuRewriteWrapper(GlobalResponseNorm().eval(), include=["patch_safe_vector_norm"]), x,
               tmp_path / "safe.tflite")
    result = convert_for_gpu(GlobalResponseNorm().eval(), x, tmp_path / "auto.tflite")   # a default
    assert result.verdict == "PASS", result.summary()
    assert "patch_safe_vector_norm" in {ch.rewrite for ch in result.changes}
