"""Wall `constant_operand`: an elementwise op on a constant operand, computed wrongly at rank 2 or 3.

Measured on llvmpipe, ai-edge-litert 2.3.0, in fp16 and fp32 alike (tests/toolkit/rewrites/test_constant_operand.py):
a binary elementwise op (ADD, MUL, ...) whose output has rank 2 or 3 and whose constant operand spans more than
its last axis, or whose runtime operand has a lower rank than the output, returns wrong numbers at full residency
-- runtime [4, 8, 1] * constant [4, 8, 8] corr 0.09, runtime [3, 8] * constant [3, 8] corr 0.66, runtime [2, 8] +
constant [1, 2, 8] corr 0.59, runtime [64, 48] * constant [1, 1, 48] corr 0.00 (EdgeNeXt's layer scale after a
linear layer on [1, S, D], which the converter flattens to rank 2) -- while the same
ops at rank 4 ([4, 8, 1, 1] * [4, 8, 8, 1]), with a constant that varies along the last axis only, or with
two runtime operands are right. It looks like the delegate lays a rank-2/3 runtime tensor out with its first
axis as the batch and a constant of that rank without one. Seen in WavLM's gated relative-position bias
(runtime [B*H, T, 1] * table [B*H, T, T], corr 0.959), a GRU's folded zero state, a [1, S, D] table added to
a rank-2 result, ResMLP's layer scale on its transposed token-mixing linear (the converter moves the MUL across
the TRANSPOSE onto the rank-2 linear result).

`patch_constant_operand_rank4` (default, functional) computes such an op at rank 4: both operands aligned to the
output's rank and given trailing size-1 axes up to rank 4 ([4, 8, 1, 1] * [4, 8, 8, 1]), the result viewed back
(leading size-1 axes are dropped again by the converter in front of a broadcasting op). Rank 4 is not enough when
the runtime operand is broadcast over the first axis the constant fills: a runtime position [1, 1, 1, 1]
subtracted from a constant offset table [8, 256, 1, 1] (a decoder's cache-write one-hot) is wrong in fp32 too
(corr 0.07) while [1, 8, 256, 1] is right, so such an op gets one leading size-1 axis before the trailing ones.
`bisect` recognises these nodes in a block it classifies as a miscompute and routes it to this rewrite. Exact: the same
elementwise values, only the views change. A constant is a tensor whose value `patch_fold_constants` /
`patch_fold_index_math` know (parameters, buffers, index math).

The same family, another op: a zero PAD of a rank-3 tensor whose first axis is > 1. PAD of a runtime [2, 15, 32]
along axis 1 or 2 compiles GPU-only and returns wrong numbers (corr -0.06 / 0.02) in fp16 and fp32, while the
same pad of [1, 15, 32], of a rank-4 [2, 8, 15, 16], or of the [2, 15, 32] viewed as [1, 2, 15, 32] is right; a
rank-2 PAD is not taken by the GPU at all. Seen in MobileBERT's trigram embedding (the token embeddings shifted
by one step each way with F.pad, two sequences in the batch: corr 0.37 for that block). `patch_pad_rank4`
(default, functional) pads such a tensor with leading size-1 axes up to rank 4, then views it back. Bit-exact.
"""
from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch import nn

from . import Change, register
from .functional import Observed, register_handler
from .shared import value_of
T = torch.Tensor


def _spans(c: torch.Tensor) -> bool:
    """A constant of rank >= 2 whose values vary along (or extend over) an axis other than the last."""
    return c.dim() >= 2 and c.numel() > int(c.shape[-1])


def _lift(t, rank: int, lead: int = 0):
    """`t` (of rank <= `rank` < 4) aligned to `rank` as broadcasting does, then given `lead` leading and enough
    trailing size-1 axes to reach rank 4. (Leading size-1 axes alone would not do: the converter drops such a
    reshape ahead of a broadcasting op.)"""
    if not isinstance(t, torch.Tensor):
        return t
    shape = (1,) * (rank - t.dim()) + tuple(t.shape)
    return t.reshape((1,) * lead + shape + (1,) * (4 - rank - lead))


