"""torch.flip: REVERSE_V2 compiles GPU-only on the desktop GPU and returns wrong values.

The rewrite reverses with size-1 slices and one concatenation: bit-exact (a copy).
"""
from __future__ import annotations


import torch
import torch.nn as nn

from . import Change
from .registry import declare
from .functional import register_handler


# ---------------------------------------------------------------------------------------------
# torch.flip: REVERSE_V2 compiles GPU-only on the desktop GPU and returns wrong values
# ---------------------------------------------------------------------------------------------

def flip_by_slices(x: torch.Tensor, dims) -> torch.Tensor:
    """torch.flip as a concatenation of size-1 slices in reverse order, one axis at a time.

    Removes REVERSE_V2, which the desktop GPU accepts and computes wrongly (symptom `reverse_v2`).
    Bit-exact (a copy, any values incl. inf/NaN). Cost: one SLICE per element along each flipped
    axis plus one CONCATENATION -- fine for short axes (kernels, pads, small windows); for long
    axes prefer avoiding the flip in the model.
    """
    dims = [dims] if isinstance(dims, int) else list(dims)
    for d in dims:
        d = d % x.dim()
        n = x.shape[d]
        x = torch.cat([x.narrow(d, i, 1) for i in range(n - 1, -1, -1)], dim=d) if n > 1 else x
    return x


@register_handler(torch.flip, "patch_flip")
def _flip_handler(input, dims):
    return flip_by_slices(input, dims)


@register_handler(torch.Tensor.flip, "patch_flip")
def _tensor_flip_handler(self, *dims):
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = dims[0]
    return flip_by_slices(self, dims)


def patch_flip(model: nn.Module) -> list[Change]:
    """torch.flip has no module form: the rewrite happens inside `GpuRewriteWrapper` (handler
    "patch_flip") or by calling `flip_by_slices`. Returns no changes by itself."""
    return []


declare("patch_flip", wall="reverse_v2")
