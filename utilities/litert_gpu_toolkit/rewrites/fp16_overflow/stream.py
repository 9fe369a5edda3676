"""A residual stream past fp16's range: the whole stream scaled by 2^-k, folded into what writes and reads it.

A pre-norm network carries one tensor from block to block: each block adds a branch to it, and each branch
starts with a normalisation. When that tensor itself leaves fp16's range -- a pooling conv with large trained
weights writing it (timm's PiT with trained ranges: 3.5e5 from a stage's first conv to the final norm) -- the
GPU holds inf from there on. `patch_rescale_homogeneous` cannot help: the stream reaches its next conv / linear
only through a residual add.

LayerNorm, RMSNorm and GroupNorm are invariant to a positive scale s of their input once eps is scaled by s^2,
and conv / linear layers commute with it. So every tensor of the stream is multiplied by s = 2^-k:
- the layers that write into it (the first one, each branch's last layer, a concatenated token's projection):
  weight and bias times s; a parameter added or concatenated into it (a position table, a class token): times s;
- a conv / linear that reads it: bias times s (its output joins the stream); a norm that reads it: eps times s^2;
- views, zero padding, pooling, dropout, (leaky) ReLU and products with tensors outside the stream pass the
  scale on.

With s a power of two every scaled value is exactly the unscaled one times s (binary floating point), so the
outputs are **bit-identical** in fp32 -- checked on the example inputs, and undone otherwise; the writers' and
readers' outputs are checked to have moved by exactly s, so a stream that was not what it looked like is undone
too. No op is added.

Which stream: one traced forward on the example inputs (norm, conv and linear modules as single steps). It
starts at a conv / linear output whose peak |value| exceeds `limit` (2^13) and is grown until closed: every
reader is one of the above, every tensor added or concatenated to it can be scaled at its source, no model
output is in it, and every module touched runs once. k brings the stream's peak to about `target` (2^10),
lowered so the scaled writers' median |weight| stays a normal fp16 number; not applied when that leaves the peak
above `limit`.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .. import Change, register
from .rescale import (_HOMOGENEOUS, _LINEAR, _PRODUCT, DEFAULT_LIMIT, DEFAULT_TARGET, _outputs, _peaks, _tensors,
                      _Trace, normal_headroom, run_hooked)

_ADD = {torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__, torch.sub, torch.Tensor.sub,
        torch.Tensor.__sub__, torch.Tensor.__rsub__}
_CAT = {torch.cat, torch.concat, torch.stack}
_DIV = {torch.div, torch.Tensor.div, torch.Tensor.__truediv__}
_SPLIT = {torch.split, torch.Tensor.split, torch.chunk, torch.Tensor.chunk, torch.unbind, torch.Tensor.unbind}
# calls that pass a scale on unchanged: views, zero padding, pooling, dropout, (leaky) ReLU -- positively homogeneous
_PASS = (_HOMOGENEOUS - _PRODUCT) | _SPLIT | {torch.Tensor.clone, torch.Tensor.expand, torch.Tensor.narrow,
                                              torch.Tensor.flatten}
_EPS = ("eps", "variance_epsilon")


def _is_norm(m: nn.Module) -> bool:
    """Scale-invariant normalisations (not BatchNorm: in eval it is an affine map)."""
    name = type(m).__name__
    return (isinstance(m, (nn.LayerNorm, nn.GroupNorm)) or name.endswith(("LayerNorm", "RMSNorm", "LayerNorm2d",
                                                                         "GroupNorm"))) and \
        any(isinstance(getattr(m, a, None), float) for a in _EPS)


class _Graph(_Trace):
    """The trace with conv / linear / norm modules as single steps: calls made inside one are not recorded."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.inside = 0
        self.steps: list[tuple] = []   # ("module", name, in id, out id) or ("call", func, tensor ids, outs, numbers)
        self.runs: dict[str, int] = {}
        self.norm_names = {n for n, m in model.named_modules() if _is_norm(m)}
        self.out_ids: set[int] = set()
        self.hooks = []
        for name, m in model.named_modules():
            if isinstance(m, _LINEAR) or name in self.norm_names:
                self.hooks.append(m.register_forward_pre_hook(lambda mod, inp: self._enter()))
                self.hooks.append(m.register_forward_hook(lambda mod, inp, out, name=name: self._leave(name, inp,
                                                                                                    out)))

    def _enter(self):
        self.inside += 1

    def _leave(self, name, inp, out):
        if self.inside == 1 and inp and isinstance(inp[0], torch.Tensor) and isinstance(out, torch.Tensor):
            self.keep += [inp[0], out]          # (still "inside": the peak's own calls are not steps)
            self.peak[id(out)] = float(out.detach().abs().nan_to_num(0.0).max()) if out.numel() else 0.0
            self.steps.append(("module", name, id(inp[0]), id(out)))
            self.runs[name] = self.runs.get(name, 0) + 1
        self.inside -= 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.inside:
            return func(*args, **(kwargs or {}))
        n = len(self.calls)
        out = super().__torch_function__(func, types, args, kwargs)
        if len(self.calls) > n:
            _, _, outs, _ = self.calls[-1]
            ins = [id(a) for a in _tensors(args)] + [id(a) for a in _tensors(kwargs or {})]
            numbers = [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]
            self.steps.append(("call", func, ins, outs, numbers))
        return out

    def remove(self):
        for h in self.hooks:
            h.remove()


