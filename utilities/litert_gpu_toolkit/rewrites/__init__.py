"""Torch-level rewrites that remove GPU walls, one module (or sub-package) per wall.

A wall's symptom id (`litert_gpu_toolkit.core.symptoms`) names the module that holds its rewrites:
`gather_nd/`, `rank_gt_4/`, `transpose_conv/`, `fp16_overflow/`, `fft/`, `select.py`, `amax.py`, ...
Every rewrite registers itself in `registry` by name with its wall; `functional` holds the scoped
TorchFunctionMode that applies the functional spellings only while a wrapper runs. Shared helpers of
several walls live in `scoping`.

`apply_patches(model, ...)` (in `litert_gpu_toolkit.convert.pipeline`) applies every registered exact module
patch (approximate ones only when asked) and returns the combined list of `Change`s.
"""
from __future__ import annotations

from .registry import PATCHES, Change, PatchSpec, named_modules_of, register, set_submodule

_INDEX: dict[str, object] | None = None


def public_rewrites() -> dict[str, object]:
    """Every public function and class that a wall module (or `shared`) defines (not imports), by name: the rewrites the
    symptom table names, their building blocks (`ZeroStuffConvT2d`, `hierarchical_mean`, ...), the patches.
    Loads every rewrite (and torch) on first use. A name defined by two walls raises: it would be ambiguous."""
    global _INDEX
    if _INDEX is None:
        import inspect
        import sys

        from .registry import load_rewrites, rewrite_modules

        load_rewrites()
        index: dict[str, object] = {}
        for wall in [*rewrite_modules(), "shared"]:
            prefix = f"{__name__}.{wall}"
            for module_name, module in sorted(sys.modules.items()):
                if module is None or not (module_name == prefix or module_name.startswith(prefix + ".")):
                    continue
                for name, value in vars(module).items():
                    if name.startswith("_") or not (inspect.isfunction(value) or inspect.isclass(value)):
                        continue
                    if getattr(value, "__module__", None) != module_name:
                        continue                                # imported there, defined elsewhere
                    if name in index and index[name] is not value:
                        raise ImportError(f"rewrites: {name} is defined in {index[name].__module__} and "
                                          f"{module_name}; give one of them another name")
                    index[name] = value
        from .registry import FUNCTIONAL, handler_names

        for name in sorted(set(FUNCTIONAL) | set(handler_names())):
            index.setdefault(name, _functional_rewrite(name))
        _INDEX = index
    return _INDEX


def _functional_rewrite(name: str):
    """A rewrite that exists only as functional handlers, as a callable: `lower_rank_views(model)` is the model
    wrapped so that this rewrite (and no other) applies while it runs or is traced."""
    def apply(model):
        from .functional import GpuRewriteWrapper

        return GpuRewriteWrapper(model, include=[name])
    apply.__name__ = apply.__qualname__ = name
    apply.__doc__ = (f"The functional rewrite {name!r} alone: `{name}(model)` returns `GpuRewriteWrapper(model, "
                     f"include=[{name!r}])`, which applies it only while the wrapper runs (torch.export included).")
    return apply


def __getattr__(name: str):
    """`from litert_gpu_toolkit.rewrites import patch_safe_layernorm` (or any name `public_rewrites` lists)."""
    import pkgutil

    if name.startswith("_") or name in {m.name for m in pkgutil.iter_modules(__path__)}:
        raise AttributeError(name)                      # a submodule: the import system loads it
    value = public_rewrites().get(name)
    if value is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}: not a rewrite any wall module defines")
    return value
