"""Apply the registered rewrites to a model: module patches in place, functional ones listed.

`convert_for_gpu` calls this on a copy of your model; call it yourself to see what would change.
"""
from __future__ import annotations

import inspect
from typing import Sequence

from .registry import PATCHES, Change, check_names, functional_selection, load_rewrites
from .registry import selected as _selected


def split_example_inputs(example_inputs, kwargs: dict | None = None) -> tuple[tuple, dict]:
    """(args, kwargs) from a tensor, a tuple / list of inputs, a dict of keyword inputs, or (args, kwargs)."""
    import torch

    if isinstance(example_inputs, torch.Tensor):
        args, kw = (example_inputs,), {}
    elif isinstance(example_inputs, dict):
        args, kw = (), dict(example_inputs)
    elif (isinstance(example_inputs, tuple) and len(example_inputs) == 2 and isinstance(example_inputs[0], tuple)
          and isinstance(example_inputs[1], dict)):
        args, kw = example_inputs[0], dict(example_inputs[1])
    elif example_inputs is None:
        args, kw = (), {}
    else:
        args, kw = tuple(example_inputs), {}
    kw.update(kwargs or {})
    return args, kw


# ------------------------------------------------------------------------------------- patches

def apply_patches(model, example_inputs=None, *, include: Sequence[str] | None = None,
                  exclude: Sequence[str] | None = None, approximate: bool = False,
                  only: Sequence[str] | None = None, errors: dict | None = None) -> list[Change]:
    """Apply the registered module patches to `model` in place; list the functional rewrites too.

    include: opt-in rewrites added to the defaults; only: nothing but these names; exclude: never these
    (names: module patches or functional handlers; an unknown name raises ValueError).
    Patches registered with default=False run only when named in `include` / `only`; approximate ones
    (exact=False) only with approximate=True. A patch that takes `example_inputs` gets them.
    errors: when given, a patch that raises is recorded there (name -> error) and skipped instead of
    raising (the model may hold that patch's partial changes: use it on a copy).
    Functional rewrites are not applied to the module tree: they are listed (from one forward pass on
    `example_inputs` with the handlers active) and applied by `convert_for_gpu` / `GpuRewriteWrapper`.
    """
    load_rewrites()
    check_names(include, "include")
    check_names(only, "only")
    check_names(exclude, "exclude")
    exclude_set = set(exclude or ())
    include_set = set(include or ())
    only_set = None if only is None else set(only)
    changes: list[Change] = []
    for name, spec in PATCHES.items():
        if not _selected(name, include_set, exclude_set, approximate, only_set):
            continue
        params = inspect.signature(spec.fn).parameters
        kwargs = {}
        if "example_inputs" in params:
            kwargs["example_inputs"] = example_inputs
        if "functional" in params:
            kwargs["functional"] = False          # functional rewrites: applied by the wrapper instead
        if errors is None:
            changes += spec.fn(model, **kwargs)
            continue
        made: list[Change] = []
        try:
            made = spec.fn(model, **kwargs)
            changes += made
            if made and example_inputs is not None:
                _run(model, example_inputs)      # a patch that breaks the forward is named here, not later
        except Exception as e:                   # noqa: BLE001 - recorded; the caller drops this rewrite
            errors[name] = f"{type(e).__name__}: {e}"[:300]
            if made:       # the model is broken: every later forward would raise and blame an innocent rewrite
                return changes
    names = functional_selection(include, exclude, approximate, only)
    if example_inputs is not None and names:            # (an empty include list would mean "all" to the mode)
        from .functional import GpuRewriteWrapper

        wrapper = GpuRewriteWrapper(model, include=names)     # as the export will run it (its enter hooks too)
        try:
            _run(wrapper, example_inputs)
        except Exception as e:                           # noqa: BLE001
            if errors is None:
                raise
            errors["functional rewrites"] = f"{type(e).__name__}: {e}"[:300]
        changes += [c for c in wrapper.changes if c not in changes]
    return changes


def _run(model, example_inputs) -> None:
    """One forward pass on the example inputs (raises what it raises)."""
    import torch

    args, kw = split_example_inputs(example_inputs)
    with torch.no_grad():
        model(*args, **kw)
