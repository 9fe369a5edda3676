"""Swin / timm patch merging (a stride-2 gather over a rank-6 view) as a rank-4 space-to-depth.

Bit-exact: pure data movement.
"""
from __future__ import annotations


import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import Change, register, set_submodule
from .lowrank import lowrank_permute


# ---------------------------------------------------------------------------------------------
# Swin patch merging
# ---------------------------------------------------------------------------------------------

def space_to_depth_nhwc(x: torch.Tensor) -> torch.Tensor:
    """(B, H, W, C) -> (B, H/2, W/2, 4C) in Swin's order [x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2],
    x[1::2, 1::2]] (channel = (dw * 2 + dh) * C + c), at rank <= 4. Bit-exact."""
    b, h, w, c = (int(s) for s in x.shape)
    # elementary (b, h', dh, w', dw, c) -> (b, h', w', dw, dh, c)
    return lowrank_permute(x, (b, h // 2, 2, w // 2, 2, c), (0, 1, 3, 4, 2, 5), (b, h // 2, w // 2, 4 * c))


class PatchMergingRank4(nn.Module):
    """Swin patch merging (2x2 neighbourhood -> 4C channels -> norm / Linear(4C, 2C)) at rank <= 4.

    Handles (B, H*W, C) input with a stored `input_resolution` (original Swin) and (B, H, W, C)
    input (timm / torchvision, odd sizes zero-padded like they do), norm before (v1) or after (v2)
    the reduction. Bit-exact in the data movement; norm and Linear are the original modules.
    """

    def __init__(self, merge: nn.Module, norm_first: bool):
        super().__init__()
        self.reduction = merge.reduction
        self.norm = merge.norm
        self.norm_first = norm_first
        self.input_resolution = getattr(merge, "input_resolution", None)

    def forward(self, x):
        flat = x.dim() == 3
        if flat:
            h, w = self.input_resolution
            x = x.reshape(x.shape[0], h, w, x.shape[-1])
        b, h, w, c = (int(s) for s in x.shape)
        if h % 2 or w % 2:
            x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
        x = space_to_depth_nhwc(x)
        if flat:
            x = x.reshape(b, -1, 4 * c)
        if self.norm_first:
            return self.reduction(self.norm(x))
        return self.norm(self.reduction(x))


def _merge_layout(m: nn.Module) -> bool | None:
    """True: norm before reduction (Swin v1), False: after (Swin v2), None: not a patch merging."""
    red, norm = getattr(m, "reduction", None), getattr(m, "norm", None)
    if not type(m).__name__.endswith("PatchMerging") or not isinstance(red, nn.Linear) or norm is None:
        return None
    if red.in_features % 4:
        return None
    shape = tuple(getattr(norm, "normalized_shape", ()))
    if shape == (red.in_features,):
        return True
    if shape == (red.out_features,):
        return False
    return None


@register("patch_patch_merging", wall="rank_gt_4")
def patch_patch_merging(model: nn.Module) -> list[Change]:
    """Swin-style `*PatchMerging` modules (reduction: Linear(4C, .), norm over 4C or over the
    output) whose forward takes just x -> `PatchMergingRank4`. Bit-exact.

    Measured: the original Swin form (x[:, 0::2, 0::2, :] slices + cat) converts to STRIDED_SLICE
    and runs; timm's reshape(B, H/2, 2, W/2, 2, C).permute(...) form is a rank-6 wall. Both are
    replaced by the same rank-4 form.
    """
    import inspect

    changes = []
    for path, m in list(model.named_modules()):
        if not path:
            continue
        norm_first = _merge_layout(m)
        if norm_first is None:
            continue
        params = [p for p in inspect.signature(m.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
        if len(params) != 1:
            continue
        set_submodule(model, path, PatchMergingRank4(m, norm_first))
        changes.append(Change(path, f"{type(m).__name__} -> rank-4 space-to-depth + "
                                    f"{'norm, reduction' if norm_first else 'reduction, norm'}",
                              "patch_patch_merging", True))
    return changes
