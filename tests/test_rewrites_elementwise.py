"""SELECT, BROADCAST_TO, RELU_0_TO_1, amax, SPLIT, Linear channel attention, identical inputs.

For each wall: (1) the rewrite is exact in torch (odd shapes, negative values, the non-finite cases
the docstrings promise); (2) the original pattern, converted plainly, holds the offending op / fails
to convert / fails the strict GPU compile -- or, where this toolchain no longer shows the wall, the
test pins today's lowering; (3) the rewritten model converts without it, compiles GPU-only and
matches torch on the GPU (fp16, corr >= 0.999, finite).
"""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from litert_gpu_toolkit.export import export_tflite, gpu_vs_torch
from litert_gpu_toolkit.model_info import read_model_info
from litert_gpu_toolkit.rewrites import PATCHES
from litert_gpu_toolkit.rewrites.elementwise import (
    arith_where, channel_max, chunk_slices, clamp01, expand_by_cat, hardsigmoid_arith, patch_amax,
    patch_broadcast_to, patch_channel_attention_linear, patch_chunk, patch_degenerate_softmax, patch_hardsigmoid,
    patch_repeat_kv, patch_select, repeat_kv_cat, scope_rewrites, scoped_rewrites, split_slices)
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.runtime import compile_and_run

INF = float("inf")


def _convert(module, args, path, kwargs=None):
    return read_model_info(export_tflite(module.eval(), args, path, kwargs=kwargs))


def _gpu_clean(module, args, path):
    """Convert + strict GPU-only run; every output finite and correlated with torch."""
    res = gpu_vs_torch(module.eval(), args, path)
    assert res.ok, res.summary()
    assert res.run.gpu.cpu_ops in (None, 0), res.summary()
    assert res.comparisons
    for c in res.comparisons:
        assert c.nonfinite == 0 and c.corr >= 0.999, res.summary()
    return res


def _same(a, b):
    """Equal as numbers, NaN where NaN (zeros compare equal whatever their sign)."""
    return a.shape == b.shape and bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def _close(a, b, rel=2e-6):
    a, b = a.detach(), b.detach()
    fin = torch.isfinite(b)
    assert torch.equal(torch.isfinite(a), fin) and torch.equal(a[~fin & ~torch.isnan(b)], b[~fin & ~torch.isnan(b)])
    return float((a[fin] - b[fin]).abs().max() / b[fin].abs().max().clamp_min(1e-12)) <= rel if fin.any() else True


# ================================================================================== SELECT

def test_arith_where_is_exact_for_finite_and_infinite_values():
    torch.manual_seed(0)
    for shape_c, shape_a, shape_b in [((2, 5, 7, 3),) * 3, ((2, 1, 7, 3), (2, 5, 7, 3), (1, 5, 1, 3)),
                                      ((7, 3), (2, 5, 7, 3), ()), ((3,), (2, 1, 3), (1, 5, 1))]:
        c = torch.randn(shape_c) > 0
        a = torch.randn(shape_a) * 10 - 2
        b = torch.randn(shape_b) * 10 - 2
        assert torch.equal(arith_where(c, a, b), torch.where(c, a, b))
        assert _same(arith_where(c, a, b, nonfinite="finite"), torch.where(c, a, b))
    c = torch.randn(4, 9) > 0
    a, b = torch.randn(4, 9), torch.randn(4, 9)
    a[0, :] = INF                       # inf in a: used where c, unused elsewhere
    b[1, :] = -INF
    assert _same(arith_where(c, a, b), torch.where(c, a, b))
    # the plain blend turns an unused inf into NaN; the default form does not
    assert torch.isnan(arith_where(c, a, b, nonfinite="finite")).any()
    for fill in (-INF, INF, -1e4, 0.0, 3.5):       # constant branches, on either side
        assert _same(arith_where(c, fill, b), torch.where(c, fill, b))
        assert _same(arith_where(c, a, fill), torch.where(c, a, fill))
    # documented limit: a NaN in the unused branch propagates
    a_nan = torch.randn(4, 9)
    a_nan[~c] = float("nan")
    assert torch.isnan(arith_where(c, a_nan, b)[~c]).all()
    with pytest.raises(TypeError):
        arith_where(c, torch.ones(4, 9, dtype=torch.int32), 0)


