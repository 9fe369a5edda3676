"""Wall `bool_slice`: a stepped slice of a bool tensor -> STRIDED_SLICE version 3, rejected by the GPU.

The converter writes `mask[:, ::2]` of a bool tensor as a STRIDED_SLICE of version 3 (the bool form), and the GPU
delegate takes version 2 at most ('Max version supported: 2. Requested version 3.' on llvmpipe, ai-edge-litert
2.3.0). The same slice of a float tensor is version 1 and runs. Funnel Transformer pools its attention and
token-type masks this way between blocks (`stride_pool`).

`patch_bool_slice` (default, functional) takes the stepped slice of the mask as 0.0 / 1.0 and compares it back to
bool (`!= 0`). Exact: 0 and 1 are exact in every float format, so the mask is the same.
"""
from __future__ import annotations

import torch
from torch import nn

from . import Change, register
from .functional import in_active_mode, register_handler


def _stepped(key) -> bool:
    """A key of basic indexing only (ints, slices, None, Ellipsis) with a slice whose step is not 1."""
    key = key if isinstance(key, tuple) else (key,)
    basic = all(k is None or k is Ellipsis or isinstance(k, (int, slice)) for k in key)
    return basic and any(isinstance(k, slice) and k.step not in (None, 1) for k in key)


@register_handler(torch.Tensor.__getitem__, "patch_bool_slice")
def _getitem(x, key):
    if not isinstance(x, torch.Tensor) or x.dtype != torch.bool or not _stepped(key):
        return NotImplemented
    return in_active_mode(lambda: x.to(torch.float32)[key] != 0)


@register("patch_bool_slice", wall="bool_slice")
def patch_bool_slice(model: nn.Module) -> list[Change]:
    """Functional only (see the module docstring): returns no changes by itself."""
    return []