class _Stream:
    """Grows the set of scaled tensors from one writer until it closes (or `fail` says why it cannot)."""

    def __init__(self, graph: _Graph, params: dict[int, str], outputs: set[int]):
        self.g, self.params, self.outputs = graph, params, outputs
        self.users: dict[int, list[int]] = {}
        self.source: dict[int, int] = {}
        for i, step in enumerate(graph.steps):
            ins = [step[2]] if step[0] == "module" else step[2]
            outs = [step[3]] if step[0] == "module" else step[3]
            for t in ins:
                self.users.setdefault(t, []).append(i)
            for t in outs:
                if t not in ins:                  # x.contiguous(), eval dropout: the same tensor back
                    self.source[t] = i
        self.scaled: set[int] = set()
        self.writers: set[str] = set()
        self.readers: set[str] = set()
        self.norms: set[str] = set()
        self.tables: set[str] = set()
        self.todo: list[int] = []
        self.fail: str | None = None
        self.start = ""

    def _add(self, t: int) -> None:
        if t not in self.scaled:
            self.scaled.add(t)
            self.todo.append(t)

    def _module(self, name: str, role: set) -> None:
        if self.g.runs.get(name, 0) != 1:
            self.fail = f"{name} runs more than once"
        elif role is self.readers and name in self.writers and name != self.start:
            self.writers.discard(name)          # its input is in the stream after all: the bias alone scales it
        elif any(name in s for s in (self.writers, self.readers, self.norms) if s is not role):
            self.fail = f"{name} would be scaled twice"
        role.add(name)

    def write(self, t: int) -> None:
        """Make t scaled at its source."""
        if t in self.scaled or self.fail:
            return
        if t in self.params:
            self.tables.add(self.params[t])
            self._add(t)
            return
        i = self.source.get(t)
        step = self.g.steps[i] if i is not None else None
        if step is not None and step[0] == "module" and step[1] not in self.g.norm_names:
            self._module(step[1], self.writers)
            self._add(t)
        elif step is not None and step[0] == "call" and step[1] in _PASS:
            self.write(step[2][0])
        else:
            self.fail = f"a tensor joining the stream cannot be scaled at its source ({step[1] if step else 'input'})"

    def grow(self, start: str, out: int) -> None:
        self.start = start
        self._module(start, self.writers)
        self._add(out)
        while self.todo and not self.fail:
            t = self.todo.pop()
            if t in self.outputs:
                self.fail = "the stream is a model output"
            for i in self.users.get(t, []):
                if not self.fail:
                    self._read(self.g.steps[i], t)

    def _read(self, step, t: int) -> None:
        if step[0] == "module":
            name = step[1]
            if name in self.g.norm_names:
                self._module(name, self.norms)
            else:
                self._module(name, self.readers)
                self._add(step[3])
            return
        func, tensors, outs, others = step[1], step[2], step[3], step[4]
        if func in _PASS and tensors[:1] == [t] and len(tensors) == 1:
            for o in outs:
                self._add(o)
        elif func in _ADD and not any(others):
            for a in tensors:
                self.write(a)
            for o in outs:
                self._add(o)
        elif func in _CAT:
            for a in tensors:
                self.write(a)
            for o in outs:
                self._add(o)
        elif (func in _PRODUCT or (func in _DIV and tensors[0] == t)) and tensors.count(t) == 1 and \
                not any(a in self.scaled for a in tensors if a != t):
            for o in outs:
                self._add(o)
        else:
            self.fail = f"{getattr(func, '__name__', func)} reads the stream"


