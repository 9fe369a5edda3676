"""Scoped rewrites of functional spellings (F.pad, torch.where, Tensor.expand, ...).

Handlers are registered per torch callable; `GpuRewriteMode` (a TorchFunctionMode) routes calls
to them only while it is active. `GpuRewriteWrapper(model)` enters the mode inside its forward,
so the rewrite is in effect while the wrapper runs -- including while torch.export traces it --
and nowhere else. A handler returns `NotImplemented` to leave a call untouched.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from . import Change

# torch callable -> list of (handler name, handler). Handlers run with the mode disabled.
HANDLERS: dict[Callable, list[tuple[str, Callable]]] = {}


class Observed:
    """A handler's result that only observed the call (e.g. tagged the output): returned to the caller
    unchanged and not recorded as a rewrite."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def register_handler(func: Callable, name: str):
    def deco(handler):
        HANDLERS.setdefault(func, []).append((name, handler))
        return handler
    return deco


class GpuRewriteMode(TorchFunctionMode):
    """Routes registered torch calls to GPU-friendly handlers. `include`/`exclude` filter by name."""

    def __init__(self, include=None, exclude=None):
        super().__init__()
        self.include = set(include) if include else None
        self.exclude = set(exclude or ())
        self.changes: list[Change] = []

    def _enabled(self, name: str) -> bool:
        return (self.include is None or name in self.include) and name not in self.exclude

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for name, handler in HANDLERS.get(func, ()):
            if self._enabled(name):
                out = handler(*args, **kwargs)
                if isinstance(out, Observed):
                    return out.value
                if out is not NotImplemented:
                    fn_name = getattr(func, "__qualname__", getattr(func, "__name__", str(func)))
                    from . import PATCHES

                    spec = PATCHES.get(name)          # an approximate rewrite is reported as one
                    change = Change(f"functional:{fn_name}", f"{fn_name} rewritten", name,
                                    spec.exact if spec is not None else True)
                    if change not in self.changes:
                        self.changes.append(change)
                    return out
        return func(*args, **kwargs)


class GpuRewriteWrapper(torch.nn.Module):
    """Runs `model` with the functional rewrites active (only inside this forward).

    include: only these handler names (default: all registered); exclude: never these. A name that no
    rewrite has raises ValueError listing the known names (a typo must not silently do nothing)."""

    def __init__(self, model: torch.nn.Module, include=None, exclude=None):
        super().__init__()
        from ..convert import check_names

        check_names(include, "include")
        check_names(exclude, "exclude")
        self.model = model
        self.include, self.exclude = include, exclude
        self.changes: list[Change] = []

    def forward(self, *args, **kwargs):
        mode = GpuRewriteMode(self.include, self.exclude)
        with mode:
            out = self.model(*args, **kwargs)
        for c in mode.changes:
            if c not in self.changes:
                self.changes.append(c)
        return out
