"""Means and sums over >= 1024 elements: `patch_safe_reductions` (prescaled by 2^-k, default where the example
inputs' sums can pass fp16's range) and `patch_pooled_reductions` (a cascade of small average pools, opt-in).

The failure is a phone's: an fp16 accumulator over a long reduction overflows, stops growing, or counts each
term as 0 or twice its size once the sum is ~2048 terms large. The desktop delegate here reduces correctly, so
the failure is shown by emulating an fp16 running sum (numpy, rounded to fp16 after every add). The spec's
checks: bit-identical (prescaled) / equal to 1e-6 of mean|x| against a float64 reference (pooled) in torch; the
graph (two MULs around the MEAN / no long MEAN or SUM left); strict GPU-only runs that match torch, and
`convert_for_gpu` applying the default by itself."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.lowering.export import export_tflite
from litert_gpu_toolkit.lint.mobile import lint_for_mobile
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.apply import apply_patches
from litert_gpu_toolkit.rewrites.fp16_overflow import hierarchical_mean
from litert_gpu_toolkit.rewrites.functional import GpuRewriteMode, GpuRewriteWrapper, load_rewrites
from wall_checks import _gpu_clean

CALLS = {
    "x.mean((2, 3), keepdim)": lambda x: x.mean((2, 3), keepdim=True),
    "torch.mean(dim=[-1, -2])": lambda x: torch.mean(x, dim=[-1, -2]),
    "x.sum(dim=(2, 3))": lambda x: x.sum(dim=(2, 3)),
    "torch.sum(x, 3)": lambda x: torch.sum(x.flatten(2).unsqueeze(2), 3),
    "adaptive_avg_pool2d(x, 1)": lambda x: F.adaptive_avg_pool2d(x, 1),
    "nn.AdaptiveAvgPool2d((1, 1))": nn.AdaptiveAvgPool2d((1, 1)),
    "adaptive_avg_pool1d(x, 1)": lambda x: F.adaptive_avg_pool1d(x.flatten(2), 1),
    "avg_pool2d(x, x.shape[2:])": lambda x: F.avg_pool2d(x, x.shape[2:]),
    "x.mean()": lambda x: x.mean(),
    "x.flatten(2).mean(-1)": lambda x: x.flatten(2).mean(-1),
}


def _rewritten(f, x):
    load_rewrites()
    mode = GpuRewriteMode(include=["patch_pooled_reductions"])
    with mode:
        y = f(x)
    return y, mode.changes


@pytest.mark.parametrize("call", sorted(CALLS))
def test_equal_to_the_reduction_in_fp32(call):
    x = torch.randn(2, 8, 56, 72, generator=torch.Generator().manual_seed(0)) * 3 + 1     # 56 x 72: padded
    f = CALLS[call]
    want, (got, changes) = f(x.double()), _rewritten(f, x)
    assert [c.rewrite for c in changes] == ["patch_pooled_reductions"]
    assert got.shape == want.shape and got.dtype == torch.float32
    n = x.numel() / want.numel()
    scale = x.abs().mean() * (n if "sum" in call else 1.0)
    assert float((got.double() - want).abs().max()) <= 1e-6 * float(scale)


@pytest.mark.parametrize("f", [lambda x: x[:, :, :7, :7].mean((2, 3)), lambda x: x.mean(1),
                               lambda x: x.long().sum((2, 3)).float()])
def test_short_or_integer_reductions_are_left_alone(f):
    x = torch.randn(1, 8, 64, 64)
    got, changes = _rewritten(f, x)
    assert not changes and torch.equal(got, f(x))


def _fp16_running_sum(values: np.ndarray) -> np.ndarray:
    """Sum over the last axis the way an fp16 accumulator does: rounded to fp16 after every add."""
    return np.cumsum(values.astype(np.float16), axis=-1, dtype=np.float16)[..., -1]


class _Fp16Pools(TorchFunctionMode):
    """Every average pool of the cascade computed with an fp16 running sum over its window."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not F.avg_pool2d:
            return func(*args, **kwargs)
        y, k = args[0], args[1]
        kh, kw = (k, k) if isinstance(k, int) else k
        b, c, h, w = y.shape
        win = y.numpy().reshape(b, c, h // kh, kh, w // kw, kw).transpose(0, 1, 2, 4, 3, 5)
        sums = _fp16_running_sum(win.reshape(b, c, h // kh, w // kw, kh * kw))
        return torch.from_numpy(sums / np.float16(kh * kw))


# (values, what a running fp16 sum does with them): terms of ~500 pass 65504 after ~130 adds; terms of ~8 stop
# counting at 32768 (its spacing there is 32); terms of ~1.05 count as 2 once past 2048 (spacing 2)
FP16_SUMS = {
    "overflow": (lambda g: torch.rand(1, 4, 64, 64, generator=g) * 1000, "inf"),
    "stall": (lambda g: torch.rand(1, 4, 112, 112, generator=g) * 16, "low"),
    "rounding": (lambda g: 1 + 0.1 * torch.rand(1, 4, 64, 64, generator=g), "off"),
}


@pytest.mark.parametrize("case", sorted(FP16_SUMS))
def test_an_fp16_accumulator_fails_on_the_plain_reduction_and_not_on_the_pooled_one(case):
    make, failure = FP16_SUMS[case]
    x = make(torch.Generator().manual_seed(1))
    want = x.double().mean((2, 3)).numpy().ravel()
    with np.errstate(over="ignore"):
        plain = _fp16_running_sum(x.numpy().reshape(4, -1)).astype(np.float64) / x[0, 0].numel()
    with _Fp16Pools():
        cascade = hierarchical_mean(x.half(), (2, 3), keepdim=False).double().numpy().ravel()
    if failure == "inf":
        assert not np.isfinite(plain).any()
    elif failure == "low":
        assert np.all(plain < 0.5 * want)
    else:
        assert np.all(np.abs(plain / want - 1) > 0.04)
    assert np.all(np.abs(cascade / want - 1) < 2e-3), (cascade, want)      # fp16 rounding of a few stages


class SqueezeExcite(nn.Module):
    """A 112 x 112 squeeze-excite, a long sum and a global pool: the three shapes the rewrite takes."""

    def __init__(self, c=16):
        super().__init__()
        self.conv, self.fc1, self.fc2 = nn.Conv2d(3, c, 3, padding=1), nn.Conv2d(c, 8, 1), nn.Conv2d(8, c, 1)

    def forward(self, x):
        y = F.relu(self.conv(x))
        gate = torch.sigmoid(self.fc2(F.relu(self.fc1(y.mean((2, 3), keepdim=True)))))
        return y * gate, y.sum((2, 3)) / 4096.0, F.adaptive_avg_pool2d(y, 1).flatten(1)


def _model_and_input():
    torch.manual_seed(0)
    return SqueezeExcite().eval(), (torch.randn(1, 3, 112, 112) * 4,)


class _Model(nn.Module):
    """One reduction call from CALLS as a model."""

    def __init__(self, call):
        super().__init__()
        self.call = call

    def forward(self, x):
        return CALLS[self.call](x)


@pytest.mark.parametrize("call", sorted(CALLS))
def test_prescaled_is_bit_identical(call):
    x = torch.rand(1, 8, 56, 72, generator=torch.Generator().manual_seed(2)) * 50      # sums ~1e5 per channel
    model = _Model(call)
    want = model(x)
    assert apply_patches(model, (x,), only=["patch_safe_reductions"])
    wrapped = GpuRewriteWrapper(model, include=["patch_safe_reductions"])
    assert torch.equal(wrapped(x), want)
    assert [c.rewrite for c in wrapped.changes] == ["patch_safe_reductions"]


@pytest.mark.parametrize("scale, rewritten", [(4.0, 3), (0.05, 0)])
def test_by_default_only_where_the_sum_can_leave_fp16(scale, rewritten):
    """convert_for_gpu's pre-pass: the three reductions see sums of |x| near 1e5 at scale 4 and near 1e3 at 0.05
    (under the 2^13 limit): rewritten in the first model only, and the wrapper follows the pre-pass; without a
    pre-pass nothing is rewritten."""
    model, (x,) = _model_and_input()
    changes = apply_patches(model, (x * scale / 4,))
    assert len([c for c in changes if c.rewrite == "patch_safe_reductions"]) == rewritten
    wrapped = GpuRewriteWrapper(model, include=["patch_safe_reductions"])
    with torch.no_grad():
        wrapped(x * scale / 4)
    assert len([c for c in wrapped.changes if c.rewrite == "patch_safe_reductions"]) == rewritten
    fresh = GpuRewriteWrapper(SqueezeExcite().eval(), include=["patch_safe_reductions"])
    with torch.no_grad():
        fresh(x)
    assert not [c for c in fresh.changes if c.rewrite == "patch_safe_reductions"]


def test_the_graphs(tmp_path):
    model, args = _model_and_input()
    plain = export_tflite(model, args, tmp_path / "plain.tflite")
    assert sorted(f.op for f in lint_for_mobile(plain) if f.symptom == "long_reduction") == ["MEAN", "MEAN", "SUM"]
    pooled = export_tflite(GpuRewriteWrapper(model, include=["patch_pooled_reductions"]), args,
                           tmp_path / "pooled.tflite")
    assert not [f.line() for f in lint_for_mobile(pooled) if f.symptom == "long_reduction"]
    pools = [o.options for o in read_model_info(pooled).ops if o.op == "AVERAGE_POOL_2D"]
    assert pools and max(p["filterHeight"] * p["filterWidth"] for p in pools) <= 16
    assert apply_patches(model, args, only=["patch_safe_reductions"])
    scaled = export_tflite(GpuRewriteWrapper(model, include=["patch_safe_reductions"]), args,
                           tmp_path / "scaled.tflite")
    before, after = read_model_info(plain).op_histogram(), read_model_info(scaled).op_histogram()
    added = after.pop("MUL") - before.pop("MUL")
    after.pop("RESHAPE", None), before.pop("RESHAPE", None)       # the lowering may view the scaled input
    assert 0 < added <= 6 and after == before     # at most two MULs per reduction (the converter shares some)


@pytest.mark.slow
def test_on_the_gpu_and_by_default(gpu, tmp_path):
    model, args = _model_and_input()
    _gpu_clean(GpuRewriteWrapper(model, include=["patch_pooled_reductions"]), args, tmp_path / "pooled.tflite")
    result = convert_for_gpu(model, args, tmp_path / "auto.tflite")
    assert result.verdict == "PASS", result.summary()
    assert "patch_safe_reductions" in {c.rewrite for c in result.changes}
