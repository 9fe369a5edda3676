"""Attention scores past fp16's range before their scale: move the power of two in the scale into the query weights.

Hugging Face's eager attention (and most hand-written attention) computes `matmul(q, k^T) * scaling`: the
products q_i k_i and their sum are formed at full size and only then multiplied by 1/sqrt(d). When the query and
key carry large values -- an un-normalised residual stream with outlier channels entering a post-LN encoder, a
projection that amplifies a few channels -- the sum leaves fp16's 65504 on the GPU although the scaled score does
not: inf, then NaN through the softmax, at full residency. (torch's fused `F.scaled_dot_product_attention` is
lowered with the scale applied to q and k first and does not have this problem; measured on llvmpipe.)

`patch_prescale_attention` writes scaling = 2^e * r (e = floor(log2 scaling), 1 <= r < 2), multiplies the query
projection's weight and bias by 2^e and sets the module's `scaling` to r. Every query value, product and partial
sum is then exactly 2^e times the original (binary floating point: a power of two commutes with rounding) and the
scores come out **bit-identical** in fp32 -- the rewrite checks that on the example inputs and undoes a module where
they are not. Before that, one traced forward checks the pattern itself: the projection's output reaches the
matmul's first operand through views alone and the matmul's result goes only to a multiply by `scaling` (a norm or
rotary embedding in between, or a saturated softmax that would hide a wrong fold from the output check, leave
the module alone).
No op is added; only constants change.

Which modules: a module with a float attribute `scaling` in (0, 1) that its forward passes to the attention
function (Hugging Face's attention classes), and one Linear child holding the query projection (`q_proj`, `query`,
`q`, `q_lin`, `to_q`, as the libraries name it). Applied only where the example inputs show a query-key product
that can leave the range: peak |q| x peak |k| x head size > 2^13 (`limit`). Without example inputs nothing is
measured and nothing changes.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from .. import Change, register

DEFAULT_LIMIT = 2.0 ** 13
QUERY_NAMES = ("q_proj", "query", "q", "q_lin", "to_q")
KEY_NAMES = ("k_proj", "key", "k", "k_lin", "to_k")


def _child(module: nn.Module, names) -> tuple[str, nn.Linear] | None:
    for n in names:
        m = getattr(module, n, None)
        if isinstance(m, nn.Linear):
            return n, m
    return None


def _candidates(model: nn.Module) -> list[tuple[str, nn.Module, nn.Linear, nn.Linear]]:
    out = []
    for name, m in model.named_modules():
        s = getattr(m, "scaling", None)
        if not isinstance(s, float) or not 0.0 < s < 1.0:
            continue
        q, k = _child(m, QUERY_NAMES), _child(m, KEY_NAMES)
        if q is not None and k is not None:
            out.append((name, m, q[1], k[1]))
    return out


class _Calls(TorchFunctionMode):
    """Every torch call of one forward: (func, ids of tensor arguments, ids of tensor results, scalar arguments).
    Keeps the tensors alive so an id names one tensor."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[object, list[int], list[int], list[float]]] = []
        self.keep: list[torch.Tensor] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        ins = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        outs = [out] if isinstance(out, torch.Tensor) else [o for o in out if isinstance(o, torch.Tensor)] \
            if isinstance(out, (tuple, list)) else []
        if ins and outs:
            self.keep += ins + outs
            scalars = [float(a) for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]
            self.calls.append((func, [id(t) for t in ins], [id(t) for t in outs], scalars))
        return out


_MATMUL = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.bmm}
_SCALE = {torch.mul, torch.Tensor.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__}


