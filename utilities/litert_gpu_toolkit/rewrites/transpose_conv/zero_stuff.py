"""Transposed conv as zero-stuffing + a plain conv (TRANSPOSE_CONV gone).

Exact to fp32 rounding.
"""
from __future__ import annotations


import torch
from torch import nn

from .spec import ConvTAttributes, ConvTSpec, _batched, _output_padding, _pad_or_crop, conv_per_group, zero_stuff


# ------------------------------------------------------------------------------------- zero-stuff

def _from_conv_transpose(cls, m):
    """Build a rewrite class (`cls(spec, weight, bias)`) from an nn.ConvTranspose of its dimension."""
    spec = ConvTSpec.of(m)
    if spec.ndim != cls._ndim:
        raise TypeError(f"{cls.__name__} needs a ConvTranspose{cls._ndim}d, got {type(m).__name__}")
    return cls(spec, m.weight, m.bias)


class _ZeroStuffConvT(ConvTAttributes, nn.Module):
    def __init__(self, spec: ConvTSpec, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.spec = spec
        g, nd = spec.groups, spec.ndim
        cig, cog = spec.in_channels // g, spec.out_channels // g
        # ConvTranspose weight [C_in, C_out/g, *k] -> conv weight [C_out, C_in/g, *k], taps reversed.
        w = weight.detach().reshape(g, cig, cog, *spec.kernel).transpose(1, 2)
        w = w.reshape(spec.out_channels, cig, *spec.kernel).flip(dims=tuple(range(2, 2 + nd)))
        self.weight = nn.Parameter(w.contiguous(), requires_grad=weight.requires_grad)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=bias.requires_grad)

    from_conv_transpose = classmethod(lambda cls, m: _from_conv_transpose(cls, m))

    def forward(self, x: torch.Tensor, output_size=None) -> torch.Tensor:
        spec = self.spec
        x, unbatched = _batched(x, spec.ndim)
        op = _output_padding(spec, x, output_size)
        y = zero_stuff(x, spec.stride)
        pads = [(d * (k - 1) - p, d * (k - 1) - p + o)
                for d, k, p, o in zip(spec.dilation, spec.kernel, spec.padding, op)]
        # pad before the conv; a negative pad (padding > dilated kernel - 1) crops the conv output instead,
        # which is the same for a stride-1 conv and keeps the conv input at least one kernel wide
        y = _pad_or_crop(y, [(max(lo, 0), max(hi, 0)) for lo, hi in pads])
        y = conv_per_group(y, self.weight, self.bias, spec.groups, 0, spec.dilation)
        y = _pad_or_crop(y, [(min(lo, 0), min(hi, 0)) for lo, hi in pads])
        return y.squeeze(0) if unbatched else y

    def extra_repr(self) -> str:
        return f"zero-stuffed {self.spec.describe()}"


class ZeroStuffConvT1d(_ZeroStuffConvT):
    """ConvTranspose1d as zero-stuffing + stride-1 Conv1d (exact to fp32 rounding, every option supported).

    MACs: stride x those of the transposed conv. Use `PolyphaseConvT1d` when speed matters.
    """
    _ndim = 1


class ZeroStuffConvT2d(_ZeroStuffConvT):
    """ConvTranspose2d as zero-stuffing + stride-1 Conv2d (exact to fp32 rounding, every option supported).

    MACs: stride_h * stride_w x those of the transposed conv. Use `PolyphaseConvT2d` when speed matters.
    """
    _ndim = 2