def _trace(model, args, kwargs) -> _Graph:
    g = _Graph(model)
    try:
        with torch.no_grad(), g:
            out = model(*args, **kwargs)
    finally:
        g.remove()
    from ...core.outputs import flat_tensors

    g.out_ids = {id(t) for t in flat_tensors(out)}
    g.keep += list(flat_tensors(out))
    return g


def _scale(model: nn.Module, s: _Stream, k: int) -> None:
    f = 2.0 ** -k
    with torch.no_grad():
        for name in s.writers:
            m = model.get_submodule(name)
            m.weight.mul_(f)
            if m.bias is not None:
                m.bias.mul_(f)
        for name in s.readers:
            m = model.get_submodule(name)
            if m.bias is not None:
                m.bias.mul_(f)
        for name in s.tables:
            model.get_parameter(name).mul_(f)
        for name in s.norms:
            m = model.get_submodule(name)
            for a in _EPS:
                if isinstance(getattr(m, a, None), float):
                    setattr(m, a, getattr(m, a) * f * f)


def _exponent(model: nn.Module, s: _Stream, peak: float, target: float) -> int:
    k = math.ceil(math.log2(peak / target))
    return min([k] + [normal_headroom(model.get_submodule(name).weight) for name in s.writers])


def _module_peaks(model, args, kwargs, names) -> dict[str, float]:
    seen: dict[str, float] = {}
    hooks = [model.get_submodule(n).register_forward_hook(
        lambda mod, inp, out, n=n: seen.__setitem__(n, float(out.detach().abs().max()))) for n in names]
    run_hooked(model, args, kwargs, hooks)
    return seen


@register("patch_rescale_stream", wall="fp16_overflow")
def patch_rescale_stream(model: nn.Module, example_inputs=None, limit: float = DEFAULT_LIMIT,
                         target: float = DEFAULT_TARGET) -> list[Change]:
    """Streams whose peak |value| on `example_inputs` exceeds `limit`, scaled by 2^-k as the module docstring
    says. Bit-identical outputs in fp32 (checked; undone otherwise). Without example inputs nothing changes."""
    if example_inputs is None:
        return []
    from ..apply import split_example_inputs

    args, kwargs = split_example_inputs(example_inputs)
    if not any(limit < peak < math.inf for peak, _, _ in _peaks(model, args, kwargs).values()):
        return []                                 # the usual case: one forward with hooks, no trace
    changes: list[Change] = []
    tried: set[str] = set()
    while True:
        g = _trace(model, args, kwargs)
        params = {id(p): n for n, p in model.named_parameters()}
        starts = [(step[1], step[3]) for step in g.steps if step[0] == "module" and step[1] not in g.norm_names
                  and step[1] not in tried and limit < g.peak.get(step[3], 0.0) < math.inf]
        if not starts:
            return changes
        name, out = starts[0]
        tried.add(name)
        stream = _Stream(g, params, g.out_ids)
        stream.grow(name, out)
        peak = max(g.peak.get(t, 0.0) for t in stream.scaled)
        del g
        if stream.fail or not math.isfinite(peak):
            continue
        k = _exponent(model, stream, peak, target)
        if k < 1 or peak * 2.0 ** -k > limit:
            continue
        touched = sorted(stream.writers | stream.readers)
        before = _module_peaks(model, args, kwargs, touched)
        reference = _outputs(model, args, kwargs)
        _scale(model, stream, k)
        after = _module_peaks(model, args, kwargs, touched)
        same = all(torch.equal(a, b) for a, b in zip(_outputs(model, args, kwargs), reference))
        if not same or any(after[n] != before[n] * 2.0 ** -k for n in touched):
            _scale(model, stream, -k)                 # not the stream it looked like
            continue
        changes.append(Change(name, f"stream from {name} (peak {peak:.4g}) scaled by 2^-{k}: {len(stream.writers)} "
                                    f"writers, {len(stream.readers)} readers, {len(stream.norms)} norms, "
                                    f"{len(stream.tables)} tables", "patch_rescale_stream", True))
