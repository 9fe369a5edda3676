"""Wall `recurrent`: nn.LSTM / nn.GRU / nn.RNN and their cells, spelt out as explicit unrolled steps.

What the converter makes of them (litert-torch, ai-edge-litert 2.3.0, llvmpipe): every form converts
and runs GPU-only (it unrolls the sequence itself; no SELECT, GATHER_ND, BROADCAST_TO or rank-5
tensor), but
  * nn.GRU called without an initial state at batch > 1 returns wrong numbers, in fp16 and fp32
    (corr 0.99 .. 0.90 on a [2, 5, 8] input): the lowering materialises the zero state and folds it,
    with the hidden bias, into a [1, B, H] constant operand of the first step's [B, H] ADD / MUL; the
    desktop GPU miscomputes elementwise ops whose constant operand spans a non-last axis ([B, H] +
    C[1, B, H] even with equal rows; [B, H] + C[B, H] with unequal rows); a [H] bias is right;
  * bidirectional layers reverse the sequence with REVERSE_V2 (a miscomputed op in other shapes:
    wall `reverse_v2`).
`patch_recurrent` gives each module a forward that has neither: the fixed number of steps T is
read from the input at trace time, each step is a FULLY_CONNECTED per weight matrix plus the gate
math on rank-2 [B, F] tensors, the gates are slices (never chunk -> SPLIT), a reverse direction walks
the steps backwards (slices, no REVERSE_V2), the outputs are one concatenation, and a missing initial
state is used as the exact zero it is (h W_hh^T + b_hh with h = 0 is b_hh; f * 0 + i * g is i * g)
so no zero-state constant reaches the graph.

Exactness: the same formulas in ATen's order (gates = hidden part + input part; GRU
h' = (h - n) * z + n). Measured against torch in fp32: max |err| / max |ref| <= 1e-6; the bound
promised (and tested) is 1e-5, because torch's CPU kernels (MKL / oneDNN) may block the matmuls
differently. Covered: batch_first, bidirectional, any num_layers, bias=False, LSTM proj_size,
RNN tanh / relu, unbatched inputs, h0 / (h0, c0) given or not, inter-layer dropout (a no-op in eval).
The module keeps its object, class lineage (isinstance(m, nn.GRU) holds), parameters and
state_dict: only its class is swapped for one whose forward is unrolled. Left to torch's own forward:
PackedSequence inputs, and training mode with dropout > 0. T must be static (a dynamic time axis
cannot be unrolled). Not patched: subclasses of these modules (they may override forward). An
initial state built in forward (torch.zeros(...)) is a constant the converter folds into a [B, 3H]
operand with equal rows -- right on llvmpipe, but pass hx=None (or feed the state as an input) to
keep batch-shaped constants out of the graph.
Note for phones: a GRU / RNN's last step is an ADD that is both returned (h_n) and consumed (the
output sequence) -- the `output_aliasing` pattern; `patch_output_aliasing` guards the outputs.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from . import Change, register

RTOL = 1e-5      # the promised bound: max |unrolled - torch| / max |torch| in fp32


def _gates(z: torch.Tensor, n: int) -> list[torch.Tensor]:
    """z split into n equal parts along the last axis with slices (chunk lowers to SPLIT)."""
    k = z.shape[-1] // n
    return [z[..., i * k:(i + 1) * k] for i in range(n)]


def _hidden(h, w_hh, b_hh):
    """h W_hh^T + b_hh; for the zero state (h None) that is exactly b_hh (None when there is no bias)."""
    return b_hh if h is None else F.linear(h, w_hh, b_hh)


def _plus(a, b):
    return b if a is None else a + b


def lstm_step(gi, h, c, w_hh, b_hh, w_hr=None):
    """One LSTM step. gi = x W_ih^T + b_ih; h, c = None means the zero state. Returns (h', c')."""
    i, f, g, o = _gates(_plus(_hidden(h, w_hh, b_hh), gi), 4)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c_new = i * g if c is None else f * c + i * g
    h_new = o * torch.tanh(c_new)
    return (h_new if w_hr is None else F.linear(h_new, w_hr)), c_new


def gru_step(gi, h, w_hh, b_hh):
    """One GRU step (ATen's order: h' = (h - n) * z + n). h = None means the zero state."""
    ir, iz, in_ = _gates(gi, 3)
    hg = _hidden(h, w_hh, b_hh)
    hr, hz, hn = _gates(hg, 3) if hg is not None else (None, None, None)
    r = torch.sigmoid(_plus(hr, ir))
    z = torch.sigmoid(_plus(hz, iz))
    n = torch.tanh(in_ if hn is None else in_ + hn * r)
    return n - n * z if h is None else (h - n) * z + n       # (0 - n) * z + n == n - n * z exactly


def rnn_step(gi, h, w_hh, b_hh, relu: bool = False):
    """One Elman step: act(h W_hh^T + b_hh + gi). h = None means the zero state."""
    z = _plus(_hidden(h, w_hh, b_hh), gi)
    return torch.relu(z) if relu else torch.tanh(z)


class _Unrolled:
    """Mixin for nn.LSTM / nn.GRU / nn.RNN: forward unrolled over the input's fixed length.

    Mixed into the module's own class (`unrolled(m)` swaps it in place), so the parameters, the
    state_dict, the attributes and isinstance(m, nn.LSTM) all stay the module's own. forward(input,
    hx=None) returns what torch returns -- (output, h_n), for LSTM (output, (h_n, c_n)) -- with the
    same shapes, batch_first, direction order in h_n and unbatched inputs; PackedSequence inputs and
    training mode with dropout > 0 run torch's own forward. Bound: see the module docstring.
    """

    def _weights(self, layer: int, reverse: bool):
        sfx = f"_l{layer}" + ("_reverse" if reverse else "")
        return tuple(getattr(self, n + sfx, None) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh",
                                                              "weight_hr"))

    def _run(self, steps, h, c, weights, reverse: bool):
        w_ih, w_hh, b_ih, b_hh, w_hr = weights
        ys = [None] * len(steps)
        for t in (range(len(steps) - 1, -1, -1) if reverse else range(len(steps))):
            gi = F.linear(steps[t], w_ih, b_ih)
            if self.mode == "LSTM":
                h, c = lstm_step(gi, h, c, w_hh, b_hh, w_hr)
            elif self.mode == "GRU":
                h = gru_step(gi, h, w_hh, b_hh)
            else:
                h = rnn_step(gi, h, w_hh, b_hh, relu=self.mode == "RNN_RELU")
            ys[t] = h
        return ys, h, c

    def forward(self, input, hx=None):
        if isinstance(input, PackedSequence) or (self.training and self.dropout > 0 and self.num_layers > 1):
            return super().forward(input, hx)
        lstm = self.mode == "LSTM"
        batched = input.dim() == 3
        h0, c0 = (hx if lstm else (hx, None)) if hx is not None else (None, None)
        if not batched:
            input = input.unsqueeze(0 if self.batch_first else 1)
            h0 = None if h0 is None else h0.unsqueeze(1)
            c0 = None if c0 is None else c0.unsqueeze(1)
        tdim = 1 if self.batch_first else 0
        steps = [input[:, t] if self.batch_first else input[t] for t in range(input.shape[tdim])]
        dirs = 2 if self.bidirectional else 1
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                ys, h, c = self._run(steps, None if h0 is None else h0[k], None if c0 is None else c0[k],
                                     self._weights(layer, d == 1), d == 1)
                outs.append(ys)
                h_n.append(h)
                c_n.append(c)
            steps = outs[0] if dirs == 1 else [torch.cat(pair, -1) for pair in zip(*outs)]
        output = torch.cat([s.unsqueeze(tdim) for s in steps], tdim)
        h_out = torch.cat([h.unsqueeze(0) for h in h_n], 0)
        c_out = torch.cat([c.unsqueeze(0) for c in c_n], 0) if lstm else None
        if not batched:
            output = output.squeeze(1 - tdim)       # the batch axis
            h_out = h_out.squeeze(1)
            c_out = None if c_out is None else c_out.squeeze(1)
        return (output, (h_out, c_out)) if lstm else (output, h_out)


class _Explicit:
    """Mixin for nn.LSTMCell / nn.GRUCell / nn.RNNCell: the gates spelt out (slices, zero state as zero).

    forward(input, hx=None) returns what torch returns ((h', c') for LSTMCell), batched [B, F] or
    unbatched [F]; the module keeps its parameters and class (see `_Unrolled`). Bound: module docstring.
    """

    def forward(self, input, hx=None):
        batched = input.dim() == 2
        lstm = isinstance(self, nn.LSTMCell)
        h, c = (hx if lstm else (hx, None)) if hx is not None else (None, None)
        if not batched:
            input = input.unsqueeze(0)
            h = None if h is None else h.unsqueeze(0)
            c = None if c is None else c.unsqueeze(0)
        gi = F.linear(input, self.weight_ih, self.bias_ih)
        if lstm:
            h, c = lstm_step(gi, h, c, self.weight_hh, self.bias_hh)
        elif isinstance(self, nn.GRUCell):
            h = gru_step(gi, h, self.weight_hh, self.bias_hh)
        else:
            h = rnn_step(gi, h, self.weight_hh, self.bias_hh, relu=self.nonlinearity == "relu")
        if not batched:
            h = h.squeeze(0)
            c = None if c is None else c.squeeze(0)
        return (h, c) if lstm else h


class UnrolledLSTM(_Unrolled, nn.LSTM):
    """nn.LSTM, unrolled (`_Unrolled`)."""


class UnrolledGRU(_Unrolled, nn.GRU):
    """nn.GRU, unrolled (`_Unrolled`)."""


class UnrolledRNN(_Unrolled, nn.RNN):
    """nn.RNN (tanh or relu), unrolled (`_Unrolled`)."""


class ExplicitLSTMCell(_Explicit, nn.LSTMCell):
    """nn.LSTMCell with explicit gates (`_Explicit`)."""


class ExplicitGRUCell(_Explicit, nn.GRUCell):
    """nn.GRUCell with explicit gates (`_Explicit`)."""


class ExplicitRNNCell(_Explicit, nn.RNNCell):
    """nn.RNNCell with explicit gates (`_Explicit`)."""


SWAPS = {nn.LSTM: UnrolledLSTM, nn.GRU: UnrolledGRU, nn.RNN: UnrolledRNN,
         nn.LSTMCell: ExplicitLSTMCell, nn.GRUCell: ExplicitGRUCell, nn.RNNCell: ExplicitRNNCell}


def unrolled(module: nn.Module) -> nn.Module:
    """Swap an nn.LSTM / GRU / RNN / LSTMCell / GRUCell / RNNCell (exact type) to its GPU-clean class, in place.

    The object, its parameters and its state_dict are unchanged; only forward differs (exact to the
    module docstring's bound). Returns the module. Raises TypeError for any other type (a subclass
    may override forward, so it is not swapped).
    """
    cls = SWAPS.get(type(module))
    if cls is None:
        raise TypeError(f"unrolled() takes nn.LSTM / GRU / RNN or their cells, not {type(module).__name__}")
    module.__class__ = cls
    return module


def _what(m: nn.Module) -> str:
    if isinstance(m, nn.RNNBase):
        return (f"{type(m).__name__}({m.input_size}, {m.hidden_size}, num_layers={m.num_layers}, "
                f"bidirectional={m.bidirectional}, batch_first={m.batch_first}"
                + (f", proj_size={m.proj_size}" if getattr(m, "proj_size", 0) else "")
                + ") -> unrolled steps (rank-2 gates, slices, no zero-state constants)")
    return f"{type(m).__name__}({m.input_size}, {m.hidden_size}) -> explicit gates (slices, no zero-state constants)"


@register("patch_recurrent", wall="recurrent")
def patch_recurrent(model: nn.Module) -> list[Change]:
    """nn.LSTM / GRU / RNN -> unrolled steps; nn.LSTMCell / GRUCell / RNNCell -> explicit gates (wall `recurrent`).

    Each module of exactly one of those types -- the model itself included -- gets its class swapped in
    place (`unrolled`): same object, parameters and state_dict. Subclasses are left alone (they may
    override forward). Default-on and exact: max |err| / max |torch| <= 1e-5 in fp32 (measured <= 4e-7).
    PackedSequence inputs and training-mode dropout run torch's own forward.
    """
    changes = []
    for path, m in list(model.named_modules()):
        if type(m) in SWAPS:
            what = _what(m)
            unrolled(m)
            changes.append(Change(path, what, "patch_recurrent", True))
    return changes
