"""`patch_padded_mean`: a spatial mean fed by a division / rsqrt over a plane whose width is not a multiple of 4.

The GPU's MEAN fuses the elementwise chain before it and reduces the width 4 columns at a time; the empty lanes of
a narrower plane meet the division and give inf, in fp16 and in fp32. The spec's checks: equal to the mean to fp32
rounding in torch, the MEAN replaced by AVERAGE_POOL_2D in the graph (and only where the pre-pass saw such a chain),
and on the GPU the plain model's inf turned into a match, by default in convert_for_gpu."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.rewrites.apply import apply_patches
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from wall_checks import _convert, _gpu_clean, _gpu_wrong


class NormThenPool(nn.Module):
    """A per-position scale divided out and a pooled head, as CoAtNet's LayerNorm2d + classifier become under
    patch_safe_layernorm (there the scale is the per-position max, computed in the graph); plus the other
    spellings of the pool."""

    def __init__(self, c=32):
        super().__init__()
        self.fc = nn.Linear(c, 10)

    def forward(self, x, scale):
        y = x / scale
        y = y - y.mean(1, keepdim=True)
        return self.fc(y.mean((2, 3))), F.adaptive_avg_pool2d(y, 1), y.sum((-1, -2))


def _inputs(h=2, w=2):
    g = torch.Generator().manual_seed(0)
    return torch.randn(1, 32, h, w, generator=g) * 300, torch.rand(1, 1, h, w, generator=g) * 300 + 1


def _patched(h=2, w=2):
    model, x = NormThenPool().eval(), _inputs(h, w)
    changes = apply_patches(model, x, only=["patch_padded_mean"])
    return model, x, changes


@pytest.mark.parametrize("h, w", [(2, 2), (7, 7), (8, 6), (1, 3)])
def test_equal_to_the_mean(h, w):
    model, x, changes = _patched(h, w)
    want = model(*x)
    assert len(changes) == 3
    wrapped = GpuRewriteWrapper(model, include=["patch_padded_mean"])
    for got, ref in zip(wrapped(*x), want):
        assert got.shape == ref.shape
        torch.testing.assert_close(got, ref, rtol=2e-6, atol=2e-6 * float(ref.abs().max()))


@pytest.mark.parametrize("case", ["width 4", "width 8", "no division"])
def test_left_alone(case):
    class Plain(nn.Module):
        def forward(self, x, scale):
            return (x * scale + 1).mean((2, 3))

    model = Plain() if case == "no division" else NormThenPool()
    x = _inputs(2, 4 if case == "width 4" else 8 if case == "width 8" else 3)
    assert apply_patches(model.eval(), x, only=["patch_padded_mean"]) == []


def test_the_graph_pools_instead(tmp_path):
    model, x, _ = _patched()
    plain = _convert(NormThenPool(), x, tmp_path / "plain.tflite")
    fixed = _convert(GpuRewriteWrapper(model, include=["patch_padded_mean"]), x, tmp_path / "fixed.tflite")
    reductions = lambda info: [o.op for o in info.ops if o.op in ("MEAN", "SUM")]     # noqa: E731
    assert reductions(plain) == ["MEAN", "MEAN", "SUM"]           # the channel mean, the pools (one, shared), sum
    assert reductions(fixed) == ["MEAN"]                           # the channel mean only
    assert "AVERAGE_POOL_2D" in {o.op for o in fixed.ops} and "AVERAGE_POOL_2D" not in {o.op for o in plain.ops}


@pytest.mark.slow
def test_on_the_gpu_and_by_default(gpu, tmp_path):
    x = _inputs()
    _gpu_wrong(NormThenPool(), x, tmp_path / "plain.tflite")
    model, _, _ = _patched()
    _gpu_clean(GpuRewriteWrapper(model, include=["patch_padded_mean"]), x, tmp_path / "fixed.tflite")
    result = convert_for_gpu(NormThenPool().eval(), x, tmp_path / "auto.tflite")
    assert result.verdict == "PASS", result.summary()
    assert "patch_padded_mean" in {c.rewrite for c in result.changes}
