"""State updates, masks and constants: output aliasing, masked attention, constant-folding blow-up.

* Output aliasing (symptom `output_aliasing`, LiteRT#8599): an ADD of two runtime tensors whose
  result is a graph output AND is consumed further down the graph can come back holding one of
  its operands instead of the sum (seen on phones) -- the shape of every explicit state update in
  a streaming or recurrent graph. Fix: return `acc * one` where `one` is a RUNTIME input holding
  1.0 (a constant 1.0 would be folded away and restore the pattern). `AliasSafeOutputs` /
  `patch_output_aliasing` add that input (named "one") and multiply the outputs by it;
  `feed_one` adds it to an input map on the recipe side; `find_aliased_outputs` finds the bad
  pattern in a converted file. Exact: x * 1.0 == x in every precision.
* Masked attention (symptom `masked_attention`): `scores + mask[1,1,S,S]` after a BATCH_MATMUL
  was silently miscomputed on older runtimes (size-1 head axis). `expand_attention_mask` makes
  the mask [1,H,S,S] (a concatenation: no BROADCAST_TO, which the GPU rejects at runtime);
  `expand_mask_array` does the same host-side for a mask fed as an input. Exact (a copy).
* Constant-folding blow-up (symptom `constant_blowup`): a frozen parameter times a constant
  (gain * table) is folded by the converter into a full-size constant in every block.
  `find_constant_blowup(model_info, params)` flags it from the static file (constant bytes per
  op, total constants against the module's parameter bytes, big constants that only feed
  elementwise ops); `constant_to_input` feeds one factor as a runtime input instead (param x
  input never folds). Exact: the same products, computed at run time.
"""
from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import torch
import torch.nn as nn

from . import Change, register
from ..model_info import ModelInfo, TensorInfo

__all__ = ["ONE_INPUT", "alias_safe_output", "AliasSafeOutputs", "patch_output_aliasing", "feed_one",
           "AliasedOutput", "find_aliased_outputs", "outputs_guarded_by_runtime_one",
           "expand_attention_mask", "expand_mask_array",
           "ConstantFinding", "ConstantBlowup", "find_constant_blowup", "parameter_bytes",
           "ConstantToInput", "constant_to_input", "feed_runtime_constants"]

ONE_INPUT = "one"


# ---------------------------------------------------------------------------------------------
# output aliasing
# ---------------------------------------------------------------------------------------------

def alias_safe_output(acc: torch.Tensor, one: torch.Tensor) -> torch.Tensor:
    """`acc * one` -- use for a state tensor that is returned and also used further on. `one` must be
    a runtime input holding 1.0 (see `feed_one`)."""
    return acc * one


def _guard(out, one, which: set[int] | None):
    if isinstance(out, torch.Tensor):
        return out * one if out.is_floating_point() and (which is None or 0 in which) else out
    if isinstance(out, (tuple, list)):
        guarded = [o * one if isinstance(o, torch.Tensor) and o.is_floating_point()
                   and (which is None or i in which) else o for i, o in enumerate(out)]
        return type(out)(guarded)
    if isinstance(out, dict):
        return {k: (v * one if isinstance(v, torch.Tensor) and v.is_floating_point()
                    and (which is None or i in which) else v) for i, (k, v) in enumerate(out.items())}
    return out


class AliasSafeOutputs(nn.Module):
    """Wrap `model`: forward(*args, one, **kwargs) returns its floating outputs multiplied by `one`
    (only the output positions in `outputs`, default all). Convert with kwargs={"one": torch.ones(1)};
    the converted signature gains an input named "one"."""

    def __init__(self, model: nn.Module, outputs: Iterable[int] | None = None):
        super().__init__()
        self.model = model
        self.outputs = set(outputs) if outputs is not None else None

    def forward(self, *args, one: torch.Tensor, **kwargs):
        return _guard(self.model(*args, **kwargs), one, self.outputs)


def _guarded_forward(self, *args, one: torch.Tensor, **kwargs):
    return _guard(type(self).forward(self, *args, **kwargs), one, self._alias_guard_outputs)


@register("patch_output_aliasing", wall="output_aliasing", default=False)
def patch_output_aliasing(model: nn.Module, outputs: Iterable[int] | None = None) -> list[Change]:
    """In place: `model.forward` takes a new keyword input `one` and multiplies its floating outputs
    by it (see AliasSafeOutputs). Not applied by default: it changes the model's signature. Only
    this instance changes (a bound method in its __dict__; deep copies rebind to the copy); the
    class's forward is untouched."""
    if "_alias_guard_outputs" in vars(model):
        return []
    model._alias_guard_outputs = set(outputs) if outputs is not None else None
    model.forward = types.MethodType(_guarded_forward, model)
    return [Change("", "outputs emitted as out * one ('one': new runtime input holding 1.0)",
                   "patch_output_aliasing", True)]


