"""Scoped rewrites of functional spellings (F.pad, torch.where, Tensor.expand, ...).

Handlers are registered per torch callable in `registry`; `GpuRewriteMode` (a TorchFunctionMode)
routes calls to them only while it is active. `GpuRewriteWrapper(model)` enters the mode inside its
forward, so the rewrite is in effect while the wrapper runs -- including while torch.export traces
it -- and nowhere else. A handler returns `NotImplemented` to leave a call untouched.
"""
from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode

from .registry import (ARG_REWRITERS, ENTER_HOOKS, HANDLERS, PRE_HANDLERS, TRACKERS, Change,  # noqa: F401
                       check_names, load_rewrites, register_handler, spec_of)


class Observed:
    """A handler's result that only observed the call (e.g. tagged the output): returned to the caller
    unchanged and not recorded as a rewrite."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


_ACTIVE: list["GpuRewriteMode"] = []


def active_mode() -> "GpuRewriteMode | None":
    """The innermost GpuRewriteMode that is running (a handler that writes out a composite torch call, e.g.
    nn.MultiheadAttention's, re-enters it so the written-out calls are rewritten too)."""
    return _ACTIVE[-1] if _ACTIVE else None


def in_active_mode(fn, *args, **kwargs):
    """fn(*args, **kwargs) with the running GpuRewriteMode entered again (plainly when none runs): a handler's own
    torch calls bypass the mode, so a written-out form that needs other rewrites (a padded pool, an expm1) runs
    through this."""
    mode = active_mode()
    if mode is None:
        return fn(*args, **kwargs)
    with mode:
        return fn(*args, **kwargs)


class GpuRewriteMode(TorchFunctionMode):
    """Routes registered torch calls to GPU-friendly handlers. `include`/`exclude` filter by name."""

    def __init__(self, include=None, exclude=None):
        super().__init__()
        self.include = set(include) if include else None
        self.exclude = set(exclude or ())
        self.changes: list[Change] = []
        self._trackers = [(name, t) for name, t in TRACKERS if self._enabled(name)]

    def __enter__(self):
        _ACTIVE.append(self)
        return super().__enter__()

    def __exit__(self, *exc):
        _ACTIVE.pop()
        return super().__exit__(*exc)

    def _enabled(self, name: str) -> bool:
        return (self.include is None or name in self.include) and name not in self.exclude

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for name, rewrite_args in ARG_REWRITERS:
            if self._enabled(name):
                new = rewrite_args(args, kwargs)
                if new is not None:
                    args, kwargs = new
        seen = (args, kwargs)
        for name, tracker in self._trackers:
            new = tracker.before(func, args, kwargs)
            if new is not None:
                args, kwargs = new
                self._record(func, name, None)
        out = self._dispatch(func, args, kwargs)
        for _, tracker in self._trackers:
            tracker.after(func, *seen, out)
        return out

    def _dispatch(self, func, args, kwargs):
        for name, pre in PRE_HANDLERS:
            if self._enabled(name):
                out = pre(func, args, kwargs)
                if out is not NotImplemented:
                    return self._record(func, name, out)
        for name, handler in HANDLERS.get(func, ()):
            if self._enabled(name):
                out = handler(*args, **kwargs)
                if isinstance(out, Observed):
                    return out.value
                if out is not NotImplemented:
                    return self._record(func, name, out)
        return func(*args, **kwargs)

    def _record(self, func, name: str, out):
        fn_name = getattr(func, "__qualname__", getattr(func, "__name__", str(func)))
        spec = spec_of(name)          # an approximate rewrite is reported as one
        change = Change(f"functional:{fn_name}", f"{fn_name} rewritten", name, spec.exact if spec is not None else True)
        if change not in self.changes:
            self.changes.append(change)
        return out


class PrepassSites:
    """What a rewrite's pre-pass recorded on a model, for its handlers while a `GpuRewriteWrapper` runs that model.

    `store(model, sites)` keeps it as a plain attribute of the model (so copies carry it); `current()` is what the
    innermost running wrapper's model holds -- None when no pre-pass ran -- or what `active(value)` set, for the
    pre-pass itself. Registered as the rewrite's enter hook. make(sites): what one forward sees instead of the
    stored sites themselves (e.g. fresh per-forward state built from them); not called when none are stored."""

    def __init__(self, name: str, make=None):
        self.attr = f"_litert_sites_{name}"
        self._stack: list = []
        self._make = make
        ENTER_HOOKS[name] = self._enter

    def _enter(self, model, snapshot):
        sites = model.__dict__.get(self.attr)
        self._stack.append(self._make(sites) if self._make is not None and sites else sites)
        return self._stack.pop

    def store(self, model, sites) -> None:
        model.__dict__[self.attr] = sites

    def current(self):
        return self._stack[-1] if self._stack else None

    @contextlib.contextmanager
    def active(self, value):
        self._stack.append(value)
        try:
            yield value
        finally:
            self._stack.pop()


class GpuRewriteWrapper(torch.nn.Module):
    """Runs `model` with the functional rewrites active (only inside this forward).

    Every rewrite module is imported first, so the wrapper does the same in a fresh process as after
    `convert_for_gpu`. include: only these rewrite names (default: all registered); exclude: never
    these. A name that no rewrite has raises ValueError listing the known names (a typo must not
    silently do nothing)."""

    def __init__(self, model: torch.nn.Module, include=None, exclude=None):
        super().__init__()
        load_rewrites()
        check_names(include, "include")
        check_names(exclude, "exclude")
        self.model = model
        self.include, self.exclude = include, exclude
        self.changes: list[Change] = []
        # the real parameters and buffers, for rewrites that need their values while torch.export traces the
        # model with stand-ins (ENTER_HOOKS); a plain attribute, not registered with the module
        self.__dict__["_snapshot"] = dict(model.named_parameters(remove_duplicate=False))
        self._snapshot.update(model.named_buffers(remove_duplicate=False))

    def forward(self, *args, **kwargs):
        mode = GpuRewriteMode(self.include, self.exclude)
        with mode:
            undo = [hook(self.model, self._snapshot) for name, hook in ENTER_HOOKS.items() if mode._enabled(name)]
            try:
                out = self.model(*args, **kwargs)
            finally:
                for u in undo:
                    u()
        for c in mode.changes:
            if c not in self.changes:
                self.changes.append(c)
        return out
