"""Identical / degenerate inputs: softmax over one element and x - x, x / x (exact, GPU-only)."""

import torch
import torch.nn.functional as F
from torch import nn

from litert_gpu_toolkit.rewrites.identical_or_constant_inputs import patch_degenerate_softmax
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.runtime.compiled import compile_and_run

from wall_checks import INF, _close, _convert, _gpu_clean, _same  # noqa: F401


class Degenerate(nn.Module):
    """A perceiver-style read-out over a one-entry constant latent bank, plus x / x and x - x."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(6)
        self.latents = nn.Parameter(torch.randn(1, 1, 16))
        self.q, self.k = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        attn = torch.softmax(self.q(self.latents) @ self.k(self.latents).transpose(-1, -2) / 4, dim=-1)
        y = x.abs() + 0.5
        # sigmoid / tanh keep the rewritten outputs distinct ops (an output that folds to the input
        # itself is a converter edge case of its own)
        return x + attn @ self.latents, torch.sigmoid(x * (y / y)), torch.tanh(x + (y - y))


DG_ARGS = (torch.randn(1, 3, 16),)


def test_degenerate_special_cases_are_exact():
    x = torch.randn(2, 1, 5) * 10
    for f, g in [(lambda t: torch.softmax(t, 1), lambda t: torch.ones_like(t)),
                 (lambda t: F.log_softmax(t, dim=-2), lambda t: torch.zeros_like(t)),
                 (lambda t: t.softmax(dim=1, dtype=torch.float64), lambda t: torch.ones_like(t, dtype=torch.float64))]:
        class M(nn.Module):
            def forward(self, t):
                return f(t)
        wrapped = GpuRewriteWrapper(M(), include=["patch_degenerate_softmax"])
        out = wrapped(x)
        assert torch.equal(out, f(x)) and torch.equal(out, g(x)) and wrapped.changes
    model = Degenerate()
    ref = model(*DG_ARGS)
    patch_degenerate_softmax(model)
    for out, r in zip(model(*DG_ARGS), ref):
        assert torch.equal(out, r)
    class Other(nn.Module):          # equal values, different tensors: left alone
        def forward(self, t):
            return t / t.clone()
    w = GpuRewriteWrapper(Other(), include=["patch_degenerate_softmax"])
    w(x)
    assert not w.changes


def test_degenerate_plain_conversion_is_declined_by_gpu(tmp_path, gpu):
    _convert(Degenerate(), DG_ARGS, tmp_path / "plain.tflite")
    run = compile_and_run(tmp_path / "plain.tflite", None, accelerator="gpu")
    assert run.status == "ops_rejected", run.status
    reasons = " ".join(r.reason for r in run.gpu.rejected)
    assert "identical inputs" in reasons and {"DIV", "SUB"} <= {r.op for r in run.gpu.rejected}, run.gpu.rejected


def test_degenerate_rewritten_is_gpu_clean(tmp_path, gpu):
    model = Degenerate()
    patch_degenerate_softmax(model)
    res = _gpu_clean(model, DG_ARGS, tmp_path / "rewritten.tflite")
    for op in res.info.ops:
        if op.op in ("DIV", "SUB"):
            assert op.inputs[0] != op.inputs[1], op


# ============================================================================ registration


class OneKeyAttention(nn.Module):
    """MobileViT's patch transformer at a small map: fused attention over one key, and a softmax over a length-1
    axis of a rank-5 view (DIV(e, e) once converted, declined by the GPU)."""

    def forward(self, q, k, v, w):
        a = F.scaled_dot_product_attention(q, k, v) + q
        b = w.view(2, 3, 1, 4, 2).softmax(dim=2).reshape(2, 3, 8) * w + w.sigmoid()
        return a, b


def _one_key_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 3, 1, 8, generator=g), torch.randn(2, 3, 1, 8, generator=g),
            torch.randn(2, 3, 1, 8, generator=g), torch.randn(2, 3, 8, generator=g))


def test_one_key_attention_is_exact():
    names = ["patch_degenerate_softmax", "lower_rank_views"]
    with torch.no_grad():
        for got, want in zip(GpuRewriteWrapper(OneKeyAttention(), include=names)(*_one_key_inputs()),
                             OneKeyAttention()(*_one_key_inputs())):
            assert torch.equal(got, want)


def test_one_key_attention_is_gpu_clean(tmp_path, gpu):
    from litert_gpu_toolkit import convert_for_gpu

    plain = convert_for_gpu(OneKeyAttention(), _one_key_inputs(), tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "FALLBACK", plain.summary()
    fixed = convert_for_gpu(OneKeyAttention(), _one_key_inputs(), tmp_path / "fixed.tflite",
                            only=["patch_degenerate_softmax", "lower_rank_views", "patch_fold_constants",
                                  "patch_constant_operand_rank4"])
    assert fixed.ok, fixed.summary()
