"""Torch-level rewrites that remove GPU walls. Each one is registered here by name.

Two kinds, both scoped so nothing outlives an export:
  * module patches -- `patch_*(model) -> list[Change]`: replace submodules in place (e.g. every
    nn.PixelShuffle with a rank-4 form). They change only the model they are given.
  * functional handlers -- `litert_gpu_toolkit.rewrites.functional`: catch functional spellings
    (F.pad, F.grid_sample, torch.where, Tensor.expand, x.chunk, ...) through a TorchFunctionMode
    that is active only inside `GpuRewriteWrapper.forward`, i.e. only while that wrapper runs
    (including during torch.export tracing). No global state is modified.

`apply_patches(model, ...)` applies every registered exact module patch (approximate ones only
when asked) and returns the combined list of `Change`s.
"""
from __future__ import annotations

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
    fn: Callable        # fn(model, **kwargs) -> list[Change]
    exact: bool
    wall: str           # the symptom id (litert_gpu_toolkit.symptoms) this rewrite removes
    default: bool       # applied by apply_patches() unless excluded


PATCHES: dict[str, PatchSpec] = {}


def register(name: str, *, wall: str, exact: bool = True, default: bool = True):
    """Decorator: make a module patch known to `apply_patches` and the symptom table checks."""
    def deco(fn):
        PATCHES[name] = PatchSpec(name, fn, exact, wall, default)
        return fn
    return deco


def named_modules_of(model, cls) -> list[tuple[str, object]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, cls)]


def set_submodule(model, path: str, new) -> None:
    """Replace the submodule at dotted `path` (not the root) with `new`."""
    parent_path, _, leaf = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    setattr(parent, leaf, new)