def test_select_modules_are_exact_and_never_overflow():
    torch.manual_seed(1)
    x = torch.randn(2, 5, 7, 3) * 50                     # exp(+50..+150) would overflow an unused branch
    x[0, 0, 0, 0], x[0, 0, 0, 1] = INF, -INF
    for orig in (nn.ELU(), nn.ELU(0.5), nn.CELU(0.7), nn.SELU(), nn.PReLU(), nn.PReLU(5)):
        if isinstance(orig, nn.PReLU):
            with torch.no_grad():
                orig.weight.uniform_(-0.5, 0.5)
        model = nn.Sequential(orig)
        ref = model(x.clone())
        changes = patch_select(model, functional=False)
        assert len(changes) == 1 and changes[0].exact and type(model[0]) is not type(orig)
        out = model(x.clone())
        assert _close(out, ref), type(orig).__name__


def test_inplace_elu_keeps_its_aliasing():
    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.ELU(inplace=True)

        def forward(self, x):
            y = x * 1.0
            return y + self.act(y)              # y is mutated in place: 2 * elu(x)
    x = torch.randn(3, 8)
    m = Residual()
    ref = m(x)
    patch_select(m, functional=False)
    assert torch.allclose(m(x), ref, rtol=1e-6, atol=1e-7)


class BoolAssign(nn.Module):
    def forward(self, x):
        y = x * 1.0
        y[y < -0.5] = 0.25                                   # in-place masked assignment
        z = x * 2.0
        z[z[:, :, 0, 0] > 0] = torch.arange(6.0)             # prefix mask, per-row value
        return y, z


def test_select_functional_spellings_are_exact():
    torch.manual_seed(2)
    x, b = torch.randn(2, 4, 6, 6), torch.randn(1, 1, 6, 6)
    causal = torch.ones(6, 6, dtype=torch.bool).triu(1)
    cases = [
        lambda x, b: torch.where(x > 0, x, b),
        lambda x, b: x.where(b > 0, -x),
        lambda x, b: x.masked_fill(causal, -INF).softmax(-1),
        lambda x, b: (x * 1.0).masked_fill_(x > 1, 7.0),
        lambda x, b: torch.where(b > 0, 1.0, 0.0) * x,
        lambda x, b: (x * 1.0).index_put_((x < 0,), torch.tensor(-2.0)),
        lambda x, b: F.elu(x * 30) + F.celu(x, 0.5) + F.selu(x),
        lambda x, b: F.prelu(x, torch.linspace(-1, 1, 4)),
        lambda x, b: BoolAssign()(x.expand(2, 4, 6, 6)[:, :, :, :6].contiguous())[1][..., :6, :6],
    ]
    for i, f in enumerate(cases):
        class M(nn.Module):
            def forward(self, x, b):
                return f(x, b)
        wrapped = GpuRewriteWrapper(M(), include=["patch_select"])
        assert _close(wrapped(x, b), M()(x, b)), i
        assert any(c.rewrite == "patch_select" for c in wrapped.changes), i


class SelectWalls(nn.Module):
    def __init__(self, assign=False):
        super().__init__()
        self.act, self.assign = nn.ELU(), assign

    def forward(self, x, b):
        causal = torch.ones(6, 6, dtype=torch.bool).triu(1)
        outs = (self.act(x), torch.where(x > 0, x, b), x.masked_fill(causal, -INF).softmax(-1))
        return outs + (BoolAssign()(x) if self.assign else ())


SEL_ARGS = (torch.randn(1, 4, 6, 6), torch.randn(1, 1, 6, 6))


