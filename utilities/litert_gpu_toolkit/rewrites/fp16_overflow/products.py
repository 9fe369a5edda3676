"""A product past fp16's range whose scale cancels further on: scale it by 2^-k and undo that where it cancels.

Some intermediate products are far larger than anything the model outputs, because a later op divides them or
multiplies them by something small:
- ReLU linear attention (EfficientViT's LiteMLA, Sana): out = q @ (k^T @ [v, 1]), then out[..., :-1] /
  (out[..., -1:] + eps) -- with trained ranges q @ kv reaches 4.6e5 although the ratio is O(1);
- Global Response Normalisation (ConvNeXt-V2): x * (|x|_2 / mean |x|_2), then times a small learned gain
  -- 8.5e4 before the gain.
On the GPU that product is inf, and the output inf or NaN, at full residency.

A matmul / product is linear in each factor, so multiplying its smaller operand by s = 2^-k makes it s times
smaller; what reads it then holds a value scaled by s, and the scale is carried along views, slices, casts, sums
and means, zero padding, ReLU, adds (a number or a tensor added to it is scaled by s too) and further products.
It is undone where it cancels: a division of two values carrying the same scale, or a later product whose
smaller operand is multiplied by 2^k (a gain: ConvNeXt-V2's weight) -- chosen where the product's own value fits
fp16 again. A further product still past the limit scales again. With s a power of two every scaled value is
exactly the unscaled one times s, so the outputs are **bit-identical** in fp32 (checked on the example inputs;
nothing is changed otherwise) -- with one exception: a nonzero number added to a scaled value that would fall
below fp16's smallest subnormal 2^-24 once scaled is kept at 2^-24 (trained EfficientViT: eps 1e-5 x 2^-9 would
round to 0 in fp16, and a token whose q . sum(k) is 0 -- ReLU kernels -- would give 0 / 0 = NaN where torch gives
0); the outputs are then checked within 2^-16 of their scale (fp16 itself rounds at 2^-11; the isolated LiteMLA
block moves by 3.7e-6). Cost: one MUL per scaled or unscaled operand (on a
constant it folds away).

Which products: one traced forward on the example inputs (`convert_for_gpu` passes them). A matmul or product of
two tensors whose peak |value| exceeds `limit` (2^13) starts a scaled chain with k bringing it to about `target`
(2^10); the chain is taken only when every use of every scaled tensor is one of the ops above and it closes
before any model output. Otherwise that product is left alone. A GPU that flushes fp16 subnormals to zero loses
the kept 2^-24 too, as it loses an eps under 6.1e-5 in the plain model.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .. import Change, register
from ..functional import TRACKERS, PrepassSites
from .rescale import _PRODUCT, DEFAULT_LIMIT, DEFAULT_TARGET, _homogeneous_call, _peak, _tensors
from .stream import _ADD as _STREAM_ADD, _CAT, _DIV as _STREAM_DIV, _PASS as _STREAM_PASS

NAME = "patch_rescale_products"
FP16_TINY = 2.0 ** -24          # fp16's smallest subnormal
T = torch.Tensor
_MATMUL = {torch.matmul, T.matmul, T.__matmul__, T.__rmatmul__, torch.bmm, T.bmm}
_MUL = _PRODUCT | {torch.multiply}
_ADD = _STREAM_ADD - {T.__rsub__}                 # a number minus a scaled value is not planned
_DIV = _STREAM_DIV | {torch.true_divide}
_ADDCMUL = {torch.addcmul, T.addcmul}
# linear in their one tensor argument: the scale passes through unchanged (what passes a stream's scale, casts,
# sums and means, negation)
_PASS = _STREAM_PASS | {T.float, T.to, T.type_as, torch.sum, T.sum, torch.mean, T.mean, torch.neg, T.neg,
                        T.__neg__}

class _Run:
    """One forward's scaled tensors. plan=True: measure and decide (nothing is scaled); plan=False: scale as
    `decisions` says. A decision is keyed by (call name, argument shapes, occurrence) and is the exponent d added
    to the scale by multiplying the call's smaller operand by 2^-d (negative: the scale is undone there)."""

    def __init__(self, plan: bool, decisions: dict | None = None, banned=(), limit=DEFAULT_LIMIT,
                 target=DEFAULT_TARGET):
        self.plan, self.limit, self.target = plan, limit, target
        self.decisions = {} if decisions is None else decisions
        self.banned = set(banned)
        self.tags: dict[int, tuple[int, int]] = {}       # id(tensor) -> (chain, exponent e: value x 2^-e)
        self.keep: list[torch.Tensor] = []
        self.seen: dict[tuple, int] = {}
        self.site_keys: dict[int, tuple] = {}           # chain -> the key of the product that started it
        self.failed: set[int] = set()
        self.floored = False                            # a number was kept at FP16_TINY (module docstring)
        self.pending: list = []                         # per call in flight: (key, operands) of a product

    def tag(self, t):
        return self.tags.get(id(t)) if isinstance(t, torch.Tensor) else None

    def _key(self, func, tensors) -> tuple:
        base = (getattr(func, "__qualname__", str(func)), tuple(tuple(t.shape) for t in tensors))
        n = self.seen.get(base, 0)
        self.seen[base] = n + 1
        return base + (n,)

    def _set(self, outs, tag):
        for t in outs:
            if tag is not None and t.is_floating_point():
                self.tags[id(t)] = tag
                self.keep.append(t)

    def fail(self, *tags):
        self.failed.update(tag[0] for tag in tags if tag is not None)

    # ------------------------------------------------------------------ before: scale the arguments
    def before(self, func, args, kwargs):
        self.pending.append(None)
        if _product(func, args, kwargs):
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            key = self._key(func, tensors)
            self.pending[-1] = (key, tensors)
            d = self.decisions.get(key)
            if self.plan or not d:
                return None
            return _scaled(args, tensors[_smaller(tensors)], -d), kwargs
        if self.plan:
            return None
        tags = [self.tag(a) for a in args]
        if func in _ADDCMUL and len(args) == 3 and not tags[0] and bool(tags[1]) != bool(tags[2]):
            e = (tags[1] or tags[2])[1]                  # the gain takes the scale back
            return _scaled(args, args[2 if tags[1] else 1], e), kwargs
        if func in _ADD and len(args) == 2 and bool(tags[0]) != bool(tags[1]) and not kwargs.get("alpha"):
            other = args[1 if tags[0] else 0]
            e = (tags[0] or tags[1])[1]
            if isinstance(other, (int, float)) and not isinstance(other, bool) and 0 < abs(other) * 2.0 ** -e < \
                    FP16_TINY:                           # an eps that fp16 would round to 0: 0 / 0 where torch has 0
                self.floored = True
                return _scaled(args, other, 0, math.copysign(FP16_TINY, other)), kwargs
            if isinstance(other, (int, float, torch.Tensor)) and not isinstance(other, bool):
                return _scaled(args, other, -e), kwargs
        return None

    # ------------------------------------------------------------------ after: carry the scale to the result
    def after(self, func, args, kwargs, out):
        pending = self.pending.pop()
        outs = list(_tensors(out))
        live = [t for t in (self.tag(a) for a in list(_tensors(args)) + list(_tensors(kwargs))) if t is not None]
        if pending is not None:
            return self._carry(*pending, live, outs)
        if not live or not outs:
            return                                       # sizes, dtypes, shapes: not a use
        if any(t[0] != live[0][0] for t in live):
            return self.fail(*live)
        first, second = (self.tag(a) for a in (tuple(args) + (None, None))[:2])
        if func in _DIV and len(args) == 2:
            if first is None or (second is not None and second[1] > first[1]):
                return self.fail(*live)
            e = first[1] - (second[1] if second else 0)
            return self._set(outs, (first[0], e) if e else None)
        if func in _ADD and len(args) == 2 and not kwargs.get("alpha"):
            other = args[1] if first else args[0]
            if (first and second and first != second) or \
                    (isinstance(other, torch.Tensor) and not other.is_floating_point()):
                return self.fail(*live)
            return self._set(outs, first or second)
        if func in _ADDCMUL and len(args) == 3 and not first and len(live) == 1:
            factor = args[2] if self.tag(args[1]) else args[1]
            if self.plan and (_peak(factor) * 2.0 ** live[0][1] > self.limit or max(map(_peak, outs)) > self.limit):
                return self.fail(*live)
            return self._set(outs, None)
        if func in _CAT:
            parts = list(_tensors(args[0] if args else kwargs.get("tensors", ())))
            if any(self.tag(p) != live[0] for p in parts):
                return self.fail(*live)
            return self._set(outs, live[0])
        if func is T.to and any(isinstance(a, torch.dtype) and not a.is_floating_point for a in args[1:]):
            return self.fail(*live)
        passes = func in _PASS or _homogeneous_call(func, args, kwargs) or _product(func, args, kwargs, scalar=True)
        name = getattr(func, "__name__", "_")
        if passes and first is not None and len(live) == 1 and not (name.endswith("_") and name[:2] != "__"):
            return self._set(outs, first)
        self.fail(*live)

    def _carry(self, key, tensors, live, outs):
        if len(live) > 1:
            return self.fail(*live)
        e = live[0][1] if live else 0
        d = self.decisions.get(key, 0)
        if self.plan:
            d = self._decide(key, tensors, live, outs)
        if live:
            self._set(outs, (live[0][0], e + d) if e + d else None)
        elif d:
            chain = len(self.site_keys)
            self.site_keys[chain] = key
            self._set(outs, (chain, d))

    def _decide(self, key, tensors, live, outs) -> int:
        peak = max((_peak(t) for t in outs), default=0.0)
        if not math.isfinite(peak):
            return 0
        if not live:
            if peak <= self.limit or key in self.banned:
                return 0
            d = math.ceil(math.log2(peak / self.target))
        else:
            e = live[0][1]
            small = tensors[_smaller(tensors)]
            grown = _peak(small) * 2.0 ** (e if self.tag(small) is None else 0)
            if peak * 2.0 ** -e > self.limit:
                d = math.ceil(math.log2(peak * 2.0 ** -e / self.target))
            elif peak <= self.limit and grown <= self.limit:
                d = -e                                   # the value fits again: undo the scale here
            else:
                d = 0
        if d:
            self.decisions[key] = d
        return d


