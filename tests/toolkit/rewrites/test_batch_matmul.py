"""Batched matmuls the GPU rejects or miscomputes (llvmpipe, software Vulkan, ai-edge-litert 2.3.0):
a constant left operand is rejected ('non-constant tensor'); runtime operands with broadcast batch axes run and
return wrong numbers. `patch_matmul_operands` moves the constant to the right and copies the broadcast operand:
exact in torch (to fp32 rounding), the constant no longer a left BATCH_MATMUL operand, GPU-only and right.
nn.MultiheadAttention is written out so the same rules reach inside it (a learned query: attention pooling)."""
import pytest
import torch
import torch.nn as nn

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.model_info import read_model_info
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


def _inputs():
    g = torch.Generator().manual_seed(1)
    return {"learned": (LearnedQuery(), (torch.randn(1, 4, 6, 8, generator=g), torch.randn(1, 4, 6, 8, generator=g))),
            "broadcast": (Broadcast(), (torch.randn(1, 1, 6, 8, generator=g), torch.randn(1, 4, 6, 8, generator=g))),
            "pooling": (Pooling().eval(), (torch.randn(1, 6, 16, generator=g),))}


@pytest.mark.parametrize("case", ["learned", "broadcast", "pooling"])
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
                                                ("pooling", "FALLBACK")])
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