def test_select_plain_conversion_has_select_and_fails_strict_gpu(tmp_path, gpu):
    info = _convert(SelectWalls(), SEL_ARGS, tmp_path / "plain.tflite")
    hist = info.op_histogram()
    assert hist.get("SELECT", 0) >= 1 and hist.get("SELECT_V2", 0) >= 2, hist     # ELU; where; masked_fill
    run = compile_and_run(tmp_path / "plain.tflite", None, accelerator="gpu")
    # llvmpipe accepts a same-shape SELECT (ELU) but rejects the broadcast SELECT_V2, and the constant
    # rank-2 causal condition fails kernel creation ('Unable to parse bc coord for BATCH axis')
    assert not run.ok and run.status in ("ops_rejected", "compile_error"), run.status
    assert "SELECT_V2" in [r.op for r in run.gpu.rejected] or "bc coord" in run.log


def test_boolean_mask_assignment_fails_to_convert(tmp_path):
    with pytest.raises(Exception, match="(?i)boolean ind"):
        _convert(BoolAssign(), (SEL_ARGS[0],), tmp_path / "assign.tflite")


def test_prelu_lowers_without_select_on_this_toolchain(tmp_path):
    hist = _convert(nn.Sequential(nn.PReLU(4)), (SEL_ARGS[0],), tmp_path / "prelu.tflite").op_histogram()
    assert not {"SELECT", "SELECT_V2", "PRELU"} & set(hist) and "RELU" in hist, hist


def test_select_rewritten_is_gpu_clean(tmp_path, gpu):
    model = SelectWalls(assign=True)
    ref = model(*SEL_ARGS)
    changes = patch_select(model)
    assert [c.path for c in changes if c.path] == ["act"]
    for out, r in zip(model(*SEL_ARGS), ref):
        assert _close(out, r)
    res = _gpu_clean(model, SEL_ARGS, tmp_path / "rewritten.tflite")
    assert not {"SELECT", "SELECT_V2"} & set(res.info.op_histogram()), res.info.op_histogram()
    assert len(res.comparisons) == 5


# ============================================================================== BROADCAST_TO

def _hf_repeat_kv(x, n_rep):
    b, k, s, d = x.shape
    return x[:, :, None, :, :].expand(b, k, n_rep, s, d).reshape(b, k * n_rep, s, d)


def test_repeat_kv_cat_is_bit_exact_with_the_same_head_order():
    torch.manual_seed(3)
    for k in (1, 2, 3):
        for n in (1, 2, 4):
            x = torch.randn(2, k, 5, 7)
            assert torch.equal(repeat_kv_cat(x, n), _hf_repeat_kv(x, n))
            assert torch.equal(repeat_kv_cat(x, n), x.repeat_interleave(n, dim=1))
            wrapped = GpuRewriteWrapper(nn.Identity(), include=["patch_repeat_kv"])
            wrapped.model.forward = lambda t, n=n: _hf_repeat_kv(t, n)
            assert torch.equal(wrapped(x), _hf_repeat_kv(x, n))


def test_expand_by_cat_is_bit_exact():
    x = torch.randn(3, 1, 5)
    x[0, 0, 0] = INF
    for shape in [(3, 4, 5), (2, 3, 1, 5), (2, 3, 40, 5), (3, -1, 5)]:
        want = x.expand(*shape)
        assert torch.equal(expand_by_cat(x, want.shape), want)
    class M(nn.Module):
        def forward(self, x):
            return x.expand(2, 3, 17, 5) + torch.broadcast_to(x, (3, 17, 5)) + x.expand_as(torch.empty(3, 17, 5))
    wrapped = GpuRewriteWrapper(M(), include=["patch_broadcast_to"])
    assert torch.equal(wrapped(x), M()(x))


