"""The `einsum` rule: a two-operand einsum over a rank-5 value (MViTv2's decomposed relative positions, found by the
third held-out set) becomes permutes, reshapes and one rank-3 batched matmul, which the `rank` rule then carries at
rank <= 4. Bound: fp32 rounding (the same products, the matmul's summation order). GPU: llvmpipe (software
Vulkan), ai-edge-litert 2.3.0."""
import pytest
import torch

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.legalize import legalize
from litert_gpu_toolkit.legalize.einsum import _parse

aten = torch.ops.aten


class RelPos(torch.nn.Module):
    """timm's MViTv2 `cal_rel_pos_type`, cut down: q split into a rank-5 grid, two einsums with constant tables,
    added to the attention logits as rank-6 broadcasts."""

    def __init__(self, h=4, w=4, c=8):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.register_buffer("rh", torch.randn(h, h, c, generator=g))
        self.register_buffer("rw", torch.randn(w, w, c, generator=g))
        self.h, self.w = h, w

    def forward(self, q, attn):                          # q [B, heads, h*w, c], attn [B, heads, h*w, h*w]
        b, y, _, c = q.shape
        r = q.reshape(b, y, self.h, self.w, c)
        rel_h = torch.einsum("byhwc,hkc->byhwk", r, self.rh)
        rel_w = torch.einsum("byhwc,wkc->byhwk", r, self.rw)
        attn = attn.view(b, y, self.h, self.w, self.h, self.w) + rel_h[..., None] + rel_w[..., None, :]
        return attn.reshape(b, y, self.h * self.w, self.h * self.w).softmax(-1)


def _inputs():
    g = torch.Generator().manual_seed(1)
    return torch.randn(1, 2, 16, 8, generator=g), torch.randn(1, 2, 16, 16, generator=g)


def test_the_equation_is_read_or_left_alone():
    assert _parse("byhwc,hkc->byhwk") == ("byhwc", "hkc", "byhwk")
    for eq in ("...c,kc->...k", "ii->i", "bij,bjk,bkl->bil", "bic,bjc->bi"):   # ellipsis, trace, 3 operands, a
        assert _parse(eq) is None, eq                                          # j summed out of one operand


def test_a_rank_5_einsum_is_a_batched_matmul_and_nothing_is_left_above_rank_4():
    m, args = RelPos().eval(), _inputs()
    legal = legalize(m, args)
    assert any(d.startswith("einsum -> permutes, reshapes and a rank-3 batched matmul") for d in legal.done), legal.done
    targets = {n.target for n in legal.module.graph.nodes if n.op == "call_function"}
    assert aten.einsum.default not in targets and aten.bmm.default in targets
    assert not legal.left, legal.left                   # every value at rank <= 4
    with torch.no_grad():
        got, want = legal.module(*args), m(*args)
    assert (got - want).abs().max() <= 1e-6 * want.abs().max()     # bound: fp32 rounding


@pytest.mark.gpu
def test_a_rank_5_einsum_runs_gpu_only_and_matches(gpu, tmp_path):
    m, args = RelPos().eval(), _inputs()
    res = convert_for_gpu(m, args, tmp_path / "relpos.tflite", fallback=False, diagnose_budget_s=0)
    assert res.ok and "legalize" in res.kept, res.summary()
    print(f"\n[llvmpipe] rank-5 einsum relative positions: {res.report.summary}")
