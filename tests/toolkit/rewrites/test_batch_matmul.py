"""Batched matmuls the GPU rejects or miscomputes (llvmpipe, software Vulkan, ai-edge-litert 2.3.0):
a constant left operand is rejected ('non-constant tensor'); runtime operands with broadcast batch axes run and
return wrong numbers. `patch_matmul_operands` moves the constant to the right and copies the broadcast operand:
exact in torch (to fp32 rounding), the constant no longer a left BATCH_MATMUL operand, GPU-only and right.
nn.MultiheadAttention is written out so the same rules reach inside it (a learned query: attention pooling)."""
import pytest
import torch
import torch.nn as nn

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper

RULES = ["patch_matmul_operands", "patch_fold_constants"]


class LearnedQuery(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Parameter(torch.randn(1, 4, 2, 8, generator=torch.Generator().manual_seed(0)))

    def forward(self, k, v):
        return torch.softmax(self.q @ k.transpose(-1, -2), -1) @ v


class Broadcast(nn.Module):
    def forward(self, q, k):
        return q @ k.transpose(-1, -2)                    # [1, 1, S, d] @ [1, H, d, S]


class Pooling(nn.Module):
    """SigLIP-style attention pooling: a learned probe attends over the tokens through nn.MultiheadAttention."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.probe = nn.Parameter(torch.randn(1, 1, 16))
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        return self.attn(self.probe.repeat(x.shape[0], 1, 1), x, x)[0]


class SegmentEinsum(nn.Module):
    """Funnel's relative attention: einsums of the runtime queries with learned tables, written either way round,
    and one whose table axis is summed away (torch's einsum may put the constant on the left)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(2)
        self.seg = nn.Parameter(torch.randn(2, 4, 8, generator=g))        # segments, heads, head dim
        self.rel = nn.Parameter(torch.randn(12, 4, 8, generator=g))       # relative positions, heads, head dim

    def forward(self, q):                                                  # batch, tokens, heads, head dim
        segments = torch.einsum("bind,snd->bnis", q, self.seg)
        positions = torch.einsum("tnh,binh->bnit", self.rel, q)
        summed = torch.einsum("bind,snd->bni", q, self.seg)
        return torch.cat([segments, positions], -1) + summed[..., None]


EINSUM_CASES = ["einsum"]


def _inputs():
    g = torch.Generator().manual_seed(1)
    return {"learned": (LearnedQuery(), (torch.randn(1, 4, 6, 8, generator=g), torch.randn(1, 4, 6, 8, generator=g))),
            "broadcast": (Broadcast(), (torch.randn(1, 1, 6, 8, generator=g), torch.randn(1, 4, 6, 8, generator=g))),
            "pooling": (Pooling().eval(), (torch.randn(1, 6, 16, generator=g),)),
            "einsum": (SegmentEinsum(), (torch.randn(2, 6, 4, 8, generator=g),))}


def test_einsum_with_one_constant_operand_is_one_matmul_with_the_constant_right():
    from litert_gpu_toolkit.rewrites.batch_matmul import einsum_runtime_left
    from litert_gpu_toolkit.rewrites.gather_nd.index_math import constant

    calls = []

    def matmul(a, b):
        calls.append((a.requires_grad, b.requires_grad))        # which operand comes from the runtime q
        return torch.matmul(a, b)

    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 6, 4, 8, generator=g).requires_grad_()
    table = constant(torch.randn(2, 4, 8, generator=g))
    for eq, args in [("bind,snd->bnis", (q, table)), ("snd,bind->bnsi", (table, q)), ("bind,snd->bni", (q, table)),
                     ("bind,snd->sd", (q, table))]:
        got, ref = einsum_runtime_left(eq, *args, matmul=matmul).detach(), torch.einsum(eq, *args).detach()
        assert got.shape == ref.shape and torch.allclose(got, ref, rtol=0, atol=1e-5 * float(ref.abs().max())), eq
    assert calls == [(True, False)] * 4                          # one matmul each, the runtime operand left
    assert einsum_runtime_left("bind,bjnd->bnij", q, q) is NotImplemented            # two runtime operands
    assert einsum_runtime_left("...d,snd->...sn", q, table) is NotImplemented        # an ellipsis: torch's own


@pytest.mark.parametrize("case", ["learned", "broadcast", "pooling", *EINSUM_CASES])
def test_exact_in_torch(case):
    model, args = _inputs()[case]
    with torch.no_grad():
        got, ref = GpuRewriteWrapper(model, include=RULES)(*args), model(*args)
    assert torch.allclose(got, ref, rtol=0, atol=2e-6 * float(ref.abs().max())), float((got - ref).abs().max())


def _constant_left_operands(path):
    info = read_model_info(path)
    return [op.index for op in info.ops_named("BATCH_MATMUL") if info.tensor(op.inputs[0]).is_constant]


@pytest.mark.gpu
@pytest.mark.parametrize("case,plain_verdict", [("learned", "FALLBACK"), ("broadcast", "NUMERICS_FAIL"),
                                                ("pooling", "FALLBACK"), ("einsum", "FALLBACK")])
def test_gpu(case, plain_verdict, gpu, tmp_path):
    model, args = _inputs()[case]
    plain = convert_for_gpu(model, args, tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == plain_verdict, plain.summary()
    fixed = convert_for_gpu(model, args, tmp_path / "fixed.tflite", only=RULES + ["patch_safe_softmax"])
    assert fixed.ok, fixed.summary()
    assert not _constant_left_operands(fixed.path)


class AlibiScores(nn.Module):
    """BLOOM's scores: a constant per-head bias added by baddbmm (a rank-3 add of a constant, miscomputed)."""

    def __init__(self):
        super().__init__()
        slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625]).reshape(4, 1, 1)
        self.register_buffer("alibi", slopes * torch.arange(6.0).reshape(1, 1, 6))     # [heads, 1, S]

    def forward(self, q, k, v):
        scores = self.alibi.baddbmm(q, k.transpose(-1, -2), beta=1.0, alpha=0.5)
        return torch.bmm(torch.softmax(scores, -1), v)


