"""Activations too large for fp16 between two linear layers: scale them by a power of two, folded into the weights.

A conv or linear layer whose outputs reach tens of thousands (large BN-folded weights, un-normalised inputs)
leaves fp16's range (max 65504) on the GPU: inf, then NaN, at full residency. When what follows it up to the
next conv / linear layer is positively homogeneous -- ReLU, LeakyReLU, PReLU, max / average pooling, zero padding,
reshapes and slices, nearest upsampling -- f(s x) = s f(x) for any s > 0, so dividing the first layer's weight
and bias by s and multiplying the second layer's weight by s computes the same function while the tensor between
them is s times smaller.

With s = 2^k every scaled weight, bias, product and partial sum is exactly the unscaled one times 2^-k (binary
floating point: scaling by a power of two commutes with rounding, as long as nothing leaves fp32's normal range),
so in torch fp32 the model's outputs are **bit-identical** -- the rewrite checks that on the example inputs and
undoes any pair where they are not. No op is added; only constants change.

A product with another tensor is homogeneous in each factor, so the chain may also pass through one multiply by
a tensor that does not come from the first layer: the gated MLPs of LLMs (down(act(gate(x)) * up(x))) whose
product leaves fp16's range although gate and up stay within it are rescaled through `up` and `down` the same
way.

Which pairs: one run of the model on the example inputs with every torch call traced (functional activations
included) shows where each layer's output goes; a pair is taken only when the first layer's output reaches the
second through homogeneous ops alone and feeds nothing else (a residual add would see the scaled value), and each
layer runs once (shared weights are left alone). Applied only where the measured peak |value| along the chain
(the first layer's output, the product, the second layer's input) exceeds `limit` (default 2^13, within 8x of
fp16's max), with k chosen to bring that peak to about `target` (2^10) -- and lowered so the second layer's
largest weight stays below 2^14 and the first layer's median |weight| stays a normal fp16 number. A cheap pass
with forward hooks comes first: a model whose layers' inputs and outputs all stay under `limit` (the usual case)
costs one forward and is not traced.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from .. import Change, register

DEFAULT_LIMIT = 2.0 ** 13
DEFAULT_TARGET = 2.0 ** 10
MAX_SCALED_WEIGHT = 2.0 ** 14
FP16_MIN_NORMAL = 2.0 ** -14
_LINEAR = (nn.Linear, nn.modules.conv._ConvNd)
# torch callables with f(s x) = s f(x) for s > 0 (in their other arguments as the model calls them)
_HOMOGENEOUS = {F.relu, torch.relu, torch.relu_, torch.Tensor.relu, torch.Tensor.relu_, F.leaky_relu,
                F.leaky_relu_, F.prelu, torch.prelu, F.max_pool1d, F.max_pool2d, F.max_pool3d, F.avg_pool1d,
                F.avg_pool2d, F.avg_pool3d, F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_max_pool1d,
                F.adaptive_max_pool2d, F.dropout, F.pixel_shuffle, F.pixel_unshuffle, torch.flatten,
                torch.Tensor.flatten, torch.Tensor.view, torch.Tensor.reshape, torch.reshape, torch.Tensor.permute,
                torch.permute, torch.Tensor.transpose, torch.transpose, torch.Tensor.contiguous,
                torch.Tensor.__getitem__, torch.Tensor.unsqueeze, torch.Tensor.squeeze}


# a product: homogeneous in a factor that appears once among its arguments (x * x is not)
_PRODUCT = {torch.mul, torch.Tensor.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__}


def _homogeneous_call(func, args, kwargs) -> bool:
    if func in _PRODUCT:
        factors = [a for a in args if isinstance(a, torch.Tensor)]
        return len(factors) == 2 and factors[0] is not factors[1]
    if func is F.pad:                                    # only zero padding keeps f(s x) = s f(x)
        mode = kwargs.get("mode", args[2] if len(args) > 2 else "constant")
        value = kwargs.get("value", args[3] if len(args) > 3 else None)
        return mode == "constant" and not value
    if func is F.interpolate:
        return kwargs.get("mode", args[3] if len(args) > 3 else "nearest") == "nearest"
    return func in _HOMOGENEOUS


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


class _Trace(TorchFunctionMode):
    """Every top-level torch call: (func, ids of tensor arguments, ids of tensor results, homogeneous?).
    Keeps every tensor alive until the trace is dropped, so an id names one tensor."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[object, set[int], list[int], bool]] = []
        self.keep: list[torch.Tensor] = []
        self.peak: dict[int, float] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        ins = list(_tensors(args)) + list(_tensors(kwargs))
        outs = list(_tensors(out))
        if ins and outs:                                 # size / dim queries return no tensor: not a use
            self.keep += ins + outs
            for t in outs:
                if t.is_floating_point() and t.numel():
                    self.peak[id(t)] = float(t.detach().abs().nan_to_num(0.0).max())
            self.calls.append((func, {id(t) for t in ins}, [id(t) for t in outs], _homogeneous_call(func, args,
                                                                                                     kwargs)))
        return out


def _peak(t) -> float:
    if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
        return float(t.detach().abs().nan_to_num(0.0).max())
    return 0.0


def _peaks(model, args, kwargs) -> dict[str, tuple[float, int, float]]:
    """Peak |output|, call count and peak |input| of every conv / linear layer, from one plain forward with
    hooks."""
    seen: dict[str, list] = {}
    hooks = []
    for name, m in model.named_modules():
        if isinstance(m, _LINEAR):
            def hook(mod, inp, out, name=name):
                rec = seen.setdefault(name, [0.0, 0, 0.0])
                rec[0] = max(rec[0], _peak(out))
                rec[1] += 1
                rec[2] = max(rec[2], _peak(inp[0]) if inp else 0.0)
            hooks.append(m.register_forward_hook(hook))
    run_hooked(model, args, kwargs, hooks)
    return {n: tuple(rec) for n, rec in seen.items()}