class BroadcastWalls(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.Parameter(torch.randn(1, 4, 1, 1))

    def forward(self, kv, y):
        return (_hf_repeat_kv(kv, 3) * 2,                        # runtime expand at rank 5 (GQA)
                y.expand(1, 6, 7, 16) * 2,                        # runtime expand at rank 4
                torch.cat([y.expand(1, 2, 7, 16), self.p.expand(1, 4, 7, 16)], 1))   # + constant expand


BC_ARGS = (torch.randn(1, 2, 7, 16), torch.randn(1, 1, 7, 16))


def test_broadcast_plain_conversion_has_broadcast_to_and_rank5(tmp_path, gpu):
    info = _convert(BroadcastWalls(), BC_ARGS, tmp_path / "plain.tflite")
    assert info.op_histogram().get("BROADCAST_TO", 0) >= 3, info.op_histogram()
    assert info.high_rank_tensors()
    run = compile_and_run(tmp_path / "plain.tflite", None, accelerator="gpu")
    assert run.status == "ops_rejected" and "BROADCAST_TO" in [r.op for r in run.gpu.rejected], run.status


def test_broadcast_rewritten_is_bit_exact_and_gpu_clean(tmp_path, gpu):
    model = BroadcastWalls()
    ref = model(*BC_ARGS)
    patch_repeat_kv(model)
    patch_broadcast_to(model)
    for out, r in zip(model(*BC_ARGS), ref):
        assert torch.equal(out, r)
    res = _gpu_clean(model, BC_ARGS, tmp_path / "rewritten.tflite")
    assert "BROADCAST_TO" not in res.info.op_histogram() and not res.info.high_rank_tensors()
    # the parameter's expand folded into one constant at the target shape
    assert any(t.is_constant and tuple(t.shape) == (1, 4, 7, 16) for t in res.info.tensors[0])


# ============================================================================== RELU_0_TO_1

def test_clamp01_and_hardsigmoid_are_bit_exact_everywhere():
    x = torch.cat([torch.randn(1000) * 3, torch.tensor([0.0, -0.0, 1.0, 1 - 2 ** -24, 2049.0, 3e4, 1e9, -1e9,
                                                         1e-40, INF, -INF, 3.0, -3.0, 2 ** 24 + 2.0])])
    assert torch.equal(clamp01(x), x.clamp(0, 1))
    assert torch.equal(hardsigmoid_arith(x), F.hardsigmoid(x))
    # the plain relu difference is wrong above 2**24 (fp32); clamp01 is not
    big = torch.tensor([2.0 ** 25])
    assert float(torch.relu(big) - torch.relu(big - 1)) != 1.0 and float(clamp01(big)) == 1.0

    class M(nn.Module):
        def forward(self, x):
            return (F.hardtanh(x, 0.0, 1.0) + torch.clamp(x, 0, 1) + x.clamp(min=0.0, max=1.0)
                    + torch.clip(x, 0, 1) + F.hardsigmoid(x) + x * torch.clamp(x / 6 + 0.5, 0, 1))
    wrapped = GpuRewriteWrapper(M(), include=["patch_hardsigmoid"])
    assert _same(wrapped(x), M()(x))
    assert len({c.path for c in wrapped.changes}) >= 4


class Relu01Walls(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Hardtanh(0.0, 1.0)

    def forward(self, x):
        return self.gate(x), x * torch.clamp(x / 6 + 0.5, 0, 1)     # hardswish's inner term, spelled out


R01_ARGS = (torch.cat([torch.randn(1, 8, 9, 11) * 3, torch.full((1, 8, 1, 11), 3000.0)], 2),)


def test_relu01_plain_conversion_is_rejected(tmp_path, gpu):
    info = _convert(Relu01Walls(), R01_ARGS, tmp_path / "plain.tflite")
    assert info.op_histogram().get("RELU_0_TO_1", 0) == 2, info.op_histogram()
    run = compile_and_run(tmp_path / "plain.tflite", None, accelerator="gpu")
    assert run.status == "ops_rejected" and "RELU_0_TO_1" in [r.op for r in run.gpu.rejected]


def test_hardsigmoid_and_hardswish_lower_without_relu01_on_this_toolchain(tmp_path):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.hs, self.hw = nn.Hardsigmoid(), nn.Hardswish()

        def forward(self, x):
            return self.hs(x), self.hw(x)
    hist = _convert(M(), R01_ARGS, tmp_path / "pin.tflite").op_histogram()
    assert "RELU_0_TO_1" not in hist and hist.get("HARD_SWISH") == 1, hist


def test_relu01_rewritten_is_gpu_clean(tmp_path, gpu):
    model = Relu01Walls()
    ref = model(*R01_ARGS)
    changes = patch_hardsigmoid(model)
    assert changes[0].path == "gate"
    for out, r in zip(model(*R01_ARGS), ref):
        assert torch.equal(out, r)
    res = _gpu_clean(model, R01_ARGS, tmp_path / "rewritten.tflite")
    assert "RELU_0_TO_1" not in res.info.op_histogram()
    # the row of 3000s: exactly 1.0 on the fp16 GPU (the plain relu(x) - relu(x - 1) gives 0 or 2 there)
    gate = next(iter(res.run.outputs.values()))["output_0"].reshape(ref[0].shape)
    assert (gate[:, :, -1, :] == 1.0).all()


# ===================================================================== amax, chunk / split

def test_channel_max_matches_amax_and_max():
    torch.manual_seed(4)
    x = torch.randn(2, 5, 7, 3) - 1
    for dim, keep in [(1, True), (1, False), (-1, False), ((2, 3), True), ((1, 2), False), ((), False), (0, True)]:
        assert torch.equal(channel_max(x, dim, keep), x.amax(dim, keep)), (dim, keep)
    with pytest.raises(ValueError):
        channel_max(x, (1, 3))

    class M(nn.Module):
        def forward(self, x):
            v, i = torch.max(x, dim=1, keepdim=True)
            return x - x.amax(1, keepdim=True), torch.amax(x, dim=(2, 3)), v, i, x.max(-1).values, x.max()
    wrapped = GpuRewriteWrapper(M(), include=["patch_amax"])
    for out, r in zip(wrapped(x), M()(x)):
        assert torch.equal(out, r)


def test_chunk_and_split_slices_match_torch():
    x = torch.randn(3, 7, 6)
    for chunks in (1, 2, 3, 4, 7, 9):
        want = x.chunk(chunks, 1)
        got = chunk_slices(x, chunks, 1)
        assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want)), chunks
    for spec in (2, 3, [1, 2, 4], [7]):
        assert all(torch.equal(a, b) for a, b in zip(split_slices(x, spec, 1), torch.split(x, spec, 1)))
    class M(nn.Module):
        def forward(self, x):
            a, b = x.chunk(2, dim=-1)
            c, d = torch.split(x, [3, 4], 1)
            return a * b.sigmoid(), c.sum(1), d.sum(1), *torch.chunk(x, 3, 0)
    wrapped = GpuRewriteWrapper(M(), include=["patch_chunk"])
    assert all(torch.equal(a, b) for a, b in zip(wrapped(x), M()(x)))


