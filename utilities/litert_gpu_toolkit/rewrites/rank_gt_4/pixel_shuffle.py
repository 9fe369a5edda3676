"""PixelShuffle / PixelUnshuffle at rank <= 4, window partition helpers, packed-QKV splits.

Bit-exact, except the opt-in `pixelshuffle_to_conv_transpose` (one-hot weights: exact to fp32 rounding).
"""
from __future__ import annotations


import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import Change, named_modules_of, register, set_submodule
from ..functional import register_handler
from .lowrank import _prod, lowrank_permute


# ---------------------------------------------------------------------------------------------
# named data movements
# ---------------------------------------------------------------------------------------------

def depth_to_space(x: torch.Tensor, r: int) -> torch.Tensor:
    """torch PixelShuffle(r) on an NCHW tensor (also rank 3: CHW), at rank <= 4. Bit-exact.

    out[n, c, h*r + i, w*r + j] = x[n, c*r*r + i*r + j, h, w]  (torch's channel order).
    """
    *lead, c, h, w = x.shape
    if c % (r * r):
        raise ValueError(f"channels {c} not divisible by r*r = {r * r}")
    co = c // (r * r)
    n = _prod(lead)
    # elementary axes (n, co, i, j, h, w) -> (n, co, h, i, w, j)
    return lowrank_permute(x, (n, co, r, r, h, w), (0, 1, 4, 2, 5, 3), (*lead, co, h * r, w * r))


