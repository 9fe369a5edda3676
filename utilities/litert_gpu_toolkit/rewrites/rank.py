"""Rank > 4 walls: the GPU delegate handles tensors of rank <= 4 only.

The wall (symptom `rank_gt_4`): a RESHAPE / TRANSPOSE / elementwise op on a rank-5 or rank-6 tensor
makes the strict GPU compile fail ("Tensor dimensions must be less than 5"). The usual sources
are pure data movement: window partition / reverse (`view(B, H/ws, ws, W/ws, ws, C).permute(...)`),
`einops.rearrange`, packed-QKV head splits (`qkv.reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4)`),
timm's patch merging, and the rank-5 mask add of shifted-window attention.

The one idea behind every rewrite here: a reshape -> permute -> reshape chain over any number of
"elementary" axes can always be done with rank <= 4 tensors. After dropping size-1 axes and
merging axes that stay neighbours, each remaining move of a run of axes past a block of axes is
one rank-4 transpose of a (prefix, block A, block B, suffix) view (`lowrank_permute`). Pure data
movement: every rewrite in this module is bit-exact (no arithmetic is changed, except
`pixelshuffle_to_conv_transpose`, which multiplies by one-hot weights -- see there).

Pieces:
  * `lowrank_permute(x, view_shape, perm, out_shape)` -- the general lowering.
  * `depth_to_space(x, r)` / `space_to_depth(x, r)` -- torch PixelShuffle / PixelUnshuffle (NCHW,
    same channel order) at rank <= 4; `window_partition` / `window_reverse`; `split_packed_qkv`.
  * module patches: `patch_pixel_shuffle`, `pixelshuffle_to_conv_transpose` (opt-in),
    `patch_window_attention`, `patch_einops`.
  * functional handler "lower_rank_views" (active inside `GpuRewriteWrapper`): follows views,
    permutes, unsqueezes, selects and broadcast elementwise ops through rank > 4 and replaces
    the chain by its rank <= 4 form when it comes back to rank <= 4. It catches what is written
    inline in a forward (window partition, packed QKV, `einops.rearrange`, the Swin mask add).
    The high-rank ops it shadows are left unused and dropped by the converter.

Measured with litert-torch 0.10.0: `nn.PixelShuffle` / `nn.PixelUnshuffle` already convert at rank
4 (the converter lowers them itself), so `patch_pixel_shuffle` is insurance there, not a wall
remover; window partition, packed QKV, einops patterns and the rank-5 mask add are walls
(tests/test_rewrites_rank.py proves each).
"""
from __future__ import annotations

import inspect
import math
import re
import weakref
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import Change, named_modules_of, register, set_submodule
from .functional import register_handler

MAX_RANK = 4
VIEWS_HANDLER = "lower_rank_views"

__all__ = [
    "MAX_RANK", "lowrank_permute", "depth_to_space", "space_to_depth", "window_partition", "window_reverse",
    "split_packed_qkv", "DepthToSpace", "SpaceToDepth", "PixelShuffleConvTranspose", "WindowAttentionRank4",
    "UnsupportedPatternError", "parse_rearrange", "rearrange", "Rearrange",
    "patch_pixel_shuffle", "pixelshuffle_to_conv_transpose", "patch_window_attention", "patch_einops",
    "lower_rank_views", "VIEWS_HANDLER",
]


def _prod(values) -> int:
    return int(math.prod(int(v) for v in values))


# ---------------------------------------------------------------------------------------------
# the general lowering
# ---------------------------------------------------------------------------------------------

def _canonical(shape: Sequence[int], perm: Sequence[int]) -> tuple[list[int], list[int]]:
    """Drop size-1 axes, then merge axes that are neighbours both before and after the permutation."""
    keep = [i for i in range(len(shape)) if shape[i] != 1]
    renum = {old: new for new, old in enumerate(keep)}
    sizes = [int(shape[i]) for i in keep]
    order = [renum[p] for p in perm if shape[p] != 1]
    # runs of consecutive input axes that stay consecutive in the output become one axis
    runs: list[list[int]] = []
    for axis in order:
        if runs and runs[-1][-1] + 1 == axis:
            runs[-1].append(axis)
        else:
            runs.append([axis])
    by_start = sorted(runs, key=lambda run: run[0])
    merged_sizes = [_prod(sizes[a] for a in run) for run in by_start]
    index_of = {run[0]: i for i, run in enumerate(by_start)}
    merged_order = [index_of[run[0]] for run in runs]
    return merged_sizes, merged_order


