"""Torch-level rewrites that remove GPU walls, one module (or sub-package) per wall.

A wall's symptom id (`litert_gpu_toolkit.symptoms`) names the module that holds its rewrites:
`gather_nd/`, `rank_gt_4/`, `transpose_conv/`, `fp16_overflow/`, `fft/`, `select.py`, `amax.py`, ...
Every rewrite registers itself in `registry` by name with its wall; `functional` holds the scoped
TorchFunctionMode that applies the functional spellings only while a wrapper runs. Shared helpers of
several walls live in `scoping`.

`apply_patches(model, ...)` (in `litert_gpu_toolkit.convert`) applies every registered exact module
patch (approximate ones only when asked) and returns the combined list of `Change`s.
"""
from __future__ import annotations

from .registry import PATCHES, Change, PatchSpec, named_modules_of, register, set_submodule
