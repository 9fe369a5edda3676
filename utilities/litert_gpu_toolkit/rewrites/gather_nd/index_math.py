"""Index math that depends on no input, computed once while tracing and fed to the graph as constants.

Hugging Face models compute masks, positions and relative-position buckets from `torch.arange` and
Python numbers: `find_packed_sequence_indices` (diff + cumsum of the position ids, every causal LM
called without a cache in transformers 5.x), `packed_mask[batch_idx, q_idx]`, MPNet's and DeBERTa's
relative-position buckets (ABS / LOG / SIGN / SELECT on aranges). litert-torch keeps these as ops on
constants, which the converter does not fold and the GPU rejects: GATHER_ND, BATCH_MATMUL ('non-constant
tensor', a cumsum of a constant), ABS / SIGN ('Expected 0 const input tensor(s)').

`patch_fold_index_math` (default on) keeps, beside each such tensor, its value as an ordinary CPU tensor:
`arange`, `zeros` / `ones` / `full` / `tensor` of Python data and `*_like` / `new_*` fills start one, and any of the
calls listed in `FOLDED` whose tensor arguments all have a value gets one too -- computed by torch
itself on those values, outside the trace. The traced result is that value as a constant. Exact: the
very same torch call on the very same numbers (bit-identical). Tensors above `MAX_FOLD_ELEMENTS`
elements and anything that touches a model input are left alone (parameters and buffers get values from
`patch_fold_constants`); an in-place method (`add_`, `x[i] = v`, ...) on a tensor with a value applies the same
call to a copy of the value (the value is dropped when an argument has none), and `x += y` folds to a new
constant that Python binds to `x`. Folded views are copies: an in-place change through
a view of a folded tensor does not reach its base (index math in the models seen never does that).
Functional only (inside `GpuRewriteWrapper` / `convert_for_gpu`).
"""
from __future__ import annotations


import torch
import torch.nn as nn

from .. import Change, register
from ..functional import HANDLERS
from ..shared import MAX_FOLD_ELEMENTS, _VALUES, value_of, real_values, forget, remember, constant, PROTECTED  # noqa: F401 - re-exported

T = torch.Tensor
FOLDED = (
    # arithmetic, comparisons, logic
    torch.add, T.add, T.__add__, T.__radd__, torch.sub, T.sub, T.__sub__, T.__rsub__, torch.mul, T.mul, T.__mul__,
    T.__rmul__, torch.div, T.div, T.__truediv__, T.__rtruediv__, T.__floordiv__, T.__rfloordiv__, torch.floor_divide,
    T.__mod__, torch.remainder, T.__neg__, torch.neg, torch.abs, T.abs, T.__abs__, torch.sign, T.sign, T.__pow__,
    T.__rpow__, torch.pow, torch.log, T.log, torch.exp, T.exp, torch.sqrt, torch.floor, torch.ceil, T.ceil, T.floor,
    torch.round,
    torch.clamp, T.clamp, T.clamp_min, T.clamp_max, torch.minimum, torch.maximum, torch.min, torch.max, T.min, T.max,
    torch.eq, T.eq, T.__eq__, torch.ne, T.ne, T.__ne__, torch.lt, T.lt, T.__lt__, torch.le, T.le, T.__le__,
    torch.gt, T.gt, T.__gt__, torch.ge, T.ge, T.__ge__, T.__and__, T.__or__, T.__xor__, T.__invert__, T.__rand__,
    T.__ror__, torch.logical_and, torch.logical_or, torch.logical_not, T.logical_and, T.logical_or, T.logical_not,
    torch.bitwise_and, torch.bitwise_or, torch.where, T.where, T.masked_fill, torch.diff, T.diff,
    torch.cumsum, T.cumsum, torch.sum, T.sum, T.any, T.all, torch.triu, torch.tril, T.triu, T.tril,
    # sinusoidal position tables and lookups into them (Funnel, Transformer-XL: sin / cos of an arange, gathered)
    torch.sin, T.sin, torch.cos, T.cos, torch.gather, T.gather, torch.einsum, torch.outer,
    # dtype and view changes, joins
    T.to, T.long, T.int, T.bool, T.float, T.type_as, T.__getitem__, T.unsqueeze, torch.unsqueeze, T.squeeze,
    T.view, T.reshape, torch.reshape, T.expand, T.expand_as, T.repeat, T.permute, T.transpose, torch.transpose,
    T.flatten, T.contiguous, T.clone, torch.cat, torch.stack, torch.broadcast_to, T.narrow, T.flip, torch.flip,
    torch.meshgrid, T.split, torch.split, T.chunk, torch.chunk, T.unbind, torch.unbind, T.double,
)
_LIKE = (torch.zeros_like, torch.ones_like, torch.full_like, T.new_ones, T.new_zeros, T.new_full, T.new_tensor)
_SOURCES = (torch.arange, torch.zeros, torch.ones, torch.full, torch.tensor, torch.linspace, torch.eye, *_LIKE)


class _Unknown(Exception):
    pass


def _values(v):
    if isinstance(v, torch.Tensor):
        got = value_of(v)
        if got is None:
            raise _Unknown
        return got
    if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
        return type(v)(_values(x) for x in v)
    return v


def _foldable(value) -> bool:
    return (isinstance(value, torch.Tensor) and value.numel() <= MAX_FOLD_ELEMENTS and not value.dtype.is_complex
            and value.device.type == "cpu")


