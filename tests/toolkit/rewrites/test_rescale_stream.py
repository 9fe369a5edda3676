"""`patch_rescale_stream`: a pre-norm residual stream past fp16's range, scaled by 2^-k where it is written and read.

The model built to show it: a token embedding with large weights writes a stream that reaches ~2e5; a position
table is added to it, blocks add MLP branches that start with a LayerNorm, a linear "pooling" layer reads the
stream and writes the next stage's, and a final LayerNorm ends it. In fp16 the plain graph holds inf from the
embedding on. The spec's checks: bit-identical outputs in fp32 torch, the same ops in the graph (only constants
change), and on the GPU the plain model's non-finite output turned into a match, by default in convert_for_gpu."""

import collections

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.rewrites.fp16_overflow import patch_rescale_stream
from wall_checks import _convert, _gpu_clean, _gpu_wrong


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class LoudStream(nn.Module):
    """reads: "norm" (every reader a norm or the pooling linear) or "gelu" (a nonlinearity reads the stream) or
    "output" (the stream is returned as it is)."""

    def __init__(self, d=32, reads="norm", table=True):
        super().__init__()
        torch.manual_seed(0)
        g = torch.Generator().manual_seed(0)
        self.embed = nn.Linear(16, d)
        self.pos = nn.Parameter(torch.randn(1, 8, d, generator=g) * 100)
        self.stage1 = nn.Sequential(Block(d), Block(d))
        self.pool = nn.Linear(d, d)
        self.stage2 = nn.Sequential(Block(d), Block(d))
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 10)
        self.reads, self.table = reads, table
        with torch.no_grad():
            self.embed.weight.mul_(2e5)

    def forward(self, x):
        h = self.embed(x) + self.pos if self.table else self.embed(x)
        h = self.stage2(self.pool(self.stage1(h)))
        if self.reads == "output":
            return h
        return self.head(F.gelu(h) if self.reads == "gelu" else self.norm(h))


def _inputs():
    return (torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(1)),)


def _peak(model, x, name):
    seen = {}
    hook = model.get_submodule(name).register_forward_hook(lambda m, i, o: seen.update(p=o.abs().max()))
    with torch.no_grad():
        model(*x)
    hook.remove()
    return float(seen["p"])


def test_bit_identical_and_inside_fp16():
    model, x = LoudStream().eval(), _inputs()
    with torch.no_grad():
        want = model(*x)
    before = _peak(model, x, "stage2")
    assert before > 1e5
    changes = patch_rescale_stream(model, x)
    assert [c.rewrite for c in changes] == ["patch_rescale_stream"] and changes[0].path == "embed"
    assert "2 readers" in changes[0].what or "1 readers" in changes[0].what
    with torch.no_grad():
        assert torch.equal(model(*x), want)
    after = _peak(model, x, "stage2")
    assert after < 2.0 ** 13 and before / after == 2.0 ** round(torch.log2(torch.tensor(before / after)).item())


@pytest.mark.parametrize("reads", ["gelu", "output"])
def test_left_alone_when_the_stream_does_not_close(reads):
    model, x = LoudStream(reads=reads).eval(), _inputs()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    assert patch_rescale_stream(model, x) == []
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def test_no_op_is_added(tmp_path):
    x = _inputs()
    plain = _convert(LoudStream(), x, tmp_path / "plain.tflite")
    model = LoudStream().eval()
    assert patch_rescale_stream(model, x)
    scaled = _convert(model, x, tmp_path / "scaled.tflite")
    assert collections.Counter(o.op for o in scaled.ops) == collections.Counter(o.op for o in plain.ops)


def _safe_norms(model):
    """LayerNorms as patch_safe_layernorm makes them: a plain one squares its input, past fp16's range from
    |x| ~ 256 on, so both sides of the GPU test use them and the stream is what differs."""
    from litert_gpu_toolkit.rewrites.fp16_overflow import patch_safe_layernorm

    assert patch_safe_layernorm(model)
    return model


@pytest.mark.slow
def test_on_the_gpu_and_by_default(gpu, tmp_path):
    """The halves without the position table: a rank-3 constant added to a runtime tensor is the GPU's own
    miscompute (`patch_constant_operand_rank4`, wrong in fp32 too); convert_for_gpu runs with it, table and all."""
    x = _inputs()
    _gpu_wrong(_safe_norms(LoudStream(table=False).eval()), x, tmp_path / "plain.tflite")
    model = _safe_norms(LoudStream(table=False).eval())
    assert patch_rescale_stream(model, x)
    _gpu_clean(model, x, tmp_path / "scaled.tflite")
    result = convert_for_gpu(LoudStream().eval(), x, tmp_path / "auto.tflite")
    assert result.verdict == "PASS", result.summary()
    assert "patch_rescale_stream" in {c.rewrite for c in result.changes}
