"""Recurrent layers and cells: patch_recurrent is exact, leaves no wall in the graph, and runs GPU-only right."""
import copy
import itertools

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from litert_gpu_toolkit.convert.pipeline import apply_patches, convert_for_gpu
from litert_gpu_toolkit.lowering.export import gpu_vs_torch
from litert_gpu_toolkit.rewrites.recurrent import (RTOL, ExplicitGRUCell, UnrolledGRU, UnrolledLSTM, patch_recurrent,
                                                   unrolled)

from wall_checks import _close, _convert, _gpu_clean

WALL_OPS = {"SELECT", "SELECT_V2", "GATHER", "GATHER_ND", "BROADCAST_TO", "SPLIT", "SPLIT_V", "REVERSE_V2", "WHILE"}


def _flat(out):
    return [out] if isinstance(out, torch.Tensor) else [t for o in out if o is not None for t in _flat(o)]


def _make(kind, layers=1, bidirectional=False, batch_first=True, bias=True, proj=0, dropout=0.0):
    kw = dict(num_layers=layers, bidirectional=bidirectional, batch_first=batch_first, bias=bias, dropout=dropout)
    if proj:
        kw["proj_size"] = proj
    if kind == "RNN_RELU":
        return nn.RNN(6, 7, nonlinearity="relu", **kw)
    return getattr(nn, kind)(6, 7, **kw)


def _state(kind, rnn, batch):
    dirs = rnn.num_layers * (2 if rnn.bidirectional else 1)
    h = torch.randn(dirs, *batch, getattr(rnn, "proj_size", 0) or 7)
    return (h, torch.randn(dirs, *batch, 7)) if kind == "LSTM" else h


class Seq(nn.Module):
    """A recurrent layer returning the output sequence and every state tensor."""

    def __init__(self, kind, **kw):
        super().__init__()
        self.kind, self.rnn = kind, _make(kind, **kw)

    def forward(self, x, *state):
        hx = None if not state else (state if self.kind == "LSTM" else state[0])
        out, hn = self.rnn(x, hx)
        return (out, *hn) if self.kind == "LSTM" else (out, hn)


class CellLoop(nn.Module):
    """A cell stepped over dim 1 of x in Python, starting from the zero state (hx=None)."""

    def __init__(self, kind):
        super().__init__()
        self.kind, self.cell = kind, getattr(nn, kind)(6, 7)

    def forward(self, x):
        state, outs = None, []
        for t in range(x.shape[1]):
            state = self.cell(x[:, t], state)
            outs.append(state[0] if self.kind == "LSTMCell" else state)
        return torch.cat([o.unsqueeze(1) for o in outs], 1), *(state if self.kind == "LSTMCell" else (state,))


def _batch_constants(info):
    """Elementwise ops with a constant operand that varies along a non-last axis (e.g. the batch):
    what the converter folds a zero initial state into, and what llvmpipe miscomputes."""
    found = []
    for op in info.ops:
        if op.op in ("ADD", "MUL", "SUB"):
            for t in op.inputs:
                ti = info.tensor(t)
                if t >= 0 and ti.is_constant and ti.rank >= 2 and int(torch.tensor(ti.shape[:-1]).prod()) > 1:
                    found.append((op.op, ti.shape))
    return found


# ----------------------------------------------------------------------------------- exactness (CPU)

CONFIGS = [(k, layers, bi, bf, bias, proj) for k, layers, bi, bf, bias, proj in itertools.product(
    ("LSTM", "GRU", "RNN", "RNN_RELU"), (1, 2), (False, True), (True, False), (True, False), (0, 5))
    if not proj or k == "LSTM"]


@pytest.mark.parametrize("kind,layers,bi,bf,bias,proj", CONFIGS)
def test_unrolled_layer_matches_torch(kind, layers, bi, bf, bias, proj):
    torch.manual_seed(0)
    rnn = _make(kind, layers, bi, bf, bias, proj, dropout=0.25 if layers > 1 else 0.0).eval()
    new = unrolled(copy.deepcopy(rnn)).eval()
    x = torch.randn(3, 4, 6) if bf else torch.randn(4, 3, 6)
    for args in [(x,), (x, _state(kind, rnn, (3,))), (x[0] if bf else x[:, 0],),
                 (x[0] if bf else x[:, 0], _state(kind, rnn, ()))]:      # batched / unbatched, with / without hx
        with torch.no_grad():
            ref, got = _flat(rnn(*args)), _flat(new(*args))
        assert [r.shape for r in ref] == [g.shape for g in got]
        for g, r in zip(got, ref):
            assert _close(g, r, rel=RTOL), (kind, len(args))


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell", "RNNCell"])
def test_explicit_cell_matches_torch(kind):
    torch.manual_seed(1)
    for bias, nonlin in itertools.product((True, False), ("tanh", "relu")):
        if nonlin == "relu" and kind != "RNNCell":
            continue
        cell = getattr(nn, kind)(6, 7, bias=bias, **({"nonlinearity": nonlin} if kind == "RNNCell" else {}))
        new = unrolled(copy.deepcopy(cell))
        for batch in ((3,), ()):
            h = torch.randn(*batch, 7)
            hx = (h, torch.randn(*batch, 7)) if kind == "LSTMCell" else h
            for args in [(torch.randn(*batch, 6),), (torch.randn(*batch, 6), hx)]:
                with torch.no_grad():
                    ref, got = _flat(cell(*args)), _flat(new(*args))
                assert [r.shape for r in ref] == [g.shape for g in got]
                assert all(_close(g, r, rel=RTOL) for g, r in zip(got, ref))


