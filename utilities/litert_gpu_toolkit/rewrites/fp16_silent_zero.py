"""RMSNorm whose mean of squares underflows / overflows in fp16 (silent zeros): the scaled form.

Exact to fp32 rounding (a power-of-two-free rescale that cancels).
"""
from __future__ import annotations


import torch
import torch.nn as nn

from . import Change, register, set_submodule
from .fp16_overflow.norms import SafeRMSNorm, _probe_offset, _rms_eps


@register("patch_rmsnorm", wall="fp16_silent_zero")
def patch_rmsnorm(model: nn.Module, hierarchical: bool = False, distinct_squares: bool = False) -> list[Change]:
    """Replace RMS norms with SafeRMSNorm: nn.RMSNorm, and any module with a 1-D `weight` and an
    epsilon attribute (`variance_epsilon` / `eps`) whose class name contains 'RMSNorm' (HF
    LlamaRMSNorm, Qwen2RMSNorm, GemmaRMSNorm, ...). A non-torch module is replaced only after a
    probe shows it computes x * rsqrt(mean(x^2) + eps) * w (or * (1 + w)); otherwise it is left
    alone. `distinct_squares`: see `patch_safe_layernorm`."""
    changes = []
    for path, m in list(model.named_modules()):
        if not path or isinstance(m, SafeRMSNorm):
            continue
        if isinstance(m, nn.RMSNorm):
            eps = _rms_eps(m)
            new = SafeRMSNorm(m.weight, eps, ndims=len(m.normalized_shape), hierarchical=hierarchical,
                              distinct_squares=distinct_squares)
            what = f"RMSNorm{tuple(m.normalized_shape)} -> down-scaled SafeRMSNorm"
        elif "rmsnorm" in type(m).__name__.lower():
            weight = getattr(m, "weight", None)
            eps = _rms_eps(m)
            if not isinstance(weight, torch.Tensor) or weight.dim() != 1 or eps is None:
                continue
            offset = _probe_offset(m, weight, eps)
            if offset is None:
                continue
            new = SafeRMSNorm(weight, eps, ndims=1, offset=offset, hierarchical=hierarchical,
                              distinct_squares=distinct_squares)
            what = f"{type(m).__name__} -> down-scaled SafeRMSNorm" + (" (1 + weight)" if offset else "")
        else:
            continue
        set_submodule(model, path, new)
        changes.append(Change(path, what, "patch_rmsnorm", True))
    return changes