def feed_one(inputs: dict[str, np.ndarray], name: str = ONE_INPUT) -> dict[str, np.ndarray]:
    """Recipe side: a copy of a signature's input map with the runtime 1.0 added under `name`."""
    fed = dict(inputs)
    fed[name] = np.ones((1,), dtype=np.float32)
    return fed


@dataclass
class AliasedOutput:
    op_index: int
    output: TensorInfo
    operands: tuple[str, str]
    consumers: list[str]


def find_aliased_outputs(info: ModelInfo, subgraph: int = 0) -> list[AliasedOutput]:
    """ADD ops with two runtime operands whose result is a graph output and also feeds other ops:
    the pattern LiteRT#8599 miscomputes on phones."""
    outputs = set(info.graph_outputs[subgraph]) if info.graph_outputs else set()
    consumers = info.consumers(subgraph)
    tensors = info.tensors[subgraph]
    found = []
    for op in info.ops:
        if op.subgraph != subgraph or op.op != "ADD" or not op.outputs:
            continue
        out = op.outputs[0]
        operands = [i for i in op.inputs if i >= 0]
        if out in outputs and consumers.get(out) and len(operands) == 2 \
                and not any(tensors[i].is_constant for i in operands):
            found.append(AliasedOutput(op.index, tensors[out], (tensors[operands[0]].name, tensors[operands[1]].name),
                                       [c.op for c in consumers[out]]))
    return found


def outputs_guarded_by_runtime_one(info: ModelInfo, one_name: str = ONE_INPUT, subgraph: int = 0) -> dict[str, bool]:
    """For each graph output: is it produced by a MUL whose other operand is the runtime input
    `one_name` (possibly through a RESHAPE)? The converted form of AliasSafeOutputs."""
    tensors = info.tensors[subgraph]
    producers = info.producers(subgraph)
    ones = {i for i in info.graph_inputs[subgraph] if tensors[i].name.endswith(one_name)}
    for op in info.ops:                            # a reshaped view of `one` counts as `one`
        if op.subgraph == subgraph and op.op == "RESHAPE" and op.inputs and op.inputs[0] in ones:
            ones.update(op.outputs)
    result = {}
    for t in info.graph_outputs[subgraph]:
        op = producers.get(t)
        result[tensors[t].name] = bool(op is not None and op.op == "MUL" and any(i in ones for i in op.inputs))
    return result


# ---------------------------------------------------------------------------------------------
# masked attention
# ---------------------------------------------------------------------------------------------