def _swap_blocks(y: torch.Tensor, prefix: int, a: int, b: int, suffix: int) -> torch.Tensor:
    """View flat data as (prefix, a, b, suffix) and exchange the a and b blocks; drops size-1 ends."""
    dims = [prefix, a, b, suffix]
    lead, tail = prefix != 1, suffix != 1
    view = [d for d, keep in zip(dims, (lead, True, True, tail)) if keep]
    i = 1 if lead else 0
    order = list(range(len(view)))
    order[i], order[i + 1] = order[i + 1], order[i]
    return y.reshape(view).permute(order)


def lowrank_permute(x: torch.Tensor, view_shape: Sequence[int], perm: Sequence[int],
                    out_shape: Sequence[int] | None = None) -> torch.Tensor:
    """`x.reshape(view_shape).permute(perm).reshape(out_shape)` without any tensor above rank 4.

    `view_shape` may have any rank; `out_shape` (default: the permuted view shape) must have rank
    <= 4. Each step moves the longest run of axes that is already in output order to its place
    with one rank-4 transpose, so the chain has at most (number of merged axes - 1) transposes.
    Bit-exact: only data movement.
    """
    view_shape = [int(s) for s in view_shape]
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(len(view_shape))):
        raise ValueError(f"perm {perm} is not a permutation of {len(view_shape)} axes")
    if _prod(view_shape) != x.numel():
        raise ValueError(f"view shape {view_shape} does not match {x.numel()} elements")
    if out_shape is None:
        out_shape = [view_shape[p] for p in perm]
    out_shape = [int(s) for s in out_shape]
    if len(out_shape) > MAX_RANK:
        raise ValueError(f"output shape {out_shape} has rank {len(out_shape)} > {MAX_RANK}")
    sizes, order = _canonical(view_shape, perm)
    if len(sizes) <= MAX_RANK:
        y = x.reshape(sizes) if sizes else x.reshape(-1)
        if order != sorted(order):
            y = y.permute(order)
        return y.reshape(out_shape)
    current = list(range(len(sizes)))
    y = x
    i = 0
    while i < len(order):
        k = current.index(order[i])
        if k == i:
            i += 1
            continue
        run = 1
        while i + run < len(order) and k + run < len(current) and current[k + run] == order[i + run]:
            run += 1
        prefix = _prod(sizes[a] for a in current[:i])
        block_a = _prod(sizes[a] for a in current[i:k])
        block_b = _prod(sizes[a] for a in current[k:k + run])
        suffix = _prod(sizes[a] for a in current[k + run:])
        y = _swap_blocks(y, prefix, block_a, block_b, suffix)
        current = current[:i] + current[k:k + run] + current[i:k] + current[k + run:]
        i += run
    return y.reshape(out_shape)


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
            new, what = SpaceToDepth(m.downscale_factor), f"PixelUnshuffle({m.downscale_factor}) -> rank-4 space-to-depth"
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
        weight = torch.zeros_like(self.conv.weight)          # (C*r*r, C / groups, r, r)
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
        changes.append(Change(path, f"PixelShuffle({r}) -> one-hot ConvTranspose2d", "pixelshuffle_to_conv_transpose",
                              True))
    return changes


# ---------------------------------------------------------------------------------------------
# Swin window attention
# ---------------------------------------------------------------------------------------------

