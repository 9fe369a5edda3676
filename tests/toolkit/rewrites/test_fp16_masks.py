"""Masks that hold finfo(float32).min on the fp16 GPU (llvmpipe, software Vulkan, ai-edge-litert 2.3.0).

Two NaN sources, each with a default rewrite:
  * a fully masked softmax row: uniform in torch, -inf - -inf = NaN on the GPU -> `patch_safe_softmax`;
  * masked_fill / where with a finite constant beyond fp16's range, blended as c * m -> inf * 0 = NaN ->
    `arith_where` builds that branch as clamp(log(1 - m), min=c).
Each is shown three ways: equal to torch in fp32, the op gone / changed in the graph, GPU-only match.
"""
import torch
import torch.nn as nn

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.fp16_overflow import safe_softmax
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.rewrites.select import arith_where

MIN = torch.finfo(torch.float32).min


class MaskedAttention(nn.Module):
    """Scores + an additive padding mask where the last query rows see no key at all (a sliding window over
    padding does this), then softmax and the value product."""

    def forward(self, q, k, v, keep):
        scores = q @ k.transpose(-1, -2)
        mask = torch.where(keep > 0.5, 0.0, MIN)              # [B, 1, S, S]
        return torch.softmax(scores + mask, dim=-1) @ v


class MaskedFill(nn.Module):
    def forward(self, x, drop):
        return torch.softmax(x.masked_fill(drop > 0.5, MIN), dim=-1)


def _attention_inputs():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 16, generator=g) for _ in range(3))
    keep = torch.ones(1, 1, 8, 8).tril()
    keep[..., 6:, :] = 0                                      # rows 6 and 7: every key masked
    return q, k, v, keep


def test_safe_softmax_equals_torch_on_masked_rows():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 6, 9, generator=g) * 20
    mask = torch.zeros(4, 6, 9)
    mask[:, :, 5:] = MIN                                       # partly masked rows
    mask[:, 2] = MIN                                           # a fully masked row
    for dim in (-1,):
        assert torch.equal(safe_softmax(x + mask, dim), torch.softmax(x + mask, dim))
    assert torch.equal(safe_softmax(x, -1, torch.float64), torch.softmax(x, -1, dtype=torch.float64))
    out = GpuRewriteWrapper(MaskedAttention(), include=["patch_safe_softmax"])(*_attention_inputs())
    assert torch.equal(out, MaskedAttention()(*_attention_inputs()))


def test_big_constant_fill_equals_torch():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 7, generator=g)
    cond = torch.rand(3, 7, generator=g) > 0.5
    assert torch.equal(arith_where(cond, MIN, x), torch.where(cond, MIN, x))
    assert torch.equal(arith_where(cond, x, -MIN), torch.where(cond, x, -MIN))


def _muls_with_big_constants(path):
    info = read_model_info(path)
    big = []
    for op in info.ops_named("MUL"):
        for i in op.inputs:
            value = info.constant_value(i) if i >= 0 else None
            if value is not None and value.size and float(abs(value).max()) > 65504:
                big.append(op.index)
    return big


def test_fully_masked_rows_on_the_gpu(gpu, tmp_path):
    """Plain: NaN in the fully masked rows on the fp16 GPU. Defaults: a MAXIMUM ahead of every SOFTMAX, PASS."""
    args = _attention_inputs()
    plain = convert_for_gpu(MaskedAttention(), args, tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "NUMERICS_FAIL", plain.summary()
    fixed = convert_for_gpu(MaskedAttention(), args, tmp_path / "fixed.tflite",
                            only=["patch_safe_softmax", "patch_select"])
    assert fixed.ok, fixed.summary()
    info = read_model_info(fixed.path)
    producers = info.producers()
    for op in info.ops_named("SOFTMAX"):
        assert producers[op.inputs[0]].op == "MAXIMUM"


def test_big_constant_fill_on_the_gpu(gpu, tmp_path):
    """patch_select's blend used to be c * m with c = finfo.min: NaN everywhere on the fp16 GPU; now no MUL takes
    a constant beyond fp16's range and the file PASSes."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 12, generator=g)
    drop = (torch.rand(2, 4, 12, generator=g) > 0.6).float()
    drop[..., 0] = 0                                           # every row keeps an entry
    fixed = convert_for_gpu(MaskedFill(), (x, drop), tmp_path / "fill.tflite", only=["patch_select"])
    assert fixed.ok, fixed.summary()
    assert not _muls_with_big_constants(fixed.path)


class ScaledMask(nn.Module):
    """Funnel's attention mask: the scores minus 1e6 times (1 - mask) -- a product with a number fp16 cannot hold
    (inf on the fp16 GPU, and 0 * inf = NaN at every kept position) -- and XLNet-style 1e30 on the other side."""

    def forward(self, q, k, mask):                            # mask: [B, S] of 0 / 1, as HF's attention_mask
        scores = q @ k.transpose(-1, -2) - 1e6 * (1 - mask[:, None, None].float())
        return torch.softmax(scores, dim=-1) + torch.softmax(q @ k.transpose(-1, -2) + (mask[:, None, None] - 1)
                                                             * 1e30, dim=-1)


def _scaled_mask_inputs():
    g = torch.Generator().manual_seed(3)
    q, k = (torch.randn(2, 2, 8, 16, generator=g) for _ in range(2))
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0                                           # the second sequence is padded
    return q, k, mask


def test_a_mask_scaled_past_fp16_is_exact_in_torch_and_never_a_product_with_the_number():
    from litert_gpu_toolkit.rewrites.fp16_overflow.mask_fill import big_scale

    t = torch.tensor([0.0, 1.0, -1.0, 0.25, -3.5, 1e-3])
    for c in (1e6, -1e6, 1e30, -7e4):
        got, ref = big_scale(t, c), c * t
        assert torch.allclose(got, ref, rtol=1e-5, atol=0), (c, got, ref)
        assert float(got[0]) == 0.0
    with torch.no_grad():
        got = GpuRewriteWrapper(ScaledMask(), include=["patch_mask_scale_exact"])(*_scaled_mask_inputs())
        assert torch.equal(got, ScaledMask()(*_scaled_mask_inputs()))   # softmax: the same zeros and weights


def test_a_mask_scaled_past_fp16_on_the_gpu(gpu, tmp_path):
    args = _scaled_mask_inputs()
    plain = convert_for_gpu(ScaledMask(), args, tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "NUMERICS_FAIL", plain.summary()
    fixed = convert_for_gpu(ScaledMask(), args, tmp_path / "fixed.tflite",
                            only=["patch_mask_scale_exact", "patch_safe_softmax", "patch_matmul_operands"])
    assert fixed.ok, fixed.summary()
    assert _muls_with_big_constants(plain.path) and not _muls_with_big_constants(fixed.path)