def expand_attention_mask(mask: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, 1, S, S] additive mask -> [B, H, S, S] by concatenation (no BROADCAST_TO), so the ADD
    onto the BATCH_MATMUL scores has equal shapes. A constant mask folds into one [B, H, S, S]
    constant. Masks already [B, H, S, S] are returned unchanged."""
    if mask.dim() != 4:
        raise ValueError(f"expected a rank-4 mask [B, 1, S, S], got shape {tuple(mask.shape)}")
    if int(mask.shape[1]) == num_heads:
        return mask
    if int(mask.shape[1]) != 1:
        raise ValueError(f"mask head axis is {mask.shape[1]}, expected 1 or {num_heads}")
    return torch.cat([mask] * num_heads, dim=1)


def expand_mask_array(mask: np.ndarray, num_heads: int) -> np.ndarray:
    """Host side: the same expansion for a mask fed to the model as an input."""
    mask = np.asarray(mask)
    if mask.shape[1] == num_heads:
        return mask
    return np.ascontiguousarray(np.repeat(mask, num_heads, axis=1))


# ---------------------------------------------------------------------------------------------
# constant-folding blow-up
# ---------------------------------------------------------------------------------------------

_ELEMENTWISE = {"ADD", "SUB", "MUL", "DIV", "SQUARED_DIFFERENCE", "MAXIMUM", "MINIMUM", "POW"}


@dataclass
class ConstantFinding:
    tensor: TensorInfo
    consumers: list[str]
    reason: str


@dataclass
class ConstantBlowup:
    """What `find_constant_blowup` saw. `blown_up` is the verdict."""
    file_bytes: int
    constant_bytes: int
    param_bytes: int | None
    ratio: float
    per_op: list[tuple[int, str, int]] = field(default_factory=list)     # (op index, op, constant input bytes)
    suspects: list[ConstantFinding] = field(default_factory=list)

    @property
    def blown_up(self) -> bool:
        if self.param_bytes is not None:
            return self.constant_bytes > self.ratio * self.param_bytes and bool(self.suspects)
        return len(self.suspects) >= 2

    def summary(self) -> str:
        head = f"constants {self.constant_bytes / 1e6:.2f} MB in a {self.file_bytes / 1e6:.2f} MB file"
        if self.param_bytes is not None:
            head += f"; module parameters {self.param_bytes / 1e6:.2f} MB ({self.constant_bytes / max(self.param_bytes, 1):.2f}x)"
        lines = [head + (" -- BLOWN UP" if self.blown_up else "")]
        for s in self.suspects[:10]:
            lines.append(f"  {s.tensor.name} {s.tensor.shape} {s.tensor.nbytes / 1e3:.0f} kB -> {','.join(s.consumers)}: {s.reason}")
        return "\n".join(lines)


def parameter_bytes(module: nn.Module) -> int:
    """Bytes of a module's parameters and buffers (shared tensors counted once)."""
    seen, total = set(), 0
    for t in list(module.parameters()) + list(module.buffers()):
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def find_constant_blowup(info: ModelInfo, params: int | nn.Module | None = None, *, ratio: float = 1.25,
                         min_bytes: int = 64 * 1024, subgraph: int | None = None) -> ConstantBlowup:
    """Static check for folded parameter x constant products.

    `params`: the source module (or its parameter bytes). Verdict: the file's constants exceed
    `ratio` x the parameter bytes AND some constant of at least `min_bytes` feeds only elementwise
    ops (a real weight feeds a CONV / FULLY_CONNECTED / BATCH_MATMUL / gather; a folded gain x table
    product feeds ADD / MUL). Without `params`: two or more such constants. Suspects are listed
    largest first; `per_op` lists constant input bytes per op, largest first."""
    param_bytes = parameter_bytes(params) if isinstance(params, nn.Module) else params
    per_op, suspects = [], []
    for sg, tensors in enumerate(info.tensors):
        if subgraph is not None and sg != subgraph:
            continue
        consumers = info.consumers(sg)
        for op in info.ops:
            if op.subgraph == sg:
                nbytes = sum(tensors[i].nbytes for i in op.inputs if i >= 0 and tensors[i].is_constant)
                if nbytes:
                    per_op.append((op.index, op.op, nbytes))
        for t in tensors:
            if not t.is_constant or t.nbytes < min_bytes:
                continue
            users = [c.op for c in consumers.get(t.index, [])]
            if users and all(u in _ELEMENTWISE for u in users):
                suspects.append(ConstantFinding(t, users, "large constant feeding only elementwise ops "
                                                          "(a folded parameter x constant product?)"))
    per_op.sort(key=lambda e: -e[2])
    suspects.sort(key=lambda s: -s.tensor.nbytes)
    return ConstantBlowup(info.size_bytes, info.constant_bytes, param_bytes, ratio, per_op, suspects)


def _input_name(path: str) -> str:
    return path.replace(".", "_")


class ConstantToInput(nn.Module):
    """Run `model` with the parameters / buffers named in `names` supplied as runtime inputs
    (keyword inputs named with '.' -> '_'), through torch.func.functional_call: nothing multiplied
    by them can be folded into a constant. `runtime_inputs()` gives the values to feed."""

    def __init__(self, model: nn.Module, names: Iterable[str]):
        super().__init__()
        self.model = model
        state = dict(model.named_parameters())
        state.update(dict(model.named_buffers()))
        self.names = list(names)
        missing = [n for n in self.names if n not in state]
        if missing:
            raise KeyError(f"not a parameter or buffer of the model: {missing}")
        self._values = {n: state[n].detach().clone() for n in self.names}
        self.input_names = {n: _input_name(n) for n in self.names}

    def runtime_inputs(self) -> dict[str, torch.Tensor]:
        return {self.input_names[n]: v for n, v in self._values.items()}

    def forward(self, *args, **kwargs):
        fed = {n: kwargs.pop(self.input_names[n]) for n in self.names}
        return torch.func.functional_call(self.model, fed, args, kwargs)


def constant_to_input(model: nn.Module, names: Iterable[str]) -> ConstantToInput:
    """Feed the named parameters / buffers (one factor of each folded product) as runtime inputs."""
    return ConstantToInput(model, names)


def feed_runtime_constants(wrapper: ConstantToInput, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Recipe side: a copy of a signature's input map with the wrapper's runtime constants added."""
    fed = dict(inputs)
    for name, value in wrapper.runtime_inputs().items():
        fed[name] = value.cpu().numpy().astype(np.float32)
    return fed