def _layout(a, b) -> tuple[tuple[int, ...], int] | None:
    """(broadcast output shape, leading size-1 axes for `_lift`) when (a, b) is a runtime tensor and a spanning
    constant with a rank-2/3 output; else None. One leading axis when the trailing layout would give the constant
    a first (batch) axis > 1 that the runtime operand broadcasts over -- runtime [1, 1, 1, 1] - constant
    [8, 256, 1, 1] is wrong on the GPU as well (corr 0.07), [1, 8, 256, 1] is right."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return None
    ka, kb = value_of(a) is not None, value_of(b) is not None
    if ka == kb or not (a.dtype.is_floating_point or b.dtype.is_floating_point):
        return None
    const, runtime = (a, b) if ka else (b, a)
    try:
        shape = tuple(torch.broadcast_shapes(a.shape, b.shape))
    except RuntimeError:
        return None
    flattened = _flattened(runtime) and const.numel() > 1
    if len(shape) not in (2, 3) or not (_spans(const) or runtime.dim() < len(shape) or flattened):
        return None
    first = ((1,) * (len(shape) - runtime.dim()) + tuple(runtime.shape))[0]
    return shape, 1 if int(shape[0]) > 1 and int(first) == 1 else 0


# A linear layer on [1, S, D] converts to FULLY_CONNECTED with a rank-2 [S, D] output; the converter then drops
# the reshape back to [1, S, D] in front of a broadcasting op, so a following `x * gamma` is the rank-2-runtime
# case above in the graph although it is rank 3 in torch (EdgeNeXt's layer scale). Such outputs are tagged.
_FLAT: "weakref.WeakValueDictionary[int, torch.Tensor]" = weakref.WeakValueDictionary()


def _flattened(t) -> bool:
    return _FLAT.get(id(t)) is t


@register_handler(F.dropout, "patch_constant_operand_rank4")
def _dropout(input, p=0.5, training=True, inplace=False):
    """Eval-mode dropout is its input: returned as the same tensor, so a tag on it survives."""
    return Observed(input) if not training and _flattened(input) else NotImplemented


@register_handler(F.linear, "patch_constant_operand_rank4")
def _linear(input, weight, bias=None):
    out = F.linear(input, weight, bias)
    if out.dim() == 3 and int(out.shape[0]) == 1:
        _FLAT[id(out)] = out
    return Observed(out)


def _keep_tag(fn):
    """A transpose of a tagged output is tagged too: the converter moves a constant elementwise op across a
    TRANSPOSE onto the rank-2 FULLY_CONNECTED result (ResMLP's token mixing, `ls * linear(x.transpose(1, 2))
    .transpose(1, 2)`, became runtime [384, 16] * constant [1, 384, 1]; the held-out ResMLP row converted plainly had
    corr 0.911 at full residency)."""
    def handler(input, *args, **kwargs):
        if not _flattened(input):
            return NotImplemented
        out = fn(input, *args, **kwargs)
        if isinstance(out, torch.Tensor) and out.dim() == 3 and int(out.shape[0]) == 1:
            _FLAT[id(out)] = out
        return Observed(out)
    return handler


for _f in (T.transpose, torch.transpose, T.permute, torch.permute, T.swapaxes, torch.swapaxes):
    register_handler(_f, "patch_constant_operand_rank4")(_keep_tag(_f))


def _binary(fn):
    def handler(input, other, *args, **kwargs):
        if kwargs.get("out") is not None:
            return NotImplemented
        layout = _layout(input, other)
        if layout is None:
            return NotImplemented
        shape, lead = layout
        return fn(_lift(input, len(shape), lead), _lift(other, len(shape), lead), *args, **kwargs).reshape(shape)
    return handler


def _reflected(fn):
    def handler(self, other):
        layout = _layout(self, other)
        if layout is None:
            return NotImplemented
        shape, lead = layout
        return fn(_lift(other, len(shape), lead), _lift(self, len(shape), lead)).reshape(shape)
    return handler


_OPS = (
    (torch.add, T.add, T.__add__), (torch.sub, T.sub, T.__sub__), (torch.mul, T.mul, T.__mul__),
    (torch.div, T.div, T.__truediv__), (torch.maximum, T.maximum), (torch.minimum, T.minimum),
    (torch.pow, T.pow, T.__pow__),
)
for _group in _OPS:
    for _f in _group:
        register_handler(_f, "patch_constant_operand_rank4")(_binary(_group[0]))
for _f, _g in ((T.__radd__, torch.add), (T.__rsub__, torch.sub), (T.__rmul__, torch.mul),
               (T.__rtruediv__, torch.div)):
    register_handler(_f, "patch_constant_operand_rank4")(_reflected(_g))


@register("patch_constant_operand_rank4", wall="constant_operand")
def patch_constant_operand_rank4(model: nn.Module) -> list[Change]:
    """Functional only (see the module docstring): returns no changes by itself."""
    return []


@register_handler(F.pad, "patch_pad_rank4")
def _pad(input, pad, mode="constant", value=None):
    if mode != "constant" or not isinstance(input, torch.Tensor) or input.dim() not in (2, 3) \
            or len(pad) > 2 * input.dim():
        return NotImplemented
    if input.dim() == 3 and int(input.shape[0]) == 1:
        return NotImplemented                         # right as it is
    lifted = input.reshape((1,) * (4 - input.dim()) + tuple(input.shape))
    out = F.pad(lifted, list(pad), mode="constant", value=value)
    return out.reshape(tuple(out.shape[4 - input.dim():]))


@register("patch_pad_rank4", wall="constant_operand")
def patch_pad_rank4(model: nn.Module) -> list[Change]:
    """Functional only (see the module docstring): returns no changes by itself."""
    return []
