"""`patch_attention_bias_add`: a mask / position bias ADDed onto attention scores at rank 3.

On the software GPU (llvmpipe, ai-edge-litert 2.3.0) the rank-4 ADD of a folded constant onto the
scores compiles GPU-only and is wrong in fp16 and fp32; the rewrite is exact in torch, leaves no
rank-4 ADD on the scores, and matches torch on the GPU."""
import pytest
import torch
from torch import nn

from litert_gpu_toolkit.convert.pipeline import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.masked_attention import add_at_rank3
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.core.symptoms import BY_ID
from torch_helpers import Fn  # tests/torch_helpers.py


class MaskedAttention(nn.Module):
    """Scores, scaled, plus a constant causal mask [1, 1, S, S] (and a per-head bias), softmax, values."""

    def __init__(self, s=16, heads=4, per_head_bias=False):
        super().__init__()
        torch.manual_seed(0)
        mask = torch.triu(torch.full((s, s), -1e4), diagonal=1)[None, None]
        if per_head_bias:
            mask = mask + torch.randn(1, heads, s, s)
        self.register_buffer("mask", mask)

    def forward(self, q, k, v):
        scores = torch.matmul(q, k.transpose(2, 3)) * 0.25
        scores = scores + self.mask
        return torch.matmul(torch.softmax(scores, dim=-1), v)


QKV = tuple(torch.randn(1, 4, 16, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
ONLY = ["patch_attention_bias_add"]


def test_add_at_rank3_exact():
    s = torch.randn(2, 3, 5, 7)
    for bias in (torch.randn(1, 1, 5, 7), torch.randn(2, 3, 5, 7)):
        assert torch.equal(add_at_rank3(s, bias), s + bias)


@pytest.mark.parametrize("per_head", [False, True])
def test_wrapper_exact_and_only_on_scores(per_head):
    model = MaskedAttention(per_head_bias=per_head).eval()
    wrapped = GpuRewriteWrapper(model, include=ONLY)
    with torch.no_grad():
        assert torch.equal(wrapped(*QKV), model(*QKV))
    assert [c.rewrite for c in wrapped.changes] == ONLY
    residual = GpuRewriteWrapper(nn.Conv2d(4, 4, 1), include=ONLY)          # adds elsewhere: untouched
    x = torch.randn(1, 4, 5, 5)
    with torch.no_grad():
        residual(x + x)
    assert residual.changes == []
    assert "patch_attention_bias_add" in BY_ID["masked_attention"].rewrites


@pytest.mark.gpu
@pytest.mark.parametrize("per_head", [False, True])
def test_plain_is_wrong_and_rewritten_matches_on_gpu(gpu, tmp_path, per_head):
    plain = convert_for_gpu(MaskedAttention(per_head_bias=per_head), QKV, tmp_path / "plain.tflite", patches=False)
    print(f"\n[llvmpipe] plain: {plain.verdict} {plain.report.summary}")
    assert plain.verdict == "NUMERICS_FAIL", plain.summary()       # pins the GPU miscompute
    fixed = convert_for_gpu(MaskedAttention(per_head_bias=per_head), QKV, tmp_path / "fixed.tflite", only=ONLY,
                            fallback=False)
    info = read_model_info(fixed.path)
    adds = [op for op in info.ops if op.op == "ADD"]
    ranks = [info.tensor(op.outputs[0], op.subgraph).rank for op in adds]
    assert ranks and all(r == 3 for r in ranks), ranks
    assert fixed.ok, fixed.summary()
    print(f"[llvmpipe] rewritten: {fixed.report.summary}")


class CausalSdpa(nn.Module):
    """Fused attention with a constant causal mask: the rank-4 ADD of a folded constant inside the op."""

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_sdpa_with_a_constant_mask_written_out_at_rank3():
    from litert_gpu_toolkit.rewrites.masked_attention import sdpa_rank3

    q, k, v = QKV
    kv = (QKV[1][:, :2], QKV[2][:, :2])
    mask = torch.ones(16, 16, dtype=torch.bool).tril()[None, None]
    F = torch.nn.functional
    for got, want in ((sdpa_rank3(q, k, v, is_causal=True), F.scaled_dot_product_attention(q, k, v, is_causal=True)),
                      (sdpa_rank3(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, mask)),
                      (sdpa_rank3(q, *kv, mask, enable_gqa=True),
                       F.scaled_dot_product_attention(q, *kv, mask, enable_gqa=True))):
        assert torch.allclose(got, want, rtol=0, atol=2e-6), (got - want).abs().max()    # fp32 rounding
    wrapped = GpuRewriteWrapper(CausalSdpa(), include=ONLY)
    assert torch.allclose(wrapped(*QKV), CausalSdpa()(*QKV), rtol=0, atol=2e-6)
    assert [c.rewrite for c in wrapped.changes] == ONLY
    runtime_mask = GpuRewriteWrapper(Fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m)), include=ONLY)
    runtime_mask(*QKV, mask)
    assert runtime_mask.changes == []                          # a runtime mask: the fused op is left alone


@pytest.mark.gpu
def test_sdpa_with_a_constant_mask_matches_on_gpu(gpu, tmp_path):
    fixed = convert_for_gpu(CausalSdpa(), QKV, tmp_path / "sdpa.tflite", only=ONLY, fallback=False)
    info = read_model_info(fixed.path)
    ranks = [info.tensor(op.outputs[0], op.subgraph).rank for op in info.ops if op.op == "ADD"]
    assert ranks and all(r == 3 for r in ranks), ranks
    assert fixed.ok, fixed.summary()
    print(f"\n[llvmpipe] sdpa rewritten: {fixed.report.summary}")


class PerHeadBias(nn.Module):
    """LeViT's attention: a learned [H, N, N] bias (rank 3, folded to a constant) added to the scaled scores."""

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(2, 9, 9, generator=torch.Generator().manual_seed(3)))

    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) * 0.5 + self.bias, -1) @ v


def test_rank3_bias_on_the_gpu(gpu, tmp_path):
    g = torch.Generator().manual_seed(4)
    args = tuple(torch.randn(1, 2, 9, 8, generator=g) for _ in range(3))
    rules = ["patch_fold_constants", "patch_attention_bias_add"]
    with torch.no_grad():
        assert torch.equal(GpuRewriteWrapper(PerHeadBias(), include=rules)(*args), PerHeadBias()(*args))
    # repair off: its graph bisect and `equal_rank` respelling would mend the file (tests/toolkit/test_graph_bisect.py)
    wrong = convert_for_gpu(PerHeadBias(), args, tmp_path / "wrong.tflite", only=["patch_fold_constants"],
                            diagnose_budget_s=0)
    assert wrong.verdict == "NUMERICS_FAIL", wrong.summary()
    fixed = convert_for_gpu(PerHeadBias(), args, tmp_path / "fixed.tflite", only=rules)
    assert fixed.ok, fixed.summary()