def _product(func, args, kwargs, scalar: bool = False) -> bool:
    """A matmul or an elementwise product of two float tensors (scalar=True: of one tensor and a number)."""
    if func not in _MATMUL and func not in _MUL or kwargs.get("out") is not None or len(args) != 2:
        return False
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if scalar:
        return len(tensors) == 1 and any(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args)
    return len(tensors) == 2 and all(t.is_floating_point() for t in tensors) and tensors[0] is not tensors[1]


def _scaled(args: tuple, which, exponent: int, value=None) -> tuple:
    """args with the argument that is `which` multiplied by 2^exponent (a number stays a number), or replaced by
    `value`."""
    j = next(n for n, a in enumerate(args) if a is which)
    return args[:j] + (which * 2.0 ** exponent if value is None else value,) + args[j + 1:]


def _smaller(tensors) -> int:
    """The operand to scale: the one with fewer elements (the second on a tie)."""
    return 0 if tensors[0].numel() < tensors[1].numel() else 1


def _same(want: torch.Tensor, got: torch.Tensor, floored: bool) -> bool:
    """Bit-identical; within 2^-16 of the output's scale where a number was kept at FP16_TINY."""
    if torch.equal(want, got) or not floored or not want.is_floating_point():
        return torch.equal(want, got)
    fin = torch.isfinite(want)
    if not torch.equal(fin, torch.isfinite(got)) or not fin.any():
        return False
    return float((want[fin] - got[fin]).abs().max()) <= 2.0 ** -16 * float(want[fin].abs().max())