def _alibi_inputs():
    g = torch.Generator().manual_seed(5)
    return tuple(torch.randn(4, 6, 8, generator=g) for _ in range(3))


def test_baddbmm_written_out_is_exact():
    model = AlibiScores()
    with torch.no_grad():
        got = GpuRewriteWrapper(model, include=RULES + ["patch_constant_operand_rank4"])(*_alibi_inputs())
        ref = model(*_alibi_inputs())
    assert torch.allclose(got, ref, rtol=0, atol=1e-6)


@pytest.mark.gpu
def test_baddbmm_on_the_gpu(gpu, tmp_path):
    plain = convert_for_gpu(AlibiScores(), _alibi_inputs(), tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "NUMERICS_FAIL", plain.summary()
    fixed = convert_for_gpu(AlibiScores(), _alibi_inputs(), tmp_path / "fixed.tflite",
                            only=RULES + ["patch_constant_operand_rank4", "patch_safe_softmax"])
    assert fixed.ok, fixed.summary()


def test_the_report_names_which_batch_matmuls_break_the_rule(tmp_path):
    """The delegate says 'BATCH_MATMUL: ... non-constant tensor' once for the type; the check report lists the
    nodes whose left operand is the constant (LearnedQuery: q @ k^T has it, the value product does not)."""
    from litert_gpu_toolkit.check.rejection_sites import rejected_sites

    model, args = _inputs()["learned"]
    plain = convert_for_gpu(model, args, tmp_path / "plain.tflite", patches=False, check=False)
    info = read_model_info(plain.path)
    sites, rule = rejected_sites(info, "BATCH_MATMUL", "Not supported batched mat mul case: non-constant tensor")
    assert rule == "a constant left operand" and sites == _constant_left_operands(plain.path)
    assert len(sites) == 1 and len(info.ops_named("BATCH_MATMUL")) == 2, info.op_histogram()
    assert rejected_sites(info, "BATCH_MATMUL", "some other reason") is None
