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
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import torch
import torch.nn as nn

from . import Change, register
from ..core.model_info import ModelInfo, TensorInfo


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
