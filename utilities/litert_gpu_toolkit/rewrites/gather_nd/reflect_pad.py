"""Reflect / replicate padding as slices and a concatenation (F.pad's modes lower to GATHER_ND).

Bit-exact: pure data movement.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import Change, named_modules_of, register, set_submodule
from ..functional import register_handler


def _tuple(v, n: int) -> tuple[int, ...]:
    return tuple(int(a) for a in v) if isinstance(v, (tuple, list)) else (int(v),) * n


# ---------------------------------------------------------------------------------------------
# non-constant padding as slice + concat
# ---------------------------------------------------------------------------------------------

PAD_MODES = ("reflect", "replicate", "circular")


def _pad_axis(x: torch.Tensor, dim: int, left: int, right: int, mode: str) -> torch.Tensor:
    n = x.shape[dim]
    if mode == "reflect":
        if left >= n or right >= n:
            raise ValueError(f"reflect padding ({left}, {right}) must be smaller than the axis size {n}")
        pieces = [x.narrow(dim, i, 1) for i in range(left, 0, -1)]
        pieces.append(x)
        pieces += [x.narrow(dim, n - 1 - i, 1) for i in range(1, right + 1)]
    elif mode == "replicate":
        first, last = x.narrow(dim, 0, 1), x.narrow(dim, n - 1, 1)
        pieces = [first] * left + [x] + [last] * right
    elif mode == "circular":
        if left > n or right > n:
            raise ValueError(f"circular padding ({left}, {right}) must not exceed the axis size {n}")
        pieces = ([x.narrow(dim, n - left, left)] if left else []) + [x] + ([x.narrow(dim, 0, right)] if right else [])
    else:
        raise ValueError(f"unknown padding mode {mode!r}")
    return torch.cat(pieces, dim) if len(pieces) > 1 else x


def pad_by_slices(x: torch.Tensor, pad: Sequence[int], mode: str = "reflect") -> torch.Tensor:
    """F.pad(x, pad, mode) for mode reflect / replicate / circular, built from slices and one
    concatenation per padded axis. Bit-exact (data movement only), any input values.

    `pad` is F.pad's tuple (last axis first). Cost: one copy of the padded tensor per padded axis
    and 2 * pad width one-wide slices; cheap for the small pads of convolutions.
    """
    pad = [int(p) for p in pad]
    if len(pad) % 2 or any(p < 0 for p in pad):
        raise ValueError(f"pad {pad} must be non-negative pairs")
    y = x
    for i in range(len(pad) // 2):
        left, right = pad[2 * i], pad[2 * i + 1]
        if left or right:
            y = _pad_axis(y, x.dim() - 1 - i, left, right, mode)
    return y


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


def exchange_matrix(n: int) -> torch.Tensor:
    """The n x n exchange matrix (ones on the anti-diagonal): `x @ J` reverses the last axis of x."""
    return torch.flip(torch.eye(n), (0,))


def reflect_pad_exchange(x: torch.Tensor, left: int, right: int, exchange: torch.Tensor | None = None) -> torch.Tensor:
    """F.pad(x, (left, right), mode="reflect") on the last axis as a slice per side reversed by a matmul with
    the exchange matrix, then one concatenation: at most 5 GPU ops whatever the pad (the slices form,
    `pad_by_slices`, needs one op per padded sample). Bit-exact in any precision: each output is one input
    times 1.0 plus zeros. `exchange` (a buffer, so it is not rebuilt per call) serves a side of its size."""
    length = int(x.shape[-1])
    if max(left, right) >= length:
        raise ValueError(f"reflect padding ({left}, {right}) needs more than {max(left, right)} samples, got {length}")

    def rev(part: torch.Tensor, n: int) -> torch.Tensor:
        j = exchange if exchange is not None and exchange.shape[0] == n else exchange_matrix(n)
        return torch.matmul(part, j)

    parts = [rev(x[..., 1:left + 1], left)] if left else []
    parts.append(x)
    if right:
        parts.append(rev(x[..., length - right - 1:length - 1], right))
    return torch.cat(parts, dim=-1) if len(parts) > 1 else x
