"""SELECT: arith_where and the module / functional spellings (exact, op gone, GPU-only match)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from litert_gpu_toolkit.rewrites.select import arith_where, patch_select
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.runtime.compiled import compile_and_run

from wall_checks import INF, _close, _convert, _gpu_clean, _same


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
