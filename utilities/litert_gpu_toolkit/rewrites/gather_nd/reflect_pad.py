"""Reflect / replicate padding as slices and a concatenation (F.pad's modes lower to GATHER_ND).

Bit-exact: pure data movement.
"""
from __future__ import annotations


import torch.nn as nn
import torch.nn.functional as F

from .. import Change, named_modules_of, register, set_submodule
from ..functional import register_handler
from ..shared import exchange_matrix, reflect_pad_exchange, pad_by_slices, _pad_axis  # noqa: F401 - re-exported


# ---------------------------------------------------------------------------------------------
# non-constant padding as slice + concat
# ---------------------------------------------------------------------------------------------

PAD_MODES = ("reflect", "replicate", "circular")


@register_handler(F.pad, "patch_reflect_pad")
def _pad_handler(input, pad, mode="constant", value=None):
    if mode not in PAD_MODES or input.dim() > 4 or any(int(p) < 0 for p in pad):
        return NotImplemented
    return pad_by_slices(input, pad, mode)


class SliceConcatPadConv(nn.Module):
    """A Conv1d / Conv2d with padding_mode reflect / replicate / circular, as explicit
    slice + concat padding followed by the same conv with no padding. Shares the original's
    weight and bias. Bit-exact padding; the conv is the original op. With padding 0 the pad step
    disappears (torch still routes such convs through F.pad, which is the GATHER_ND path)."""

    def __init__(self, conv: nn.Module):
        super().__init__()
        self.mode = conv.padding_mode
        self.pad = tuple(int(p) for p in conv._reversed_padding_repeated_twice)
        inner = type(conv)(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride, padding=0,
                           dilation=conv.dilation, groups=conv.groups, bias=conv.bias is not None,
                           device=conv.weight.device, dtype=conv.weight.dtype)
        inner.weight = conv.weight
        inner.bias = conv.bias
        self.conv = inner

    def forward(self, x):
        if any(self.pad):
            x = pad_by_slices(x, self.pad, self.mode)
        return self.conv(x)


@register("patch_reflect_pad", wall="gather_nd")
def patch_reflect_pad(model: nn.Module) -> list[Change]:
    """Conv1d / Conv2d with padding_mode reflect, replicate or circular (padding 0 included) ->
    `SliceConcatPadConv`. Bit-exact. The functional handler rewrites F.pad in those modes."""
    changes = []
    for path, m in named_modules_of(model, (nn.Conv1d, nn.Conv2d)):
        if path and m.padding_mode in PAD_MODES:
            set_submodule(model, path, SliceConcatPadConv(m))
            changes.append(Change(path, f"{type(m).__name__}(padding_mode={m.padding_mode!r}, padding={m.padding}) -> "
                                        "slice+concat pad + unpadded conv", "patch_reflect_pad", True))
    return changes