def test_patch_keeps_parameters_state_dict_and_the_rest_of_the_model():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm, self.cell, self.head = nn.LSTM(6, 7, 2, bidirectional=True), nn.GRUCell(14, 7), nn.Linear(7, 2)

        def forward(self, x):
            self.lstm.flatten_parameters()                   # common in model code; must keep working
            return self.head(self.cell(self.lstm(x)[0][-1]))

    class MyLSTM(nn.LSTM):                                 # a subclass may override forward: left alone
        pass

    net, x = Net().eval(), torch.randn(5, 2, 6)
    net.sub = MyLSTM(3, 3)
    keys, ref = list(net.state_dict()), net(x)
    changes = patch_recurrent(net)
    assert [c.path for c in changes] == ["lstm", "cell"] and all(c.exact for c in changes)
    assert type(net.sub) is MyLSTM and type(net.lstm) is UnrolledLSTM and type(net.cell) is ExplicitGRUCell
    assert isinstance(net.lstm, nn.LSTM) and list(net.state_dict()) == keys
    assert _close(net(x), ref, rel=RTOL)
    assert patch_recurrent(net) == [] and _close(copy.deepcopy(net)(x), ref, rel=RTOL)   # idempotent; copies
    root = nn.GRU(6, 7)                                  # the model itself: its class is swapped in place
    assert [c.path for c in patch_recurrent(root)] == [""] and type(root) is UnrolledGRU
    with pytest.raises(TypeError):
        unrolled(MyLSTM(3, 3))
    names = [c.rewrite for c in apply_patches(Net().eval(), (x,))]
    assert names.count("patch_recurrent") == 2                          # default-on


def test_packed_sequences_and_training_dropout_run_the_original_module():
    torch.manual_seed(2)
    rnn = nn.GRU(6, 7, num_layers=2, dropout=0.5, batch_first=True)
    new = unrolled(copy.deepcopy(rnn)).eval()
    x = torch.randn(3, 5, 6)
    packed = pack_padded_sequence(x, torch.tensor([5, 3, 2]), batch_first=True)
    out, h = new(packed)
    ref_out, ref_h = rnn.eval()(packed)
    assert torch.equal(out.data, ref_out.data) and torch.equal(h, ref_h)
    new.train()
    torch.manual_seed(3)
    a = new(x)[0]
    torch.manual_seed(3)
    assert torch.equal(a, rnn.train()(x)[0])                            # the same dropout draws


# ----------------------------------------------------------------------------- converted graph (no GPU)

def test_plain_gru_folds_its_zero_state_and_bidirectional_reverses_with_reverse_v2(tmp_path):
    model, x = Seq("GRU", bidirectional=True), torch.randn(2, 5, 6)
    info = _convert(model, (x,), tmp_path / "plain.tflite")
    assert info.has_op("REVERSE_V2") and _batch_constants(info), info.op_histogram()


@pytest.mark.parametrize("kind,kw,state", [
    ("GRU", dict(bidirectional=True), False),
    ("LSTM", dict(layers=2, bidirectional=True, batch_first=False), True),
    ("LSTM", dict(proj=4), False),
    ("RNN_RELU", dict(layers=2), False),
])
def test_patched_graph_has_no_wall_ops_and_no_batch_constants(tmp_path, kind, kw, state):
    torch.manual_seed(4)
    model = Seq(kind, **kw)
    x = torch.randn(2, 5, 6) if kw.get("batch_first", True) else torch.randn(5, 2, 6)
    args = (x, *_flat(_state(kind, model.rnn, (2,)))) if state else (x,)
    ref = model(*args)
    patch_recurrent(model)
    assert all(_close(g, r, rel=RTOL) for g, r in zip(model(*args), ref))
    info = _convert(model, args, tmp_path / "patched.tflite")
    hist = info.op_histogram()
    assert not WALL_OPS & set(hist) and not info.high_rank_tensors(), hist
    assert not _batch_constants(info), _batch_constants(info)
    assert hist["FULLY_CONNECTED"] >= 5


# ---------------------------------------------------------------------------------------------- GPU

