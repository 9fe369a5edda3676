"""`patch_rescale_products`: a product past fp16's range whose scale cancels later, scaled by 2^-k until it does.

The models built to show it: ReLU linear attention (q @ (k^T @ [v, 1]), then a ratio of its columns) whose
products reach ~1e6 although the ratio is O(1), and a Global Response Normalisation whose x * (|x| / mean |x|)
passes 65504 before a small gain. The spec's checks: bit-identical outputs in fp32 torch and finite, close
outputs in torch's own fp16 where the plain model's are not; the graph gains MULs and nothing else; on the GPU
the plain model's non-finite output turned into a match, by default in convert_for_gpu. Left alone where the
scaled value would reach a model output or a nonlinearity."""

import collections

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.rewrites.fp16_overflow import patch_rescale_products
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from wall_checks import _convert, _gpu_clean, _gpu_wrong

NAME = "patch_rescale_products"


class LinearAttention(nn.Module):
    """ends: "ratio" (the products' scale cancels in the division), "output" (q @ kv is returned as it is) or
    "softmax" (a nonlinearity reads it)."""

    def __init__(self, ends="ratio", d=16, silent_token=False):
        super().__init__()
        torch.manual_seed(0)
        self.qkv, self.proj, self.ends, self.eps = nn.Linear(d, 3 * d), nn.Linear(d, d), ends, 1e-5
        keep = torch.ones(256, 1)
        if silent_token:                      # a token whose ReLU query is all zero: q . sum(k) = 0, torch gives 0
            keep[7] = 0
        self.register_buffer("keep", keep)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k = F.relu(q) * self.keep, F.relu(k)
        v = F.pad(v, (0, 1), mode="constant", value=1.0)
        out = q @ (k.transpose(-1, -2) @ v)
        if self.ends == "output":
            return out
        if self.ends == "softmax":
            return out.softmax(-1)
        return self.proj(out[..., :-1] / (out[..., -1:] + self.eps))


class GlobalResponseNorm(nn.Module):
    """timm's spelling (addcmul) or Hugging Face's (weight * (x * n) + bias + x)."""

    def __init__(self, c=8, spelling="timm"):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.02, 0.08, c))
        self.bias = nn.Parameter(torch.linspace(-0.1, 0.1, c))
        self.spelling = spelling

    def forward(self, x):                    # channels last, as ConvNeXt-V2 calls it
        g = x.norm(p=2, dim=(1, 2), keepdim=True)
        n = g / (g.mean(dim=-1, keepdim=True) + 1e-6)
        if self.spelling == "hf":
            return self.weight * (x * n) + self.bias + x
        return x + torch.addcmul(self.bias.view(1, 1, 1, -1), self.weight.view(1, 1, 1, -1), x * n)


class HfGlobalResponseNorm(GlobalResponseNorm):
    def __init__(self):
        super().__init__(spelling="hf")


def _attention_inputs():
    return (torch.randn(1, 2, 256, 16, generator=torch.Generator().manual_seed(1)) * 30,)


def _grn_inputs():
    x = torch.randn(1, 16, 16, 8, generator=torch.Generator().manual_seed(2))
    x[..., 0] *= 4000               # one outlier channel: its |x| is ~8x the mean norm, x * n ~ 1e5
    return (x,)


CASES = [(LinearAttention, _attention_inputs), (GlobalResponseNorm, _grn_inputs), (HfGlobalResponseNorm, _grn_inputs)]


def _planned(cls, inputs):
    model, x = cls().eval(), inputs()
    assert patch_rescale_products(model, x) == []          # the functional pass lists the changes
    return model, x, GpuRewriteWrapper(model, include=[NAME])


@pytest.mark.parametrize("cls,inputs", CASES)
def test_bit_identical_in_fp32_and_finite_in_fp16(cls, inputs):
    model, x, wrapped = _planned(cls, inputs)
    with torch.no_grad():
        want = model(*x)
        assert torch.equal(wrapped(*x), want)
        assert {c.rewrite for c in wrapped.changes} == {NAME}
        half = [t.half() for t in x]
        assert not torch.isfinite(model.half()(*half)).all()       # the plain model in fp16: inf / NaN
        got = wrapped(*half).float()
    assert torch.isfinite(got).all()
    err = (got - want).abs().max() / want.abs().max()
    assert err < 2e-2, err


def test_an_eps_scaled_below_fp16s_range_is_kept_at_its_smallest_subnormal():
    """eps 1e-5 x 2^-12 would round to 0 in fp16: the silent token's row would be 0 / 0 = NaN; kept at 2^-24 it is
    0 as in torch (and the fp32 outputs stay within 2^-16 of their scale)."""
    model, x = LinearAttention(silent_token=True).eval(), _attention_inputs()
    patch_rescale_products(model, x)
    wrapped = GpuRewriteWrapper(model, include=[NAME])
    with torch.no_grad():
        want = model(*x)
        got32 = wrapped(*x)
        assert wrapped.changes
        assert float((got32 - want).abs().max()) <= 2.0 ** -16 * float(want.abs().max())
        got = wrapped.half()(*[t.half() for t in x]).float()
    assert torch.isfinite(got).all()
    assert torch.allclose(got[..., 7, :], want[..., 7, :], atol=1e-2)


@pytest.mark.parametrize("ends", ["output", "softmax"])
def test_left_alone_when_the_scale_cannot_cancel(ends):
    model, x = LinearAttention(ends).eval(), _attention_inputs()
    patch_rescale_products(model, x)
    wrapped = GpuRewriteWrapper(model, include=[NAME])
    with torch.no_grad():
        assert torch.equal(wrapped(*x), model(*x))
    assert wrapped.changes == []


def test_nothing_planned_without_large_products():
    model, x = LinearAttention().eval(), (_attention_inputs()[0] / 30,)
    patch_rescale_products(model, x)
    wrapped = GpuRewriteWrapper(model, include=[NAME])
    with torch.no_grad():
        wrapped(*x)
    assert wrapped.changes == []


def test_the_graph_gains_muls_only(tmp_path):
    model, x, wrapped = _planned(LinearAttention, _attention_inputs)
    plain = collections.Counter(o.op for o in _convert(LinearAttention(), x, tmp_path / "plain.tflite").ops)
    scaled = collections.Counter(o.op for o in _convert(wrapped, x, tmp_path / "scaled.tflite").ops)
    added = scaled - plain
    assert set(added) == {"MUL"} and not plain - scaled, (plain, scaled)


@pytest.mark.slow
@pytest.mark.parametrize("cls,inputs", CASES)
def test_on_the_gpu_and_by_default(gpu, tmp_path, cls, inputs):
    """Both halves with the overflow-safe L2 norm (GRN's |x| over the plane passes 65504 by itself), so the
    products are what differs."""
    x, norm = inputs(), "patch_safe_vector_norm"
    _gpu_wrong(GpuRewriteWrapper(cls().eval(), include=[norm]), x, tmp_path / "plain.tflite")
    model = _planned(cls, inputs)[0]
    _gpu_clean(GpuRewriteWrapper(model, include=[NAME, norm]), x, tmp_path / "scaled.tflite")
    result = convert_for_gpu(cls().eval(), x, tmp_path / "auto.tflite")
    assert result.verdict == "PASS", result.summary()
    assert NAME in {c.rewrite for c in result.changes}