def _scaled_scores(model, args, kwargs, hot) -> set[str]:
    """Names of the `hot` modules whose every call follows the pattern: the query projection's output reaches a
    matmul as its first operand through views alone, and the matmul's result goes only to a multiply by the
    module's `scaling` (a layer shared across depth, as in ALBERT, runs once per layer). One traced forward."""
    out_ids: dict[str, list[int]] = {name: [] for name, *_ in hot}
    hooks = [q.register_forward_hook(lambda _m, _i, o, name=name: out_ids[name].append(id(o)))
             for name, _m, q, _k in hot]
    trace = _Calls()
    try:
        with torch.no_grad(), trace:
            model(*args, **kwargs)
    finally:
        for h in hooks:
            h.remove()
    views = {torch.Tensor.view, torch.Tensor.reshape, torch.reshape, torch.Tensor.transpose, torch.transpose,
             torch.Tensor.permute, torch.permute, torch.Tensor.contiguous, torch.Tensor.unflatten}

    def follows(t: int, scaling: float) -> bool:
        for _ in range(8):
            users = [c for c in trace.calls if t in c[1]]
            if len(users) != 1:
                return False
            func, ins, outs, _ = users[0]
            if func in _MATMUL:
                after = [c for c in trace.calls if outs[0] in c[1]]
                return ins[0] == t and len(after) == 1 and after[0][0] in _SCALE and after[0][3] == [scaling]
            if func not in views:
                return False
            t = outs[0]
        return False

    return {name for name, m, _q, _k in hot if out_ids[name] and all(follows(t, m.scaling) for t in out_ids[name])}


def _head_size(module: nn.Module, q: nn.Linear) -> int:
    for attr in ("head_dim", "attention_head_size", "head_size", "d_head"):
        v = getattr(module, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    return max(1, round(module.scaling ** -2))            # scaling = head_size ** -0.5 in every library seen


def _fold(module: nn.Module, q: nn.Linear, e: int) -> None:
    with torch.no_grad():
        q.weight.mul_(2.0 ** e)
        if q.bias is not None:
            q.bias.mul_(2.0 ** e)
    module.scaling = module.scaling * 2.0 ** -e


@register("patch_prescale_attention", wall="fp16_overflow")
def patch_prescale_attention(model: nn.Module, example_inputs=None, limit: float = DEFAULT_LIMIT) -> list[Change]:
    """Attention modules whose query-key products can pass `limit` on `example_inputs`: the power of two in
    `scaling` moved into the query projection. Bit-identical in fp32 (checked; a module that changes any output is
    undone). Without example inputs nothing is measured and nothing changes."""
    if example_inputs is None:
        return []
    candidates = _candidates(model)
    if not candidates:
        return []
    from ..apply import split_example_inputs
    from .rescale import _outputs, _peaks

    args, kwargs = split_example_inputs(example_inputs)
    peaks = _peaks(model, args, kwargs)               # layer name -> (peak |output|, calls, peak |input|)
    names = {id(m): n for n, m in model.named_modules()}

    def peak(layer: nn.Linear) -> float:
        return peaks[names[id(layer)]][0]

    # a projection that never ran as a module (WavLM hands its weights to F.multi_head_attention_forward) has no
    # measured peak: nothing to move
    ran = [(n, m, q, k) for n, m, q, k in candidates if all(names[id(p)] in peaks for p in (q, k))]
    hot = [(n, m, q, k) for n, m, q, k in ran
           if peaks[names[id(q)]][1] >= 1 and math.isfinite(peak(q) * peak(k))
           and peak(q) * peak(k) * _head_size(m, q) > limit]
    if not hot:
        return []
    foldable = _scaled_scores(model, args, kwargs, hot)
    reference = _outputs(model, args, kwargs)
    changes = []
    for name, m, q, k in hot:
        if name not in foldable:
            continue
        s = m.scaling
        e = math.floor(math.log2(s))
        _fold(m, q, e)
        if not all(torch.equal(a, b) for a, b in zip(_outputs(model, args, kwargs), reference)):
            _fold(m, q, -e)                                  # read elsewhere in a way the trace did not show
            m.scaling = s
            continue
        changes.append(Change(name, f"scaling {s:.4g} = 2^{e} x {m.scaling:.4g}: 2^{e} moved into the query "
                                    f"projection (q·k products {peak(q):.3g} x {peak(k):.3g})",
                              "patch_prescale_attention", True))
    return changes
