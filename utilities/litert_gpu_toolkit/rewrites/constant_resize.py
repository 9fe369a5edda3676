"""A resize of a constant to its own size (position tables): the GPU declines a resize with no runtime input.

The rewrite drops the identity resize: bit-exact.
"""
from __future__ import annotations


import torch
import torch.nn as nn
import torch.nn.functional as F

from . import Change, register
from .functional import HANDLERS
from .shared import per_axis


# ---------------------------------------------------------------------------------------------
# a resize to the size the tensor already has (position tables "resized" to their own grid)
# ---------------------------------------------------------------------------------------------

_IDENTITY_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")


def is_identity_resize(x: torch.Tensor, size=None, scale_factor=None, mode: str = "nearest",
                       align_corners=None, antialias: bool = False) -> bool:
    """True when F.interpolate(x, ...) returns x unchanged: the output size equals the input size and
    the coordinate scale is 1 (a `size` given, or every scale factor exactly 1). Then every output
    sample sits exactly on an input sample (weights 1 and 0) in every listed mode."""
    if not isinstance(x, torch.Tensor) or x.dim() < 3 or mode not in _IDENTITY_MODES:
        return False
    spatial = x.dim() - 2
    in_size = [int(d) for d in x.shape[2:]]
    if size is not None:
        return scale_factor is None and list(per_axis(size, spatial)) == in_size
    if scale_factor is None:
        return False
    scales = scale_factor if isinstance(scale_factor, (tuple, list)) else [scale_factor] * spatial
    return all(float(s) == 1.0 for s in scales)


def _identity_resize_handler(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                             recompute_scale_factor=None, antialias=False):
    if not is_identity_resize(input, size, scale_factor, mode, align_corners, antialias):
        return NotImplemented
    return input


# first in line for F.interpolate: an identity needs no separable matmuls either
HANDLERS.setdefault(F.interpolate, []).insert(0, ("patch_identity_resize", _identity_resize_handler))


@register("patch_identity_resize", wall="constant_resize")
def patch_identity_resize(model: nn.Module) -> list[Change]:
    """F.interpolate to the size the tensor already has -> the tensor itself (exact, bit for bit).

    ViT-family models (DPT, ...) "resize" their constant position table to the patch grid on every
    forward; when the grid is the table's own size, the converter still emits a RESIZE_BILINEAR on a
    constant, which the GPU rejects ('no runtime input'). Functional only (handler
    "patch_identity_resize"); returns no changes by itself."""
    return []
