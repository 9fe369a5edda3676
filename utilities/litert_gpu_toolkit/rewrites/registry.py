"""The rewrite registry: every rewrite's name, the wall (symptom id) it removes, and how to select them.

Two kinds of rewrite register here, both scoped so nothing outlives an export:
  * module patches -- `@register(name, wall=...)` on `patch_*(model) -> list[Change]`: replace
    submodules in place; they change only the model they are given;
  * functional handlers -- `register_handler(torch_callable, name)`: catch functional spellings
    (F.pad, torch.where, Tensor.expand, ...) while `functional.GpuRewriteMode` is active, i.e. only
    inside `GpuRewriteWrapper.forward` (including under torch.export). A handler whose name has no
    module patch declares its wall with `declare(name, wall=...)`.

The wall names the module: the rewrites for symptom `gather_nd` live in `rewrites/gather_nd/`, those
for `amax` in `rewrites/amax.py` (tests/toolkit/rewrites/test_registry.py holds every one to that).
Importing this module imports no torch; `load_rewrites()` imports the rewrite modules (and torch), found on
disk (`rewrite_modules`). docs/writing-a-rewrite.md says how to add one.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Change:
    """One rewrite applied to one place in a model."""
    path: str          # module path ("" for the root), or "functional:<fn>" for a functional spelling
    what: str          # e.g. "PixelShuffle(2) -> rank-4 depth-to-space"
    rewrite: str       # toolkit name, e.g. "patch_pixel_shuffle"
    exact: bool        # True = equal to fp32 rounding; False = approximation (opt-in only)


@dataclass(frozen=True)
class PatchSpec:
    name: str
    fn: Callable | None   # fn(model, **kwargs) -> list[Change]; None for a functional-only rewrite
    exact: bool
    wall: str             # the symptom id (litert_gpu_toolkit.core.symptoms) this rewrite removes = its module
    default: bool         # applied by apply_patches() / convert_for_gpu unless excluded


PATCHES: dict[str, PatchSpec] = {}          # module patches
FUNCTIONAL: dict[str, PatchSpec] = {}       # functional-only rewrites (no module patch of that name)
# torch callable -> list of (rewrite name, handler). Handlers run with the mode disabled.
HANDLERS: dict[Callable, list[tuple[str, Callable]]] = {}
# (rewrite name, handler(func, args, kwargs)) tried on every call before HANDLERS (e.g. folding all-constant calls)
PRE_HANDLERS: list[tuple[str, Callable]] = []
# (rewrite name, fn(args, kwargs) -> (args, kwargs) or None) applied to every call's arguments first
ARG_REWRITERS: list[tuple[str, Callable]] = []
# (rewrite name, tracker) seen around every call after ARG_REWRITERS: tracker.before(func, args, kwargs) returns
# new (args, kwargs) or None; tracker.after(func, args, kwargs, out) sees the result (e.g. to tag it)
TRACKERS: list[tuple[str, object]] = []
# rewrite name -> hook(model, snapshot) run by GpuRewriteWrapper as its forward starts (with the mode active);
# snapshot: the model's parameters and buffers by name, as they were outside any trace. Returns an undo callable.
ENTER_HOOKS: dict[str, Callable] = {}

# The modules of rewrites/ that are machinery, not walls. Every other module or sub-package there holds one wall's
# rewrites, is named for that wall's symptom id, and is found on disk by `load_rewrites()`: adding a rewrite is
# writing its file (and, for a new wall, its symptom entry), nothing else.
MACHINERY = ("registry", "functional", "apply", "scoping", "einsum_axes", "shared")
_LOADED = False


def register(name: str, *, wall: str, exact: bool = True, default: bool = True):
    """Decorator: make a module patch known to `apply_patches` and the symptom table checks."""
    def deco(fn):
        PATCHES[name] = PatchSpec(name, fn, exact, wall, default)
        return fn
    return deco


def declare(name: str, *, wall: str, exact: bool = True, default: bool = True) -> None:
    """Declare a functional-only rewrite (handlers registered under `name`, no module patch)."""
    FUNCTIONAL[name] = PatchSpec(name, None, exact, wall, default)


def register_handler(func: Callable, name: str):
    """Decorator: route calls of the torch callable `func` to the handler while rewrite `name` is active."""
    def deco(handler):
        HANDLERS.setdefault(func, []).append((name, handler))
        return handler
    return deco


def spec_of(name: str) -> PatchSpec | None:
    return PATCHES.get(name) or FUNCTIONAL.get(name)


def rewrite_modules() -> list[str]:
    """The wall modules under rewrites/ (top level, sorted), found on disk: every module that is not MACHINERY."""
    import pkgutil

    package = importlib.import_module(__package__)
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__)
                  if m.name not in MACHINERY and not m.name.startswith("_"))


def load_rewrites() -> list[str]:
    """Import every wall module (each sub-package imports its own modules), registering their rewrites.

    Returns [] (kept for callers that listed the modules a partial vendoring lacked: what is on disk is loaded).
    A module that fails to import raises: a broken rewrite must not pass silently."""
    global _LOADED
    if not _LOADED:
        _LOADED = True                       # set first: a wall module that reads the package index re-enters
        try:
            for name in rewrite_modules():
                importlib.import_module(f"{__package__}.{name}")
        except BaseException:
            _LOADED = False
            raise
    return []


def handler_names() -> list[str]:
    names: list[str] = [n for n, _ in PRE_HANDLERS]
    names += [n for n, _ in TRACKERS if n not in names]
    for entries in HANDLERS.values():
        names += [n for n, _ in entries if n not in names]
    return names


def known_rewrites() -> list[str]:
    """Every rewrite name `include` / `only` / `exclude` accept: module patches and functional handlers."""
    load_rewrites()
    return sorted(set(PATCHES) | set(FUNCTIONAL) | set(handler_names()))


def check_names(names, what: str = "include") -> None:
    """Raise ValueError naming the unknown rewrite names and the known ones."""
    if names is None:
        return
    if isinstance(names, str):
        raise ValueError(f"{what} must be a list of rewrite names, not the string {names!r}")
    unknown = sorted(set(names) - set(known_rewrites()))
    if unknown:
        raise ValueError(f"unknown rewrite names in {what}: {unknown}; known: {', '.join(known_rewrites())}")


def selected(name: str, include, exclude, approximate: bool, only=None) -> bool:
    """include: opt-in names added to the defaults; only: nothing but these; exclude: never these."""
    spec = spec_of(name)
    include = include or set()
    if only is not None and name not in only:
        return False
    if name in exclude:
        return False
    if spec is not None and not spec.exact and not approximate:
        return False
    if spec is not None and not spec.default and name not in include and (only is None or name not in only):
        return False
    return True


def functional_selection(include=None, exclude=None, approximate: bool = False, only=None) -> list[str]:
    """The functional handler names `convert_for_gpu` activates for these filters."""
    load_rewrites()
    exclude = set(exclude or ())
    include = set(include or ())
    only = None if only is None else set(only)
    return [n for n in handler_names() if selected(n, include, exclude, approximate, only)]


def named_modules_of(model, cls) -> list[tuple[str, object]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, cls)]


def set_submodule(model, path: str, new) -> None:
    """Replace the submodule at dotted `path` (not the root) with `new`."""
    parent_path, _, leaf = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    setattr(parent, leaf, new)