def run_hooked(model, args, kwargs, hooks) -> None:
    """One no-grad forward, then the hooks (already registered) removed, also when the forward raises."""
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for h in hooks:
            h.remove()


def _pairs(model, args, kwargs, firsts: set[str]) -> dict[str, tuple[str, float]]:
    """first layer -> (the layer its output reaches through homogeneous calls only, the peak |value| on the way
    there; see the module docstring)."""
    ends: dict[str, tuple[int, int]] = {}        # layer -> (id of its input, id of its output)
    hooks = [m.register_forward_hook(lambda mod, inp, out, name=name: ends.__setitem__(
        name, (id(inp[0]) if inp and isinstance(inp[0], torch.Tensor) else -1,
               id(out) if isinstance(out, torch.Tensor) else -2)))
             for name, m in model.named_modules() if isinstance(m, _LINEAR)]
    trace = _Trace()
    try:
        with torch.no_grad(), trace:
            model(*args, **kwargs)
    finally:
        for h in hooks:
            h.remove()
    by_input = {i: name for name, (i, _) in ends.items()}
    found = {}
    for first in firsts:
        if first not in ends:
            continue
        t, used = ends[first][1], set()
        peak, products = trace.peak.get(t, 0.0), 0
        while True:
            users = [k for k, (_, ins, _, _) in enumerate(trace.calls) if t in ins and k not in used]
            if len(users) != 1:
                break
            func, _, outs, homogeneous = trace.calls[users[0]]
            if t in by_input and by_input[t] != first:          # the one user is the next layer's own op
                found[first] = (by_input[t], peak)
                break
            products += func in _PRODUCT
            if not homogeneous or len(outs) != 1 or products > 1:
                break
            used.add(users[0])
            t = outs[0]
            peak = max(peak, trace.peak.get(t, 0.0))
    del trace
    return found


def _outputs(model, args, kwargs) -> list[torch.Tensor]:
    from ...core.outputs import flat_tensors

    with torch.no_grad():
        return [t.detach().clone() for t in flat_tensors(model(*args, **kwargs))]


def _scale(first: nn.Module, second: nn.Module, k: int) -> None:
    with torch.no_grad():
        first.weight.mul_(2.0 ** -k)
        if first.bias is not None:
            first.bias.mul_(2.0 ** -k)
        second.weight.mul_(2.0 ** k)


def normal_headroom(weight: torch.Tensor) -> int:
    """The largest k for which the weight's median nonzero |value| times 2^-k is still a normal fp16 number."""
    w = weight.detach().abs()
    median = float(w[w > 0].median()) if bool((w > 0).any()) else 1.0
    return math.floor(math.log2(max(median, 1e-30) / FP16_MIN_NORMAL))


def _exponent(peak: float, first: nn.Module, second: nn.Module, target: float) -> int:
    k = min(math.ceil(math.log2(peak / target)), normal_headroom(first.weight))
    w2 = float(second.weight.detach().abs().max())
    return min(k, math.floor(math.log2(MAX_SCALED_WEIGHT / w2)) if w2 > 0 else k)


@register("patch_rescale_homogeneous", wall="fp16_overflow")
def patch_rescale_homogeneous(model: nn.Module, example_inputs=None, limit: float = DEFAULT_LIMIT,
                              target: float = DEFAULT_TARGET) -> list[Change]:
    """Conv / linear layers whose peak |output| on `example_inputs` exceeds `limit`, followed by homogeneous ops
    and one conv / linear layer: weights rescaled by 2^-k / 2^k. Bit-identical outputs in fp32 (checked; a pair
    that changes any output is undone). Without example inputs nothing is measured and nothing changes."""
    if example_inputs is None:
        return []
    from ..apply import split_example_inputs

    args, kwargs = split_example_inputs(example_inputs)
    peaks = _peaks(model, args, kwargs)
    if not any(max(p, p_in) > limit for p, _, p_in in peaks.values()):
        return []
    # every single-call layer may start a chain: a product's peak can be past the limit when neither factor is
    single = {n for n, (p, calls, _) in peaks.items() if calls == 1 and math.isfinite(p)}
    pairs = {first: (second, peak) for first, (second, peak) in _pairs(model, args, kwargs, single).items()
             if limit < peak < math.inf}
    reference = _outputs(model, args, kwargs)
    changes = []
    for first_name in sorted(pairs, key=list(peaks).index):
        second_name, peak = pairs[first_name]
        if peaks.get(second_name, (0, 0, 0))[1] != 1:
            continue
        first, second = model.get_submodule(first_name), model.get_submodule(second_name)
        if any(torch.nn.utils.parametrize.is_parametrized(m) for m in (first, second)):
            continue
        k = _exponent(peak, first, second, target)
        if k < 1:
            continue
        _scale(first, second, k)
        if not all(torch.equal(a, b) for a, b in zip(_outputs(model, args, kwargs), reference)):
            _scale(first, second, -k)                   # not bit-identical: this pair is not what it looked like
            continue
        changes.append(Change(first_name, f"{type(first).__name__} output (peak on the way {peak:.4g}) scaled "
                                          f"by 2^-{k}, folded back into {second_name} ({type(second).__name__})",
                              "patch_rescale_homogeneous", True))
    return changes