def space_to_depth(x: torch.Tensor, r: int) -> torch.Tensor:
    """torch PixelUnshuffle(r) on an NCHW tensor (also rank 3: CHW), at rank <= 4. Bit-exact."""
    *lead, c, h, w = x.shape
    if h % r or w % r:
        raise ValueError(f"spatial size {h}x{w} not divisible by {r}")
    n = _prod(lead)
    # elementary axes (n, c, h', i, w', j) -> (n, c, i, j, h', w')
    return lowrank_permute(x, (n, c, h // r, r, w // r, r), (0, 1, 3, 5, 2, 4), (*lead, c * r * r, h // r, w // r))


def window_partition(x: torch.Tensor, window_size: int) -> torch.Tensor:
    """(B, H, W, C) -> (B * H/ws * W/ws, ws, ws, C), the Swin window order, at rank <= 4. Bit-exact."""
    b, h, w, c = x.shape
    ws = int(window_size)
    return lowrank_permute(x, (b, h // ws, ws, w // ws, ws, c), (0, 1, 3, 2, 4, 5), (-1, ws, ws, c))


def window_reverse(windows: torch.Tensor, window_size: int, h: int, w: int) -> torch.Tensor:
    """Inverse of `window_partition`: (B * nW, ws, ws, C) -> (B, H, W, C), at rank <= 4. Bit-exact."""
    ws = int(window_size)
    c = windows.shape[-1]
    b = windows.shape[0] // ((h // ws) * (w // ws))
    return lowrank_permute(windows, (b, h // ws, w // ws, ws, ws, c), (0, 1, 3, 2, 4, 5), (b, h, w, c))


def split_packed_qkv(qkv: torch.Tensor, num_heads: int, parts: int = 3) -> tuple[torch.Tensor, ...]:
    """(B, N, parts*H*D) -> `parts` tensors (B, H, N, D): the rank-4 form of the idiom
    `qkv.reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)`. Bit-exact."""
    b, n, total = qkv.shape
    width = total // parts
    d = width // num_heads
    return tuple(qkv[..., i * width:(i + 1) * width].reshape(b, n, num_heads, d).permute(0, 2, 1, 3)
                 for i in range(parts))


class DepthToSpace(nn.Module):
    """Drop-in for nn.PixelShuffle at rank <= 4."""

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = int(upscale_factor)

    def forward(self, x):
        return depth_to_space(x, self.upscale_factor)

    def extra_repr(self):
        return f"upscale_factor={self.upscale_factor}"


class SpaceToDepth(nn.Module):
    """Drop-in for nn.PixelUnshuffle at rank <= 4."""

    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = int(downscale_factor)

    def forward(self, x):
        return space_to_depth(x, self.downscale_factor)

    def extra_repr(self):
        return f"downscale_factor={self.downscale_factor}"


@register("patch_pixel_shuffle", wall="rank_gt_4")
def patch_pixel_shuffle(model: nn.Module) -> list[Change]:
    """nn.PixelShuffle / nn.PixelUnshuffle -> `DepthToSpace` / `SpaceToDepth` (rank <= 4). Bit-exact, any input.

    torch decomposes pixel_shuffle into a rank-6 view + permute; litert-torch 0.10.0 already lowers
    it to rank 4 by itself, so on this toolchain the patch guards against a converter that does not.
    """
    changes = []
    for path, m in named_modules_of(model, (nn.PixelShuffle, nn.PixelUnshuffle)):
        if not path:
            continue
        if isinstance(m, nn.PixelShuffle):
            new, what = DepthToSpace(m.upscale_factor), f"PixelShuffle({m.upscale_factor}) -> rank-4 depth-to-space"
        else:
            new, what = (
                SpaceToDepth(m.downscale_factor),
                f"PixelUnshuffle({m.downscale_factor}) -> rank-4 space-to-depth",
            )
        set_submodule(model, path, new)
        changes.append(Change(path, what, "patch_pixel_shuffle", True))
    return changes


@register_handler(F.pixel_shuffle, "patch_pixel_shuffle")
def _pixel_shuffle_handler(x, upscale_factor):
    return depth_to_space(x, int(upscale_factor)) if x.dim() in (3, 4) else NotImplemented


@register_handler(F.pixel_unshuffle, "patch_pixel_shuffle")
def _pixel_unshuffle_handler(x, downscale_factor):
    return space_to_depth(x, int(downscale_factor)) if x.dim() in (3, 4) else NotImplemented


class PixelShuffleConvTranspose(nn.Module):
    """PixelShuffle(r) as one ConvTranspose2d(C*r*r -> C, kernel r, stride r) with one-hot weights.

    Exact for finite inputs: each output is one input times 1.0 plus exact zeros (x * 0). An inf
    or NaN input turns into NaN in every output of its r x r block (inf * 0). Cost: C*r*r
    multiply-adds per output element with the dense kernel (the default: one TRANSPOSE_CONV op);
    `grouped=True` needs only r*r but litert-torch 0.10.0 splits a grouped transposed conv into one
    op per group (slices + concat), which is worse for real channel counts. Use it where a reshape /
    transpose chain is unwanted; TRANSPOSE_CONV itself is rejected by some phone delegates (symptom
    `transpose_conv`).
    """

    def __init__(self, channels_out: int, upscale_factor: int, grouped: bool = False):
        super().__init__()
        r = int(upscale_factor)
        c = int(channels_out)
        self.upscale_factor = r
        groups = c if grouped else 1
        self.conv = nn.ConvTranspose2d(c * r * r, c, r, stride=r, groups=groups, bias=False)
        weight = torch.zeros_like(self.conv.weight)  # (C*r*r, C / groups, r, r)
        for ch in range(c):
            for i in range(r):
                for j in range(r):
                    weight[ch * r * r + i * r + j, 0 if grouped else ch, i, j] = 1.0
        with torch.no_grad():
            self.conv.weight.copy_(weight)
        self.conv.weight.requires_grad_(False)

    def forward(self, x):
        return self.conv(x)


@register("pixelshuffle_to_conv_transpose", wall="rank_gt_4", default=False)
def pixelshuffle_to_conv_transpose(model: nn.Module, channels: dict[str, int] | None = None) -> list[Change]:
    """nn.PixelShuffle -> `PixelShuffleConvTranspose` (exact for finite inputs; opt-in).

    The output channel count is not stored in nn.PixelShuffle: it is read from the nearest
    preceding nn.Conv2d in module order unless `channels` maps the module path to it.
    """
    channels = dict(channels or {})
    changes = []
    last_conv_out = None
    for path, m in list(model.named_modules()):
        if isinstance(m, nn.Conv2d):
            last_conv_out = m.out_channels
        if not path or not isinstance(m, nn.PixelShuffle):
            continue
        r = m.upscale_factor
        if path in channels:
            c_out = int(channels[path])
        elif last_conv_out and last_conv_out % (r * r) == 0:
            c_out = last_conv_out // (r * r)
        else:
            continue
        set_submodule(model, path, PixelShuffleConvTranspose(c_out, r))
        changes.append(
            Change(path, f"PixelShuffle({r}) -> one-hot ConvTranspose2d", "pixelshuffle_to_conv_transpose", True)
        )
    return changes