def _has_tensor(v) -> bool:
    if isinstance(v, torch.Tensor):
        return True
    return isinstance(v, (list, tuple)) and any(_has_tensor(x) for x in v)


def _fold(func):
    def handler(*args, **kwargs):
        if kwargs.get("out") is not None or not (_has_tensor(args) or _has_tensor(kwargs)):
            return NotImplemented
        try:
            args_v, kwargs_v = _values(args), {k: _values(v) for k, v in kwargs.items()}
        except _Unknown:
            return NotImplemented
        try:
            with real_values():
                out = func(*args_v, **kwargs_v)
        except Exception:                     # noqa: BLE001 - the traced call raises (or not) as it would have
            return NotImplemented
        if _foldable(out):
            return constant(out)
        if isinstance(out, tuple) and out and all(_foldable(o) for o in out):     # min / max with a dim
            folded = [constant(o) for o in out]
            return tuple(folded) if type(out) is tuple else type(out)(folded)
        return NotImplemented
    return handler


def _static(shape) -> bool:
    return all(isinstance(s, int) for s in shape)


def _source(func):
    def handler(*args, **kwargs):
        kwargs = {k: v for k, v in kwargs.items() if k not in ("device", "requires_grad", "pin_memory")}
        if kwargs.get("out") is not None:
            return NotImplemented
        if func in _LIKE:                   # the value does not depend on the values of `like` (self)
            like = args[0]
            if not isinstance(like, torch.Tensor) or not _static(like.shape) or _has_tensor(args[1:]) \
                    or _has_tensor(kwargs):
                return NotImplemented
            kwargs.setdefault("dtype", like.dtype)
            with real_values():
                plain = torch.empty(tuple(like.shape), dtype=like.dtype)
            call = (func, (plain, *args[1:]))
        else:
            if _has_tensor(args) or _has_tensor(kwargs):             # torch.tensor(t), arange(t): not static
                return NotImplemented
            call = (func, args)
        try:
            with real_values():
                out = call[0](*call[1], **kwargs)
        except Exception:                     # noqa: BLE001 - the traced call raises (or not) as it would have
            return NotImplemented
        return constant(out) if _foldable(out) else NotImplemented
    return handler


def _inplace(func):
    """An in-place method on a tensor with a value applies to the value too (WavLM's relative buckets are built
    with `+=`, which is `add_`): in place, so a change through a view reaches its base as it does in the trace --
    on a copy when the value is a model's own parameter. When an argument has no value the value is dropped."""
    def handler(self, *args, **kwargs):
        if value_of(self) is None:
            return NotImplemented
        try:
            own, args_v = _values(self), _values(args)
            kwargs_v = {k: _values(v) for k, v in kwargs.items()}
            with real_values():
                new = own.clone() if own.numel() and own.untyped_storage().data_ptr() in PROTECTED else own
                func(new, *args_v, **kwargs_v)
        except Exception:                     # noqa: BLE001 - _Unknown, or a call that raises on the values
            forget(self)
            return NotImplemented
        if _foldable(new):                    # every operand known: the traced tensor takes the result as a
            self.copy_(constant(new))         # constant (no scatter into a constant: diffusers' Upsample1d kernel)
            remember(self, new)
            return None if func is T.__setitem__ else self
        out = func(self, *args, **kwargs)     # the traced call itself (handlers run outside the mode)
        remember(self, new)
        return out
    return handler


def _augmented(func):
    """`x += y` on tensors with values: a new constant (Python rebinds `x` to what `__iadd__` returns)."""
    fold = _fold(func)

    def handler(self, *args, **kwargs):
        out = fold(self, *args, **kwargs)
        if out is NotImplemented:
            forget(self)
        return out
    return handler


def _dropout(input, p=0.5, training=True, inplace=False):
    """An eval-mode (or p = 0) dropout of a tensor with a value is that tensor (torch returns its input then)."""
    if value_of(input) is None or (training and p > 0):
        return NotImplemented
    return input


HANDLERS.setdefault(torch.nn.functional.dropout, []).insert(0, ("patch_fold_index_math", _dropout))


def fold_entry(func):
    """(name, handler) that `arange_index` puts first on `func`."""
    return ("patch_fold_index_math", _source(func) if func in _SOURCES else _fold(func))


for _f in (*_SOURCES, *FOLDED):
    if _f is not T.__getitem__:                                  # arange_index orders the indexing handlers
        HANDLERS.setdefault(_f, []).insert(0, fold_entry(_f))
for _f, _g in ((T.__iadd__, T.add), (T.__isub__, T.sub), (T.__imul__, T.mul), (T.__iand__, T.__and__),
               (T.__ior__, T.__or__)):
    HANDLERS.setdefault(_f, []).insert(0, ("patch_fold_index_math", _augmented(_g)))
# every other in-place method (`add_`, `masked_fill_`, `copy_`, ...) and item assignment
for _f in [T.__setitem__] + [getattr(T, n) for n in dir(T) if n.endswith("_") and not n.startswith("_")]:
    if callable(_f):
        HANDLERS.setdefault(_f, []).insert(0, ("patch_fold_index_math", _inplace(_f)))


@register("patch_fold_index_math", wall="gather_nd")
def patch_fold_index_math(model: nn.Module) -> list[Change]:
    """Functional only (see the module docstring): returns no changes by itself."""
    return []
