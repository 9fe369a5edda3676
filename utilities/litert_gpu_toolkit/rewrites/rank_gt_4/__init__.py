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
  * `fold_rank5` (`fold_graph`): a rank-5 *input* (video networks) and everything after it carried at rank 4 on
    the exported graph, the input fed with its last two axes merged; `convert_for_gpu` applies it.
  * `patch_pool3d` (`pool3d`): max / average 3-D pooling as 2-D pools per depth tap (functional).

Measured with litert-torch 0.10.0: `nn.PixelShuffle` / `nn.PixelUnshuffle` already convert at rank
4 (the converter lowers them itself), so `patch_pixel_shuffle` is insurance there, not a wall
remover; window partition, packed QKV, einops patterns and the rank-5 mask add are walls
(tests/toolkit/rewrites/test_rank_gt_4.py proves each).
"""
from __future__ import annotations

from .einops import UnsupportedPatternError, parse_rearrange, rearrange, Rearrange, patch_einops
from .lowrank import MAX_RANK, VIEWS_HANDLER, lowrank_permute
from .patch_merging import space_to_depth_nhwc, PatchMergingRank4, patch_patch_merging
from .pixel_shuffle import (
    depth_to_space,
    space_to_depth,
    window_partition,
    window_reverse,
    split_packed_qkv,
    DepthToSpace,
    SpaceToDepth,
    patch_pixel_shuffle,
    PixelShuffleConvTranspose,
    pixelshuffle_to_conv_transpose,
)
from .views import lower_rank_views
from .fold_graph import Folded, NotFoldable, fold_rank5
from .pool3d import patch_pool3d, pool3d_as_pool2d
from . import products, reductions  # noqa: F401 - more handlers of the same rewrite (lower_rank_views)
from .window_attention import WindowAttentionRank4, patch_window_attention
