"""Grouped convs whose channels per group miss the GPU's multiple are miscomputed: split them into groups.

Exact to fp32 rounding (the same products, in per-group convs).
"""
from __future__ import annotations


import torch
from torch import nn

from . import Change, register, set_submodule
from .shared import conv_per_group

class SplitGroupConv(nn.Module):
    """nn.Conv1d/Conv2d with groups, computed as one conv per group (SLICE + CONV + CONCATENATION).

    Removes the grouped CONV_2D that the desktop GPU computes wrongly (symptom `grouped_conv`) when the
    channels per group are not multiples of 4. Exact (the same dot products); any stride, padding
    (zeros), dilation. Depthwise and 4-aligned groups are left as one conv by `grouped_conv`'s rule.
    """

    def __init__(self, conv: nn.Conv1d | nn.Conv2d):
        super().__init__()
        self.weight, self.bias = conv.weight, conv.bias
        self.groups, self.stride, self.padding, self.dilation = conv.groups, conv.stride, conv.padding, conv.dilation

    def forward(self, x):
        return conv_per_group(x, self.weight, self.bias, self.groups, self.padding, self.dilation, self.stride)


class DepthwiseMultiplier1x1(nn.Module):
    """A 1x1 depthwise conv with a channel multiplier m (groups = in_channels, out = m * in_channels), computed as
    m per-channel products (a MUL by a [1, C, 1, 1] weight, plus the bias) whose channels are interleaved with
    rank-4 reshapes: output channel c*m + r is input channel c times weight c*m + r. The desktop GPU computes the
    grouped 1x1 CONV_2D wrongly (corr 0.31 at m = 2, llvmpipe, ai-edge-litert 2.3.0; 3x3 kernels are right).
    Exact: one product and one sum per value, as in the conv."""

    def __init__(self, conv: nn.Conv2d):
        super().__init__()
        self.weight, self.bias = conv.weight, conv.bias
        self.mult = conv.out_channels // conv.in_channels

    def forward(self, x):
        n, c, h, w = x.shape
        m = self.mult
        weight = self.weight.reshape(c, m).t().reshape(m * c, 1, 1)              # [r, c] order
        bias = None if self.bias is None else self.bias.reshape(c, m).t().reshape(m * c, 1, 1)
        copies = torch.cat([x] * m, dim=1) * weight                              # channel r*C + c
        if bias is not None:
            copies = copies + bias
        return copies.reshape(n, m, c, h * w).permute(0, 2, 1, 3).reshape(n, c * m, h, w)


def _depthwise_multiplier_1x1(conv) -> bool:
    return (isinstance(conv, nn.Conv2d) and conv.groups == conv.in_channels > 1 and conv.out_channels > conv.in_channels
            and tuple(conv.kernel_size) == (1, 1) and tuple(conv.stride) == (1, 1) and tuple(conv.padding) == (0, 0)
            and conv.padding_mode == "zeros")


def _misaligned_groups(conv) -> bool:
    cig, cog = conv.in_channels // conv.groups, conv.out_channels // conv.groups
    return conv.groups > 1 and cig > 1 and (cig % 4 or cog % 4) and conv.padding_mode == "zeros"


@register("patch_grouped_conv", wall="grouped_conv")
def patch_grouped_conv(model: nn.Module) -> list[Change]:
    """Grouped Conv1d/Conv2d whose channels per group are not multiples of 4 -> `SplitGroupConv`; a 1x1 depthwise
    Conv2d with a channel multiplier -> `DepthwiseMultiplier1x1` (both exact)."""
    changes = []
    for path, m in list(model.named_modules()):
        if path and _depthwise_multiplier_1x1(m):
            set_submodule(model, path, DepthwiseMultiplier1x1(m))
            changes.append(Change(path, f"1x1 depthwise Conv2d(x{m.out_channels // m.in_channels}) -> per-channel "
                                        "products, interleaved", "patch_grouped_conv", True))
        elif path and isinstance(m, (nn.Conv1d, nn.Conv2d)) and _misaligned_groups(m):
            set_submodule(model, path, SplitGroupConv(m))
            changes.append(Change(path, f"{type(m).__name__}(groups={m.groups}) -> one conv per group",
                                  "patch_grouped_conv", True))
    return changes
