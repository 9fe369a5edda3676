"""Data-dependent Python branches in forward, fixed to the example input's outcome so torch.export can trace.

`if torch.min(y) < -1:`, `if (x > 0).any():`, `n = int(x.max().item())` and the like (onnx2torch writes
them) ask a tensor for a Python value; torch.export cannot know it and fails on a data-dependent guard
("Could not guard on data-dependent expression ..."). `record(model, args, kwargs)` runs the model once in
eager mode and records, per source line, every value such a call returned (`Tensor.__bool__`, `item`,
`__int__`, `__float__`, `__index__`, `tolist`); `Specialised(model, record)` replays them in the same order
while the converter traces it, so each branch takes the path the example input took.

A bool mask used as an index (`x[mask]`, `x[mask] = v`: adapters or experts chosen per token, XMOD's language
adapters) makes a size torch.export cannot know either ("data-dependent ... u0"). Such a mask is recorded as the
positions it selected (`mask.nonzero()`, constants) and replayed as that integer index: the same elements, at a
size fixed at export. The graph pass then reads the constant index as slices (`gather`) and the assignment as a
`where` (`masked_assign`).

Exactness: the converted graph equals the model on the example inputs (and on every input that takes the
same branches, yields the same item() values and selects the same mask positions) to fp32 rounding; on an
input that would branch differently it is wrong. `convert_for_gpu` therefore warns, naming each specialised
source line.
"""
from __future__ import annotations

import linecache
import os
import re
import sys

import torch
from torch.overrides import TorchFunctionMode

from ..core.error_lines import is_library

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the whole toolkit
VALUE_CALLS = frozenset({"__bool__", "item", "__int__", "__float__", "__index__", "tolist"})
_GUARD = re.compile(r"data-dependent expression|GuardOnDataDependentSymNode|DataDependentOutputException|"
                    r"data dependent|data-dependent")


def is_data_dependent_error(text: str) -> bool:
    """Did torch.export fail on a data-dependent guard?"""
    return bool(_GUARD.search(text or ""))


def _site() -> tuple[str, int]:
    """(file, line) of the innermost frame outside torch, litert-torch and this toolkit."""
    frame = sys._getframe(2)
    while frame is not None and is_library(frame.f_code.co_filename):
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else ("<unknown>", 0)


def _name(func) -> str:
    return getattr(func, "__name__", "")


_INDEXING = frozenset({"__getitem__", "__setitem__"})


def _bool_key(func, args) -> bool:
    """`x[mask]` / `x[mask] = v` with one bool tensor as the whole index."""
    return (_name(func) in _INDEXING and len(args) > 1 and isinstance(args[1], torch.Tensor)
            and args[1].dtype == torch.bool)


class MaskPositions(tuple):
    """The positions a bool mask selected in the example (a tuple of integer index tensors, one per mask axis)."""

    def __repr__(self) -> str:
        return f"a mask selecting {int(self[0].numel()) if self else 0} positions"


class _Recorder(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.values: dict[tuple[str, int], list] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if _bool_key(func, args):
            self.values.setdefault(_site(), []).append(("mask", MaskPositions(args[1].nonzero(as_tuple=True))))
        out = func(*args, **(kwargs or {}))
        if _name(func) in VALUE_CALLS:
            self.values.setdefault(_site(), []).append((_name(func), out))
        return out


class _Replayer(TorchFunctionMode):
    def __init__(self, values: dict):
        super().__init__()
        self.values, self.counts = values, {}
        self.used: dict[tuple[str, int], list] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kind = "mask" if _bool_key(func, args) else _name(func) if _name(func) in VALUE_CALLS else None
        if kind is not None:
            # in order per line and per kind of call: a trace may skip a call the eager run made (a branch's
            # __bool__ that export answers itself) without shifting the masks recorded after it
            site = _site()
            i = self.counts.get((site, kind), 0)
            recorded = [v for k, v in self.values.get(site, []) if k == kind]
            if i < len(recorded):
                self.counts[(site, kind)] = i + 1
                self.used.setdefault(site, []).append(recorded[i])
                if kind == "mask":                       # the same call, at the positions the example selected
                    return func(args[0], tuple(recorded[i]), *args[2:], **(kwargs or {}))
                return recorded[i]
        return func(*args, **(kwargs or {}))


def record(model, args: tuple, kwargs: dict) -> dict:
    """{(file, line): [(call, value), ...]} for every tensor-to-Python call one eager forward makes."""
    rec = _Recorder()
    with torch.no_grad(), rec:
        model(*args, **kwargs)
    return rec.values


class Specialised(torch.nn.Module):
    """Runs `model` with each tensor-to-Python call answered from `values` (see `record`), in order per line."""

    def __init__(self, model: torch.nn.Module, values: dict):
        super().__init__()
        self.model, self.values = model, values
        self.used: dict[tuple[str, int], list] = {}

    @property
    def changes(self):          # the functional rewrites of a wrapped GpuRewriteWrapper, when there is one
        return getattr(self.model, "changes", [])

    def forward(self, *args, **kwargs):
        mode = _Replayer(self.values)
        with mode:
            out = self.model(*args, **kwargs)
        for site, vals in mode.used.items():
            self.used.setdefault(site, vals)
        return out

    def lines(self) -> list[str]:
        """'file:line: code -> value(s)' for every source line whose values were replayed."""
        out = []
        used = self.used or {site: [v for _, v in vals] for site, vals in self.values.items()}
        for (file, line), vals in used.items():
            code = linecache.getline(file, line).strip()
            shown = ", ".join(repr(v) for v in vals[:4]) + (", ..." if len(vals) > 4 else "")
            out.append(f"{file}:{line}: {code} -> {shown}")
        return out


def warn_specialised(lines: list[str]) -> None:
    """warnings.warn naming each specialised line, pointed at the first caller outside this toolkit."""
    import warnings

    level, frame = 1, sys._getframe(0)                 # point the warning at the caller's line
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    if lines:
        warnings.warn("convert_for_gpu specialised data-dependent branches on the example input; the file is "
                      "right only for inputs that take the same branches:\n  " + "\n  ".join(lines), stacklevel=level)
