"""Shared by the module-patch + functional-handler rewrites: scoping handlers on a model's forward,
replacing module instances, and reading Python scalars.

`scope_rewrites(model, names)` runs `model.forward` with the named functional handlers active (a
forward pre-hook enters a `GpuRewriteMode`, a forward hook leaves it); nothing global is changed.
"""
from __future__ import annotations

import numbers
from typing import Callable, Sequence

from torch import nn

from . import Change, set_submodule
from .functional import GpuRewriteMode


_SCOPE_ATTR = "_gpu_rewrite_names"       # set of handler names scoped on a module
_MODE_ATTR = "_gpu_rewrite_modes"        # stack of active modes (re-entrant forwards)


def _enter_scope(module, args, kwargs=None):
    mode = GpuRewriteMode(include=sorted(getattr(module, _SCOPE_ATTR)))
    module.__dict__.setdefault(_MODE_ATTR, []).append(mode)
    mode.__enter__()


def _exit_scope(module, args, *rest):
    stack = module.__dict__.get(_MODE_ATTR)
    if stack:
        stack.pop().__exit__(None, None, None)


def scope_rewrites(model: nn.Module, names: Sequence[str]) -> Change:
    """Run `model`'s forward with the named functional handlers active; no global state.

    A forward pre-hook enters a `GpuRewriteMode` and a forward hook (always called, also when the
    forward raises) leaves it, so the scope is active only while this model runs -- including while
    torch.export / litert_torch.convert trace it -- and survives copy.deepcopy (the hooks read the
    names from the module they are called on). Calling it again adds names to the same scope.
    """
    if hasattr(model, _SCOPE_ATTR):
        getattr(model, _SCOPE_ATTR).update(names)
    else:
        model.__dict__[_SCOPE_ATTR] = set(names)
        model.register_forward_pre_hook(_enter_scope)
        model.register_forward_hook(_exit_scope, always_call=True)
    return Change("", f"functional rewrites {', '.join(sorted(names))} scoped on {type(model).__name__}.forward",
                  ",".join(sorted(names)), True)


def scoped_rewrites(model: nn.Module) -> set[str]:
    """The functional handler names `scope_rewrites` put on `model` (empty when none)."""
    return set(getattr(model, _SCOPE_ATTR, ()))


def _is_number(v) -> bool:
    return isinstance(v, numbers.Number) and not isinstance(v, bool)


def _scalar_value(v):
    """A Python number for numbers and 1-element tensors that are not being traced, else None."""
    if _is_number(v):
        return float(v)
    return None


def _replace_modules(model: nn.Module, pick: Callable, rewrite: str) -> list[Change]:
    changes = []
    for path, m in list(model.named_modules()):
        if not path:
            continue
        found = pick(m)
        if found is not None:
            new, what = found
            new.train(m.training)
            set_submodule(model, path, new)
            changes.append(Change(path, what, rewrite, True))
    return changes