class ReduceSplit(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        c, d = torch.split(x, [3, 5], dim=1)
        return x - x.amax(1, keepdim=True), a * torch.sigmoid(b), c.sum(1, keepdim=True) * d


RS_ARGS = (torch.randn(1, 8, 9, 11) - 0.5,)


def test_amax_and_chunk_current_lowering_runs_on_gpu(tmp_path, gpu):
    """This toolchain has an amax layout rewriter (REDUCE_MAX, GPU-accepted) and lowers chunk / split
    to SLICE, never SPLIT: neither wall shows. Pin that, so a converter change that brings them back is seen."""
    res = gpu_vs_torch(ReduceSplit().eval(), RS_ARGS, tmp_path / "plain.tflite")
    hist = res.info.op_histogram()
    assert "REDUCE_MAX" in hist and not {"SPLIT", "SPLIT_V"} & set(hist) and "SLICE" in hist, hist
    assert res.ok, res.summary()


def test_amax_and_chunk_rewritten_is_gpu_clean(tmp_path, gpu):
    model = ReduceSplit()
    ref = model(*RS_ARGS)
    patch_amax(model)
    patch_chunk(model)
    for out, r in zip(model(*RS_ARGS), ref):
        assert torch.equal(out, r)
    res = _gpu_clean(model, RS_ARGS, tmp_path / "rewritten.tflite")
    hist = res.info.op_histogram()
    assert "MAX_POOL_2D" in hist and "REDUCE_MAX" not in hist and not {"SPLIT", "SPLIT_V"} & set(hist), hist


# ==================================================================== Linear channel attention

class SEChannelsLast(nn.Module):
    """Squeeze-excite with the excitation MLP applied to a channels-last [N, 1, 1, C] tensor."""

    def __init__(self, c=8):
        super().__init__()
        torch.manual_seed(5)
        self.conv, self.fc1, self.fc2, self.out = nn.Conv2d(c, c, 3, padding=1), nn.Linear(c, 4), nn.Linear(4, c), \
            nn.Conv2d(c, c, 1)

    def forward(self, x):
        x = self.conv(x)
        s = x.mean((2, 3), keepdim=True).permute(0, 2, 3, 1)
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(s))))
        return self.out(x * s.permute(0, 3, 1, 2))


