"""Long dot products lose precision in fp16: split the reduction (split-K) so no single sum is long.

A conv or linear layer reduces `in_channels / groups x kernel taps` products per output value. A GPU
that accumulates in fp16 adds every product into one running sum whose rounding error grows with its
length and its magnitude; a HiFi-GAN resblock conv (256 channels x 11 taps = 2816 products) loses
enough to pull a waveform's correlation below 0.999 after a few such layers.

`patch_split_k` computes such a layer as several layers over channel slices, each reducing at most
`max_dot` products, and adds the partial results (bias once). In exact arithmetic this is the same
sum; in fp32 torch it differs only by the order of additions (fp32 rounding: |error| <= dot length x
2^-24 x sum |products|). Not a default: it costs a SLICE, a conv and an ADD per extra part; the
numerics repair of `convert_for_gpu` applies it when bisect measures fp16 loss in a block holding a
long dot product (`LONG_DOT_PRODUCT` or more), and keeps it only when the result is better.
"""
from __future__ import annotations

import math

import torch.nn.functional as F
from torch import nn

from .. import Change, register, set_submodule

LONG_DOT_PRODUCT = 1024      # products per output value from which a layer is a split-K candidate
DEFAULT_MAX_DOT = 256        # products per partial sum after the split


def _parts(channels: int, taps: int, max_dot: int) -> list[tuple[int, int]]:
    """Contiguous channel ranges, as equal as possible, each reducing at most max_dot products (>= 1 channel)."""
    per = max(1, max_dot // taps)                   # whole channels per part
    n = math.ceil(channels / per)
    bounds = [round(i * channels / n) for i in range(n + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


class SplitKConv(nn.Module):
    """nn.Conv1d / nn.Conv2d (groups = 1, zero padding) as a sum of convs over input-channel slices."""

    def __init__(self, conv: nn.Conv1d | nn.Conv2d, max_dot: int = DEFAULT_MAX_DOT):
        super().__init__()
        self.weight, self.bias = conv.weight, conv.bias
        self.stride, self.padding, self.dilation = conv.stride, conv.padding, conv.dilation
        self.conv = F.conv1d if isinstance(conv, nn.Conv1d) else F.conv2d
        self.parts = _parts(conv.in_channels, math.prod(conv.kernel_size), max_dot)

    def forward(self, x):
        out = None
        for i, (a, b) in enumerate(self.parts):
            part = self.conv(x[:, a:b], self.weight[:, a:b], self.bias if i == 0 else None, self.stride,
                             self.padding, self.dilation)
            out = part if out is None else out + part
        return out


class SplitKLinear(nn.Module):
    """nn.Linear as a sum of linears over input-feature slices (bias once)."""

    def __init__(self, linear: nn.Linear, max_dot: int = DEFAULT_MAX_DOT):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.parts = _parts(linear.in_features, 1, max_dot)

    def forward(self, x):
        out = None
        for i, (a, b) in enumerate(self.parts):
            part = F.linear(x[..., a:b], self.weight[:, a:b], self.bias if i == 0 else None)
            out = part if out is None else out + part
        return out


def dot_length(module: nn.Module) -> int:
    """Products per output value of a conv / linear layer (0 for anything else)."""
    if isinstance(module, nn.modules.conv._ConvNd) and not module.transposed:
        return module.in_channels // module.groups * math.prod(module.kernel_size)
    if isinstance(module, nn.Linear):
        return module.in_features
    return 0


@register("patch_split_k", wall="fp16_degraded", default=False)
def patch_split_k(model: nn.Module, min_dot: int = LONG_DOT_PRODUCT, max_dot: int = DEFAULT_MAX_DOT,
                  under: str | None = None) -> list[Change]:
    """Conv1d / Conv2d (groups 1, zero padding) and Linear layers reducing >= `min_dot` products per output ->
    `SplitKConv` / `SplitKLinear` with partial sums of at most `max_dot` products. under: only inside the
    submodule of that path. Exact up to the order of fp32 additions (module docstring)."""
    changes: list[Change] = []
    for name, module in list(model.named_modules()):
        if under and not (name == under or name.startswith(under + ".")):
            continue
        length = dot_length(module)
        if length < min_dot:
            continue
        if isinstance(module, nn.Linear):
            new = SplitKLinear(module, max_dot)
        elif isinstance(module, (nn.Conv1d, nn.Conv2d)) and module.groups == 1 and module.padding_mode == "zeros":
            new = SplitKConv(module, max_dot)
        else:
            continue
        if len(new.parts) < 2:
            continue
        set_submodule(model, name, new)
        changes.append(Change(name, f"{type(module).__name__} reducing {length} products -> {len(new.parts)} partial "
                                    f"sums of <= {max_dot}", "patch_split_k", True))
    return changes
