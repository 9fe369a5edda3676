"""Constants that grow the file (folded weights, precomputed tables): feed them as runtime inputs instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import torch
import torch.nn as nn

from ..core.model_info import ModelInfo, TensorInfo


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
            ratio = self.constant_bytes / max(self.param_bytes, 1)
            head += f"; module parameters {self.param_bytes / 1e6:.2f} MB ({ratio:.2f}x)"
        lines = [head + (" -- BLOWN UP" if self.blown_up else "")]
        for s in self.suspects[:10]:
            lines.append(
                f"  {s.tensor.name} {s.tensor.shape} {s.tensor.nbytes / 1e3:.0f} kB -> "
                f"{','.join(s.consumers)}: {s.reason}"
            )
        return "\n".join(lines)


def parameter_bytes(module: nn.Module) -> int:
    """Bytes of a module's parameters and buffers (shared tensors counted once)."""
    seen, total = set(), 0
    for t in list(module.parameters()) + list(module.buffers()):
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def find_constant_blowup(
    info: ModelInfo,
    params: int | nn.Module | None = None,
    *,
    ratio: float = 1.25,
    min_bytes: int = 64 * 1024,
    subgraph: int | None = None,
) -> ConstantBlowup:
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
                suspects.append(
                    ConstantFinding(
                        t, users, "large constant feeding only elementwise ops (a folded parameter x constant product?)"
                    )
                )
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
