"""Window attention (Swin-style) with every intermediate at rank <= 4.

Exact to fp32 rounding (the same products and sums, regrouped).
"""
from __future__ import annotations

import inspect
import math

import torch
import torch.nn as nn

from .. import Change, register, set_submodule
from .pixel_shuffle import split_packed_qkv


# ---------------------------------------------------------------------------------------------
# Swin window attention
# ---------------------------------------------------------------------------------------------

def _looks_like_window_attention(m: nn.Module) -> bool:
    if not all(hasattr(m, a) for a in ("qkv", "proj", "num_heads", "relative_position_bias_table",
                                          "relative_position_index")):
        return False
    if hasattr(m, "logit_scale") or hasattr(m, "cpb_mlp"):       # Swin v2 cosine attention: different math
        return False
    if hasattr(m, "shift_size"):      # torchvision's: takes [B, H, W, C] and partitions (and shifts) itself
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
