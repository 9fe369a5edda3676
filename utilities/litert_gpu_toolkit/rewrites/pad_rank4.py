"""Wall `constant_operand` (the rank-2/3 layout family): a zero PAD of a rank-3 tensor whose first axis is > 1.

Measured on llvmpipe, ai-edge-litert 2.3.0 (tests/toolkit/rewrites/test_pad_rank4.py): PAD of a runtime [2, 15, 32]
along axis 1 or 2 compiles GPU-only and returns wrong numbers (corr -0.06 / 0.02) in fp16 and fp32, while the
same pad of [1, 15, 32], of a rank-4 [2, 8, 15, 16], or of the [2, 15, 32] viewed as [1, 2, 15, 32] is right --
the delegate seems to take a rank-3 tensor's first axis for its batch, as with `constant_operand`. A rank-2 PAD is
not taken by the GPU at all. Seen in MobileBERT's trigram embedding (the token embeddings shifted by one step
each way with F.pad, two sequences in the batch: corr 0.37 for that block).

`patch_pad_rank4` (default, functional): F.pad in constant mode of a rank-2 or rank-3 tensor runs on the tensor
given leading size-1 axes up to rank 4, then viewed back. Bit-exact: the same values, only the view changes.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import declare, register_handler

NAME = "patch_pad_rank4"
declare(NAME, wall="constant_operand")


@register_handler(F.pad, NAME)
def _pad(input, pad, mode="constant", value=None):
    if mode != "constant" or not isinstance(input, torch.Tensor) or input.dim() not in (2, 3) \
            or len(pad) > 2 * input.dim():
        return NotImplemented
    if input.dim() == 3 and int(input.shape[0]) == 1:
        return NotImplemented                         # right as it is
    lifted = input.reshape((1,) * (4 - input.dim()) + tuple(input.shape))
    out = F.pad(lifted, list(pad), mode="constant", value=value)
    return out.reshape(tuple(out.shape[4 - input.dim():]))


def patch_pad_rank4(model):
    """Functional only (see the module docstring): returns no changes by itself."""
    return []