class ConstantOperand(nn.Module):
    def __init__(self, c, shape):
        super().__init__()
        self.lin, self.shape = nn.Linear(6, c.shape[-1]), shape
        self.register_buffer("c", c)

    def forward(self, x):
        return torch.sigmoid(self.lin(x).reshape(self.shape) + self.c)


def test_the_gpu_miscomputes_constant_operands_that_span_a_non_last_axis(tmp_path, gpu):
    """The mechanism behind the GRU wall (llvmpipe, ai-edge-litert 2.3.0, fp32): the folded zero state."""
    torch.manual_seed(7)
    row = torch.randn(16)
    corr = {}
    for name, c, shape in [("bias [H]", row, (2, 16)), ("C[1,B,H] equal rows", row.expand(1, 2, 16).clone(), (2, 16)),
                           ("C[B,H] unequal rows", torch.randn(2, 16), (2, 16))]:
        res = gpu_vs_torch(ConstantOperand(c, shape).eval(), (torch.randn(2, 6),), tmp_path / "c.tflite",
                           enforce_f32=True)
        assert res.ok, res.summary()
        corr[name] = res.min_corr()
    assert corr["bias [H]"] > 0.99999, corr
    assert corr["C[1,B,H] equal rows"] < 0.99 and corr["C[B,H] unequal rows"] < 0.99, corr


def test_plain_gru_without_initial_state_is_wrong_on_the_gpu(tmp_path, gpu):
    """The wall itself (llvmpipe, ai-edge-litert 2.3.0): strict GPU-only compiles, the numbers are off."""
    torch.manual_seed(0)
    res = gpu_vs_torch(Seq("GRU").eval(), (torch.randn(2, 5, 6),), tmp_path / "plain.tflite", enforce_f32=True)
    assert res.ok and res.run.gpu.cpu_ops in (None, 0), res.summary()
    assert res.min_corr() < 0.9995 and max(c.max_abs for c in res.comparisons) > 1e-3, res.summary()


GPU_CASES = {
    "gru_bi_nostate": lambda: (Seq("GRU", bidirectional=True), (torch.randn(2, 5, 6),)),
    "gru_2layer_nobias": lambda: (Seq("GRU", layers=2, bias=False), (torch.randn(2, 5, 6),)),
    "lstm_2layer_bi_state": lambda: (Seq("LSTM", layers=2, bidirectional=True, batch_first=False),
                                     (torch.randn(5, 2, 6), torch.randn(4, 2, 7), torch.randn(4, 2, 7))),
    "lstm_proj": lambda: (Seq("LSTM", proj=4), (torch.randn(2, 5, 6),)),
    "rnn_relu": lambda: (Seq("RNN_RELU"), (torch.randn(2, 5, 6),)),
    "gru_cell_loop": lambda: (CellLoop("GRUCell"), (torch.randn(2, 5, 6),)),
    "lstm_cell_loop": lambda: (CellLoop("LSTMCell"), (torch.randn(2, 5, 6),)),
}


@pytest.mark.parametrize("name", list(GPU_CASES))
def test_patched_recurrent_runs_gpu_only_and_matches_torch(tmp_path, gpu, name):
    torch.manual_seed(6)
    model, args = GPU_CASES[name]()
    model.eval()
    ref = model(*args)
    assert patch_recurrent(model)
    res = _gpu_clean(model, args, tmp_path / f"{name}.tflite")                 # fp16: corr >= 0.999, finite
    assert not WALL_OPS & set(res.info.op_histogram()), res.info.op_histogram()
    f32 = gpu_vs_torch(model, args, tmp_path / f"{name}.tflite", enforce_f32=True, convert=False)
    assert f32.ok, f32.summary()
    for c, r in zip(f32.comparisons, ref):
        assert c.max_abs <= 1e-5 * max(float(r.abs().max()), 1.0), f32.summary()


class Tagger(nn.Module):
    """A small sequence model around one recurrent layer (no initial state): layer -> linear head."""

    def __init__(self, kind):
        super().__init__()
        self.rnn = getattr(nn, kind)(6, 8, batch_first=True, bidirectional=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_convert_for_gpu_defaults_pass_on_lstm_and_gru(tmp_path, gpu, kind):
    torch.manual_seed(5)
    result = convert_for_gpu(Tagger(kind), (torch.randn(2, 6, 6),), tmp_path / f"{kind}.tflite")
    assert result.ok and result.verdict == "PASS", result.summary()
    assert "patch_recurrent" in result.kept, result.summary()
    if kind == "GRU":                 # before: the plain file runs GPU-only with wrong numbers, and says what to try
        torch.manual_seed(5)
        plain = convert_for_gpu(Tagger(kind), (torch.randn(2, 6, 6),), tmp_path / "plain.tflite", patches=False)
        assert plain.verdict == "NUMERICS_FAIL" and "patch_recurrent" in plain.suggestions, plain.summary()
