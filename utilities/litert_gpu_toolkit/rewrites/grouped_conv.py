"""Grouped convs whose channels per group miss the GPU's multiple are miscomputed: split them into groups.

Exact to fp32 rounding (the same products, in per-group convs).
"""
from __future__ import annotations


from torch import nn

from . import Change, register, set_submodule
from .transpose_conv.spec import grouped_conv


# ------------------------------------------------------------------------------------- grouped conv

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
        return grouped_conv(x, self.weight, self.bias, self.groups, self.padding, self.dilation, self.stride)


def _misaligned_groups(conv) -> bool:
    cig, cog = conv.in_channels // conv.groups, conv.out_channels // conv.groups
    return conv.groups > 1 and cig > 1 and (cig % 4 or cog % 4) and conv.padding_mode == "zeros"


@register("patch_grouped_conv", wall="grouped_conv")
def patch_grouped_conv(model: nn.Module) -> list[Change]:
    """Grouped Conv1d/Conv2d whose channels per group are not multiples of 4 -> `SplitGroupConv` (exact)."""
    changes = []
    for path, m in list(model.named_modules()):
        if path and isinstance(m, (nn.Conv1d, nn.Conv2d)) and _misaligned_groups(m):
            set_submodule(model, path, SplitGroupConv(m))
            changes.append(Change(path, f"{type(m).__name__}(groups={m.groups}) -> one conv per group",
                                  "patch_grouped_conv", True))
    return changes