class _Tracker:
    """Registered in TRACKERS: forwards to the _Run of the innermost wrapper whose model was planned (SITES)."""

    @staticmethod
    def before(func, args, kwargs):
        run = SITES.current()
        return run.before(func, args, kwargs) if run is not None else None

    @staticmethod
    def after(func, args, kwargs, out):
        run = SITES.current()
        if run is not None:
            run.after(func, args, kwargs, out)


SITES = PrepassSites(NAME, make=lambda decisions: _Run(False, dict(decisions)))   # {key: d}: each forward, a _Run
TRACKERS.append((NAME, _Tracker()))


def _forward(model, args, kwargs, run: _Run | None):
    from ..functional import GpuRewriteMode

    with SITES.active(run), torch.no_grad(), GpuRewriteMode(include=[NAME]):
        out = model(*args, **kwargs)
    if run is not None:
        run.fail(*(run.tag(t) for t in _tensors(out)))
    return out


@register(NAME, wall="fp16_overflow")
def patch_rescale_products(model: nn.Module, example_inputs=None, limit: float = DEFAULT_LIMIT,
                           target: float = DEFAULT_TARGET) -> list[Change]:
    """Plan the scaled chains on the example inputs (module docstring) and keep them when the outputs are
    bit-identical; returns no changes itself (the functional pass lists them). Without example inputs nothing
    is planned and nothing will change."""
    if example_inputs is None:
        return []
    from ..apply import split_example_inputs

    args, kwargs = split_example_inputs(example_inputs)
    banned: set = set()
    for _ in range(4):                       # a chain that cannot close frees its products to start their own
        run = _Run(True, banned=banned, limit=limit, target=target)
        ref = _forward(model, args, kwargs, run)          # a plan scales nothing: these are the plain outputs
        if not run.failed:
            break
        banned |= {run.site_keys[c] for c in run.failed}
    else:
        return []
    if not run.site_keys:
        return []
    check = _Run(False, dict(run.decisions))
    got = _forward(model, args, kwargs, check)
    if all(_same(a, b, check.floored) for a, b in zip(_tensors(ref), _tensors(got))):
        SITES.store(model, dict(run.decisions))
    return []

