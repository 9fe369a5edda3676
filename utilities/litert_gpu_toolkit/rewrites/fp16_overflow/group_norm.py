"""GroupNorm in the down-scaled domain of `norms` (rewrite `patch_group_norm`, exact to fp32 rounding).

Two walls at once: the stock GroupNorm lowering emits a BROADCAST_TO, which the GPU rejects, and its variance
overflows fp16 for activations in the hundreds. The statistics are taken over [N, G, C/G, L] with the row scale
and hierarchical means of `norms._normalise`; the per-channel weight and bias follow (either may be None).

Where it applies: a module whose forward is nn.GroupNorm's own is replaced by `SafeGroupNorm`. A subclass with
its own forward is left in place -- it may do more than normalise (Hugging Face BiT's BitGroupNormActivation
applies its activation after the norm: replaced, the ReLU was lost and the GPU output had corr 0.45) -- and its
`F.group_norm` call is computed by the same formula through a functional handler instead (timm's GroupNorm1 and
BiT alike), as is any F.group_norm written in a forward.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import Change, named_modules_of, register, set_submodule
from ..functional import in_active_mode, register_handler
from .norms import _affine, _normalise


def safe_group_norm(x: torch.Tensor, groups: int, weight=None, bias=None, eps: float = 1e-5) -> torch.Tensor:
    """F.group_norm(x, groups, weight, bias, eps) in the down-scaled form (module docstring)."""
    n, c = int(x.shape[0]), int(x.shape[1])
    spatial = [int(d) for d in x.shape[2:]]
    g = x.reshape(n, groups, c // groups, math.prod(spatial))
    y = _normalise(g, (2, 3), float(eps), hierarchical=True).reshape(x.shape)
    return _affine(y, weight, bias, [1, c] + [1] * len(spatial))


class SafeGroupNorm(nn.Module):
    """nn.GroupNorm as `safe_group_norm` (no BROADCAST_TO, no fp16 overflow in the variance)."""

    def __init__(self, gn: nn.GroupNorm):
        super().__init__()
        self.groups = int(gn.num_groups)
        self.eps = float(gn.eps)
        self.weight = gn.weight if gn.affine else None
        self.bias = gn.bias if gn.affine else None

    def forward(self, x):
        return safe_group_norm(x, self.groups, self.weight, self.bias, self.eps)


@register_handler(F.group_norm, "patch_group_norm")
def _group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    if not isinstance(input, torch.Tensor) or input.dim() < 2 or int(input.shape[1]) % int(num_groups):
        return NotImplemented
    # its means run through the other rewrites, as SafeGroupNorm's do inside the wrapper
    return in_active_mode(safe_group_norm, input, int(num_groups), weight, bias, eps)


@register("patch_group_norm", wall="fp16_overflow")
def patch_group_norm(model: nn.Module) -> list[Change]:
    """Replace every nn.GroupNorm that runs nn.GroupNorm's own forward with SafeGroupNorm (subclasses with a
    forward of their own: the functional handler, see the module docstring)."""
    changes = []
    for path, m in named_modules_of(model, nn.GroupNorm):
        if not path or type(m).forward is not nn.GroupNorm.forward:
            continue
        set_submodule(model, path, SafeGroupNorm(m))
        changes.append(Change(path, f"GroupNorm({m.num_groups}, {m.num_channels}) -> SafeGroupNorm",
                              "patch_group_norm", True))
    return changes
