"""Wall `fp16_degraded`: finite, fully GPU-resident output that fp16 arithmetic has made imprecise.

`split_k`: a long dot product accumulated in fp16, split into partial sums over channel groups (`patch_split_k`,
opt-in, exact up to the order of fp32 additions); `expm1`: ELU / CELU / SELU and expm1 computed as exp(x) - 1,
which cancels for small x, in a form that does not (`patch_safe_expm1`, default, exact to fp32 rounding).
"""
from __future__ import annotations

from .split_k import DEFAULT_MAX_DOT, LONG_DOT_PRODUCT, SplitKConv, SplitKLinear, _parts, dot_length, patch_split_k  # noqa: F401
from .expm1 import expm1_accurate, patch_safe_expm1  # noqa: F401