SE_ARGS = (torch.randn(1, 8, 9, 11),)


def test_linear_channel_attention_fails_to_convert(tmp_path):
    with pytest.raises(Exception, match="batch_matmul|broadcast-compatible"):
        _convert(SEChannelsLast(), SE_ARGS, tmp_path / "plain.tflite")


def test_linear_channel_attention_rewritten_is_gpu_clean(tmp_path, gpu):
    model = SEChannelsLast().eval()
    ref = model(*SE_ARGS)
    changes = patch_channel_attention_linear(model, SE_ARGS)
    assert sorted(c.path for c in changes) == ["fc1", "fc2"]
    assert torch.allclose(model(*SE_ARGS), ref, rtol=1e-5, atol=1e-6)
    res = _gpu_clean(model, SE_ARGS, tmp_path / "rewritten.tflite")
    assert "FULLY_CONNECTED" not in res.info.op_histogram() and "BATCH_MATMUL" not in res.info.op_histogram()


# ============================================================ identical / all-constant inputs

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

def test_patches_registered_with_their_walls():
    walls = {"patch_select": "select", "patch_repeat_kv": "broadcast_to", "patch_broadcast_to": "broadcast_to",
             "patch_hardsigmoid": "relu_0_to_1", "patch_amax": "amax", "patch_chunk": "split",
             "patch_channel_attention_linear": "linear_channel_attention",
             "patch_degenerate_softmax": "identical_or_constant_inputs"}
    for name, wall in walls.items():
        assert PATCHES[name].wall == wall and PATCHES[name].exact


def test_scope_is_per_instance_survives_deepcopy_and_leaves_torch_alone():
    import copy

    class M(nn.Module):
        def forward(self, x):
            return torch.where(x > 0, x, x.new_tensor(-INF)) * self.k

    a, b = M(), M()
    a.k = b.k = 2.0
    x = torch.tensor([1.0, -1.0])
    change = scope_rewrites(a, ["patch_select"])
    scope_rewrites(a, ["patch_chunk"])                      # adds to the same scope
    assert scoped_rewrites(a) == {"patch_select", "patch_chunk"} and change.exact
    assert not scoped_rewrites(b)                           # the other instance is untouched
    assert torch.equal(a(x), b(x))
    c = copy.deepcopy(a)
    c.k = 3.0                                               # the copy runs its own forward, still scoped
    assert torch.equal(c(x), b(x) * 1.5) and scoped_rewrites(c) == scoped_rewrites(a)
    from torch.overrides import _get_current_function_mode_stack
    assert not _get_current_function_mode_stack()           # every scope was left
    with pytest.raises(TypeError):
        a(torch.ones(2, 3), torch.ones(2))                  # a forward that raises still leaves its scope
    assert not _get_current_function_mode_stack()
    assert math.isinf(float(torch.where(x > 0, x, x.new_tensor(-INF))[1]))