def _looks_like_window_attention(m: nn.Module) -> bool:
    if not all(hasattr(m, a) for a in ("qkv", "proj", "num_heads", "relative_position_bias_table",
                                          "relative_position_index")):
        return False
    if hasattr(m, "logit_scale") or hasattr(m, "cpb_mlp"):       # Swin v2 cosine attention: different math
        return False
    if not isinstance(m.qkv, nn.Linear) or m.qkv.out_features != 3 * m.qkv.in_features:
        return False
    params = [p for p in inspect.signature(m.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return 1 <= len(params) <= 2


class WindowAttentionRank4(nn.Module):
    """Swin (v1) window attention with every tensor at rank <= 4.

    Same modules (qkv, proj, dropouts) and the same arithmetic order as the reference
    implementation: q * scale, q @ k^T, + relative position bias, + mask, softmax, @ v. The
    relative position bias is gathered once at patch time into a constant (heads, N, N) buffer
    (frozen: for export, not training). The shifted-window mask add happens on a
    (B, nW, heads, N*N) view instead of the rank-5 (B, nW, heads, N, N) one. Bit-exact in fp32.
    """

    def __init__(self, attn: nn.Module):
        super().__init__()
        self.qkv = attn.qkv
        self.proj = attn.proj
        self.num_heads = int(attn.num_heads)
        dim = self.qkv.in_features
        self.scale = float(getattr(attn, "scale", (dim // self.num_heads) ** -0.5))
        self.attn_drop = getattr(attn, "attn_drop", nn.Identity())
        self.proj_drop = getattr(attn, "proj_drop", nn.Identity())
        index = attn.relative_position_index.reshape(-1)
        n = int(math.isqrt(index.numel()))
        with torch.no_grad():
            bias = attn.relative_position_bias_table[index].reshape(n, n, -1).permute(2, 0, 1).contiguous()
        self.register_buffer("relative_position_bias", bias.detach().clone())

    def forward(self, x, mask=None):
        b_, n, c = x.shape
        q, k, v = split_packed_qkv(self.qkv(x), self.num_heads)
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        attn = attn + self.relative_position_bias.unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.reshape(b_ // nw, nw, self.num_heads, n * n) + mask.reshape(1, nw, 1, n * n)
            attn = attn.reshape(b_, self.num_heads, n, n)
        attn = self.attn_drop(attn.softmax(dim=-1))
        out = (attn @ v).transpose(1, 2).reshape(b_, n, c)
        return self.proj_drop(self.proj(out))


@register("patch_window_attention", wall="rank_gt_4")
def patch_window_attention(model: nn.Module) -> list[Change]:
    """Swin v1 WindowAttention modules (found by their attributes: qkv, proj, num_heads,
    relative_position_bias_table, relative_position_index) -> `WindowAttentionRank4`. Bit-exact.

    Window partition / reverse written inline in a block's forward are caught by the
    "lower_rank_views" handler inside `GpuRewriteWrapper`, or call `window_partition` /
    `window_reverse` from this module.
    """
    changes = []
    for path, m in list(model.named_modules()):
        if path and _looks_like_window_attention(m):
            set_submodule(model, path, WindowAttentionRank4(m))
            changes.append(Change(path, f"{type(m).__name__} -> rank-4 window attention (bias baked, rank-4 mask add)",
                                  "patch_window_attention", True))
    return changes


# ---------------------------------------------------------------------------------------------
# einops rearrange
# ---------------------------------------------------------------------------------------------

class UnsupportedPatternError(ValueError):
    """An einops pattern that cannot be lowered to rank <= 4 (the message names the pattern)."""


_TOKEN = re.compile(r"\.\.\.|\(|\)|[A-Za-z_][A-Za-z0-9_]*|\d+")


def _parse_side(pattern: str, side: str) -> list[list[str]]:
    """'b (h p1) ... c' -> [['b'], ['h', 'p1'], ['...'], ['c']]; '()' and '1' are empty groups."""
    groups: list[list[str]] = []
    current: list[str] | None = None
    rest = side
    for token in _TOKEN.findall(side):
        rest = rest.replace(token, "", 1)
        if token == "(":
            if current is not None:
                raise UnsupportedPatternError(f"nested parentheses in {pattern!r}")
            current = []
        elif token == ")":
            if current is None:
                raise UnsupportedPatternError(f"unbalanced parentheses in {pattern!r}")
            groups.append(current)
            current = None
        elif token.isdigit():
            if token != "1":
                raise UnsupportedPatternError(f"axis literal {token} in {pattern!r} (only 1 is allowed in rearrange)")
            if current is None:
                groups.append([])
        elif current is not None:
            current.append(token)
        else:
            groups.append([token])
    if current is not None:
        raise UnsupportedPatternError(f"unbalanced parentheses in {pattern!r}")
    if rest.strip():
        raise UnsupportedPatternError(f"cannot parse {rest.strip()!r} in {pattern!r}")
    return groups


def _check_pattern(pattern: str) -> None:
    """Parse both sides of `pattern` (raises `UnsupportedPatternError` naming it)."""
    if pattern.count("->") != 1:
        raise UnsupportedPatternError(f"{pattern!r} needs exactly one '->'")
    left, right = pattern.split("->")
    _parse_side(pattern, left)
    _parse_side(pattern, right)


def parse_rearrange(pattern: str, shape: Sequence[int], **axes_lengths: int):
    """Turn an einops rearrange `pattern` for an input `shape` into (view_shape, perm, out_shape).

    Raises `UnsupportedPatternError` (naming the pattern) for patterns rearrange itself rejects or
    that this module does not implement (anonymous axes other than 1, '...' inside parentheses
    on the input side).
    """
    _check_pattern(pattern)
    left_text, right_text = pattern.split("->")
    left, right = _parse_side(pattern, left_text), _parse_side(pattern, right_text)
    shape = [int(s) for s in shape]
    if any("..." in g and g != ["..."] for g in left):
        raise UnsupportedPatternError(f"'...' inside parentheses on the input side of {pattern!r}")
    if ["..."] in left:
        n_dots = len(shape) - (len(left) - 1)
        if n_dots < 0 or left.count(["..."]) > 1:
            raise UnsupportedPatternError(f"{pattern!r} does not fit an input of rank {len(shape)}")
        dots = [f"...{i}" for i in range(n_dots)]
        at = left.index(["..."])
        left = left[:at] + [[d] for d in dots] + left[at + 1:]
        expanded_right = []
        for g in right:
            if g == ["..."]:
                expanded_right.extend([d] for d in dots)
            else:
                expanded_right.append([a for n in g for a in (dots if n == "..." else [n])])
        right = expanded_right
    names_left = [a for g in left for a in g]
    names_right = [a for g in right for a in g]
    if len(set(names_left)) != len(names_left) or len(set(names_right)) != len(names_right):
        raise UnsupportedPatternError(f"repeated axis name in {pattern!r}")
    if set(names_left) != set(names_right):
        raise UnsupportedPatternError(f"axes {sorted(set(names_left) ^ set(names_right))} appear on one side only "
                                      f"of {pattern!r}")
    if len(left) != len(shape):
        raise UnsupportedPatternError(f"{pattern!r} has {len(left)} input axes, the tensor has {len(shape)}")
    sizes = {k: int(v) for k, v in axes_lengths.items()}
    for group, dim in zip(left, shape):
        known = _prod(sizes[a] for a in group if a in sizes)
        unknown = [a for a in group if a not in sizes]
        if len(unknown) > 1:
            raise UnsupportedPatternError(f"axes {unknown} of {pattern!r} need lengths")
        if unknown:
            if known == 0 or dim % known:
                raise UnsupportedPatternError(f"{pattern!r}: {dim} is not divisible by {known}")
            sizes[unknown[0]] = dim // known
        elif known != dim:
            raise UnsupportedPatternError(f"{pattern!r}: axis group {group} is {known}, the tensor has {dim}")
    elementary = names_left
    view_shape = [sizes[a] for a in elementary]
    perm = [elementary.index(a) for a in names_right]
    out_shape = [_prod(sizes[a] for a in g) for g in right]
    return view_shape, perm, out_shape


def rearrange(x: torch.Tensor, pattern: str, **axes_lengths: int) -> torch.Tensor:
    """`einops.rearrange` for torch tensors, computed at rank <= 4 (bit-exact); no einops needed.

    Raises `UnsupportedPatternError` naming the pattern when the input or the output has rank > 4
    or the pattern is not a plain rearrange.
    """
    if x.dim() > MAX_RANK:
        raise UnsupportedPatternError(f"cannot lower {pattern!r}: the input already has rank {x.dim()}")
    view_shape, perm, out_shape = parse_rearrange(pattern, x.shape, **axes_lengths)
    if len(out_shape) > MAX_RANK:
        raise UnsupportedPatternError(f"cannot lower {pattern!r}: its output has rank {len(out_shape)}")
    return lowrank_permute(x, view_shape, perm, out_shape)


class Rearrange(nn.Module):
    """Drop-in for `einops.layers.torch.Rearrange` computed at rank <= 4."""

    def __init__(self, pattern: str, **axes_lengths: int):
        super().__init__()
        self.pattern = pattern
        self.axes_lengths = dict(axes_lengths)
        _check_pattern(pattern)

    def forward(self, x):
        return rearrange(x, self.pattern, **self.axes_lengths)

    def extra_repr(self):
        return repr(self.pattern)


@register("patch_einops", wall="rank_gt_4")
def patch_einops(model: nn.Module) -> list[Change]:
    """`einops.layers.torch.Rearrange` modules -> `Rearrange` (rank <= 4, bit-exact).

    Works without einops installed (then there is nothing to patch). A pattern that cannot be
    lowered raises `UnsupportedPatternError` naming it -- at patch time when it fails to parse,
    else at the first forward (lowering needs the input shape). Functional `einops.rearrange`
    calls are caught inside `GpuRewriteWrapper` by the "lower_rank_views" handler (einops runs
    reshape -> permute -> reshape on the tensor, which that handler follows).
    """
    import sys

    layers = sys.modules.get("einops.layers.torch")
    if layers is None:
        try:
            import einops.layers.torch as layers  # noqa: F811
        except ImportError:
            return []
    changes = []
    for path, m in named_modules_of(model, layers.Rearrange):
        if not path:
            continue
        pattern = m.pattern
        _check_pattern(pattern)
        set_submodule(model, path, Rearrange(pattern, **dict(m.axes_lengths)))
        changes.append(Change(path, f"Rearrange({pattern!r}) -> rank-4 view/permute chain", "patch_einops", True))
    return changes


# ---------------------------------------------------------------------------------------------
# "lower_rank_views": following rank > 4 views through a forward
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class _Lazy:
    """What a rank > 4 tensor is made of: base.reshape(elem).permute(perm), regrouped into output
    axes; counts[i] = how many consecutive permuted elementary axes form output axis i (0 = an
    axis of size 1). `base` always has rank <= 4."""
    base: torch.Tensor
    elem: tuple[int, ...]
    perm: tuple[int, ...]
    counts: tuple[int, ...]

    def groups(self) -> list[list[int]]:
        """Output axis -> positions in `perm`."""
        out, pos = [], 0
        for c in self.counts:
            out.append(list(range(pos, pos + c)))
            pos += c
        return out

    def shape(self) -> list[int]:
        return [_prod(self.elem[self.perm[j]] for j in g) for g in self.groups()]

    @property
    def identity(self) -> bool:
        return list(self.perm) == sorted(self.perm)

    def materialize(self) -> torch.Tensor:
        return lowrank_permute(self.base, self.elem, self.perm, self.shape())


def _plain(base: torch.Tensor, shape: Sequence[int]) -> _Lazy:
    """`base` reshaped to `shape` (no permutation)."""
    elem = tuple(int(s) for s in base.shape) or (1,)
    lazy = _regroup(_Lazy(base, elem, tuple(range(len(elem))), (len(elem),)), shape)
    if lazy is None:                                   # cannot happen for a plain reshape
        raise AssertionError(f"cannot regroup {tuple(base.shape)} as {tuple(shape)}")
    return lazy


def _regroup(lazy: _Lazy, new_shape: Sequence[int]) -> _Lazy | None:
    """The same data reshaped to `new_shape`, splitting elementary axes where the reshape splits
    them; None when the reshape merges parts of different axes that are not neighbours in memory."""
    permuted = [lazy.elem[p] for p in lazy.perm]
    live = [j for j, size in enumerate(permuted) if size != 1]     # size-1 axes carry no data
    parts: dict[int, list[int]] = {j: [] for j in live}             # permuted axis -> its split sizes
    counts: list[int] = []
    pos = 0
    remaining = permuted[live[0]] if live else 1
    for target in (int(t) for t in new_shape):
        count, need = 0, target
        while need > 1:
            if pos >= len(live):
                return None
            j = live[pos]
            if need % remaining == 0:                  # this axis (what is left of it) fits whole
                parts[j].append(remaining)
                need //= remaining
                pos += 1
                remaining = permuted[live[pos]] if pos < len(live) else 1
            elif remaining % need == 0:                # split this axis
                parts[j].append(need)
                remaining //= need
                need = 1
            else:
                return None
            count += 1
        counts.append(count)
    if pos != len(live):
        return None
    # new elementary axes in base memory order: each old axis replaced by its parts
    new_elem: list[int] = []
    where: dict[tuple[int, int], int] = {}
    position_of = {p: j for j, p in enumerate(lazy.perm)}
    for axis in range(len(lazy.elem)):
        j = position_of[axis]
        for k, size in enumerate(parts.get(j, ())):
            where[(j, k)] = len(new_elem)
            new_elem.append(size)
    new_perm = [where[(j, k)] for j in live for k in range(len(parts[j]))]
    if not new_elem:
        return _Lazy(lazy.base, (1,), (0,), tuple(0 for _ in counts))
    return _Lazy(lazy.base, tuple(new_elem), tuple(new_perm), tuple(counts))


# tensor id -> (weak reference, what it is made of); entries go when the tensor goes
_TRACKED: dict[int, tuple[weakref.ref, _Lazy]] = {}


def _lazy_of(t) -> _Lazy | None:
    if not isinstance(t, torch.Tensor):
        return None
    entry = _TRACKED.get(id(t))
    if entry is None or entry[0]() is not t:
        return None
    return entry[1]


def _track(real: torch.Tensor, lazy: _Lazy) -> torch.Tensor:
    key = id(real)
    _TRACKED[key] = (weakref.ref(real, lambda _ref, key=key: _TRACKED.pop(key, None)), lazy)
    return real


def _finish(real_fn, lazy: _Lazy):
    """The rank <= 4 form when the result is back at rank <= 4; else the real (high-rank) result,
    tracked. The high-rank ops behind `real_fn` are dropped by the converter when unused."""
    if len(lazy.counts) <= MAX_RANK:
        return lazy.materialize()
    return _track(real_fn(), lazy)


def _shape_arg(shape) -> list:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        return list(shape[0])
    return list(shape)


def _resolve(shape: list, numel: int) -> list[int]:
    shape = [int(s) for s in shape]
    if -1 in shape:
        known = _prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = numel // known if known else 0
    return shape


def _reshaped(x: torch.Tensor, new_shape: list):
    """Handler core for every reshape-like call (view, reshape, flatten, unsqueeze, ...)."""
    lazy = _lazy_of(x)
    if lazy is None:
        if len(new_shape) <= MAX_RANK or x.dim() > MAX_RANK:
            return NotImplemented
        lazy = _plain(x, list(x.shape))
    new_shape = _resolve(new_shape, x.numel())
    regrouped = _regroup(lazy, new_shape)
    if regrouped is None:
        return NotImplemented
    return _finish(lambda: x.reshape(new_shape), regrouped)


def _on_view(x, *shape):
    shape = _shape_arg(shape)
    if any(isinstance(s, torch.dtype) for s in shape):
        return NotImplemented
    return _reshaped(x, shape)


def _on_reshape(x, *shape, **kwargs):
    return _reshaped(x, _shape_arg(shape or (kwargs["shape"],)))


def _on_flatten(x, start_dim=0, end_dim=-1):
    if _lazy_of(x) is None or not isinstance(start_dim, int):
        return NotImplemented
    shape = list(x.shape)
    s, e = start_dim % len(shape), end_dim % len(shape)
    return _reshaped(x, shape[:s] + [_prod(shape[s:e + 1])] + shape[e + 1:])


def _on_unflatten(x, dim, sizes):
    shape = list(x.shape)
    d = dim % len(shape)
    return _reshaped(x, shape[:d] + _resolve(list(sizes), shape[d]) + shape[d + 1:])


def _on_unsqueeze(x, dim):
    shape = list(x.shape)
    d = dim % (len(shape) + 1)
    return _reshaped(x, shape[:d] + [1] + shape[d:])


def _on_squeeze(x, dim=None):
    if _lazy_of(x) is None:
        return NotImplemented
    shape = list(x.shape)
    dims = range(len(shape)) if dim is None else (dim if isinstance(dim, (tuple, list)) else (dim,))
    drop = {d % len(shape) for d in dims if shape[d % len(shape)] == 1}
    return _reshaped(x, [s for i, s in enumerate(shape) if i not in drop])


def _permuted(x: torch.Tensor, order: list[int]):
    lazy = _lazy_of(x)
    if lazy is None:
        return NotImplemented
    order = [int(o) % len(lazy.counts) for o in order]
    groups = lazy.groups()
    new = _Lazy(lazy.base, lazy.elem, tuple(lazy.perm[j] for o in order for j in groups[o]),
                tuple(lazy.counts[o] for o in order))
    return _finish(lambda: x.permute(order), new)


def _on_permute(x, *dims):
    return _permuted(x, _shape_arg(dims))


def _on_transpose(x, dim0, dim1):
    if _lazy_of(x) is None:
        return NotImplemented
    order = list(range(x.dim()))
    a, b = dim0 % x.dim(), dim1 % x.dim()
    order[a], order[b] = order[b], order[a]
    return _permuted(x, order)


def _on_contiguous(x, *args, **kwargs):
    lazy = _lazy_of(x)
    if lazy is None:
        return NotImplemented
    return _track(x.contiguous(*args, **kwargs), lazy)


def _selected(x: torch.Tensor, dim: int, index: int):
    """x.select(dim, index) of a tracked x: fix the elementary axes that make up output axis `dim`."""
    lazy = _lazy_of(x)
    dim = dim % len(lazy.counts)
    index = int(index) % lazy.shape()[dim]
    axes = [lazy.perm[j] for j in lazy.groups()[dim]]          # elementary axes, major first
    fixed, rest = {}, index
    for e in reversed(axes):
        fixed[e] = rest % lazy.elem[e]
        rest //= lazy.elem[e]
    base, elem, perm = lazy.base, list(lazy.elem), list(lazy.perm)
    for e in sorted(fixed, reverse=True):                       # highest first keeps lower indices valid
        base = base.reshape(_prod(elem[:e]), elem[e], _prod(elem[e + 1:]))[:, fixed[e]]
        del elem[e]
        perm = [p - (p > e) for p in perm if p != e]
    counts = tuple(c for i, c in enumerate(lazy.counts) if i != dim)
    new = _Lazy(base, tuple(elem), tuple(perm), counts) if elem else _Lazy(base, (1,), (0,), counts)
    return _finish(lambda: x.select(dim, index), new)


def _on_select(x, dim, index):
    return NotImplemented if _lazy_of(x) is None else _selected(x, dim, index)


def _on_getitem(x, index):
    if _lazy_of(x) is None:
        return NotImplemented
    if isinstance(index, int):
        return _selected(x, 0, index)
    if isinstance(index, tuple) and index and isinstance(index[-1], int) and \
            all(isinstance(i, slice) and i == slice(None) for i in index[:-1]):
        return _selected(x, len(index) - 1, index[-1])
    return NotImplemented


def _on_unbind(x, dim=0):
    if _lazy_of(x) is None:
        return NotImplemented
    return tuple(_selected(x, dim, i) for i in range(x.shape[dim]))


def _is_scalar(v) -> bool:
    return not isinstance(v, torch.Tensor) or v.dim() == 0


def _binary(op):
    """Broadcast elementwise op with a tracked operand: done at rank <= 4 by merging neighbouring
    axes that both operands broadcast the same way (e.g. the Swin mask add (B, nW, heads, N, N) +
    (1, nW, 1, N, N) -> (B, nW, heads, N*N) + (1, nW, 1, N*N))."""
    def handler(a, b, *args, **kwargs):
        la, lb = _lazy_of(a), _lazy_of(b)
        if la is None and lb is None:
            return NotImplemented
        if _is_scalar(a) or _is_scalar(b):                 # commutes with any reshape / permute
            lazy = la if la is not None else lb
            small = op(lazy.base, b, *args, **kwargs) if la is not None else op(a, lazy.base, *args, **kwargs)
            return _track(op(a, b, *args, **kwargs), _Lazy(small, lazy.elem, lazy.perm, lazy.counts))
        if any(lz is not None and not lz.identity for lz in (la, lb)):
            return NotImplemented
        out = [int(n) for n in torch.broadcast_shapes(a.shape, b.shape)]
        sa = [1] * (len(out) - a.dim()) + [int(n) for n in a.shape]
        sb = [1] * (len(out) - b.dim()) + [int(n) for n in b.shape]
        merged: list[list[int]] = []
        kind_of_group: list[tuple[bool, bool] | None] = []
        for i, n in enumerate(out):
            kind = None if n == 1 else (sa[i] == n, sb[i] == n)
            if merged and (kind is None or kind_of_group[-1] in (None, kind)):
                merged[-1].append(i)
                kind_of_group[-1] = kind_of_group[-1] or kind
            else:
                merged.append([i])
                kind_of_group.append(kind)
        if len(merged) > MAX_RANK:
            return NotImplemented

        def squash(value, lazy, shape):
            return (lazy.base if lazy is not None else value).reshape([_prod(shape[i] for i in g) for g in merged])

        small = op(squash(a, la, sa), squash(b, lb, sb), *args, **kwargs)
        return _finish(lambda: small.reshape(out), _plain(small, out))
    return handler


for _fns, _handler in (
        ((torch.Tensor.view,), _on_view),
        ((torch.Tensor.reshape, torch.reshape), _on_reshape),
        ((torch.Tensor.flatten, torch.flatten), _on_flatten),
        ((torch.Tensor.unflatten, torch.unflatten), _on_unflatten),
        ((torch.Tensor.unsqueeze, torch.unsqueeze), _on_unsqueeze),
        ((torch.Tensor.squeeze, torch.squeeze), _on_squeeze),
        ((torch.Tensor.permute, torch.permute), _on_permute),
        ((torch.Tensor.transpose, torch.transpose), _on_transpose),
        ((torch.Tensor.contiguous,), _on_contiguous),
        ((torch.Tensor.select, torch.select), _on_select),
        ((torch.Tensor.__getitem__,), _on_getitem),
        ((torch.Tensor.unbind, torch.unbind), _on_unbind),
        ((torch.Tensor.add, torch.add), _binary(torch.add)),
        ((torch.Tensor.sub, torch.sub), _binary(torch.sub)),
        ((torch.Tensor.mul, torch.mul), _binary(torch.mul)),
        ((torch.Tensor.div, torch.div), _binary(torch.div)),
        ((torch.Tensor.__rsub__,), _binary(lambda a, b: torch.sub(b, a))),
        ((torch.Tensor.__rdiv__,), _binary(lambda a, b: torch.div(b, a)))):
    for _fn in _fns:
        register_handler(_fn, VIEWS_HANDLER)(_handler)


def lower_rank_views(model: nn.Module) -> nn.Module:
    """Wrap `model` so that rank > 4 view / permute chains written inline in its forward (window
    partition, packed QKV, einops.rearrange, broadcast adds on rank-5 views) are lowered to rank
    <= 4 while the wrapper runs -- including under torch.export / litert-torch. Bit-exact.

    Only the "lower_rank_views" handler is active in this wrapper; `GpuRewriteWrapper(model)`
    applies it together with every other functional rewrite.
    """
    from .functional import GpuRewriteWrapper

    return GpuRewriteWrapper(model, include=[VIEWS_HANDLER])


# In-place ops could make what a tracked tensor is "made of" stale (a copy mutated after it was
# recorded). Any in-place call while something is tracked drops all tracking: the forward stays
# correct (the real tensors carry on), only the lowering of that chain is given up.
def _forget_on_inplace(*args, **kwargs):
    _TRACKED.clear()
    return NotImplemented


def _inplace_callables():
    names = [n for n in dir(torch.Tensor) if n.endswith("_") and not n.startswith("_")]
    names += ["__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__ipow__",
              "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"]
    found = [getattr(torch.Tensor, n) for n in names if hasattr(torch.Tensor, n)]
    found += [getattr(F, n) for n in ("relu", "relu6", "elu", "selu", "celu", "leaky_relu", "hardtanh", "hardswish",
                                      "hardsigmoid", "silu", "mish", "threshold", "rrelu", "dropout", "alpha_dropout",
                                      "dropout1d", "dropout2d", "dropout3d", "feature_alpha_dropout") if hasattr(F, n)]
    return found


for _fn in _inplace_callables():
    register_handler(_fn, VIEWS_HANDLER)(_forget_on_inplace)
