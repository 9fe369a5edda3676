"""Wall `masked_attention`: an additive mask / position bias on attention scores, computed wrongly on the GPU.

On the desktop GPU (llvmpipe, ai-edge-litert 2.3.0) a rank-4 ADD of a constant (folded) operand onto
attention scores -- `scores + causal_mask` in every HF decoder (Llama, Qwen2, Mistral, Gemma, Phi-3),
`scores += position_bias` in T5 -- compiles GPU-only and returns wrong numbers in fp16 AND fp32
(corr 0.33 on a [1, 4, 16, 16] toy, 0.90 on a 2-layer Llama). The same ADD with both operands at
rank 3 is right, and so is a rank-4 ADD of two runtime tensors.

`patch_attention_bias_add` tags the output of a rank-4 matmul (the scores) and follows it through
scaling by a number or a per-head scale, tanh soft-capping and float casts; an ADD of a tagged rank-4
tensor [B, H, S, K] and a rank-4 operand that broadcasts over the first two axes (shape [1|B, 1|H, S, K] with
B * H or 1 rows) is done at rank 3 -- [B * H, S, K] + [1, S, K] for a shared mask, [1, B*H*S, K] +
[1, B*H*S, K] for a per-head bias (a per-head [B*H, S, K] constant was still wrong) -- and
reshaped back. Exact: the same sums,
only the view changes. Other adds (conv residuals, ...) are never touched. `F.scaled_dot_product_attention`
with a constant mask (one that depends on no input -- transformers 5.x folds the causal mask of a
cache-less LM to one -- or is_causal) is written out at rank 3 (`sdpa_rank3`, equal to fp32 rounding);
with a runtime mask or none it is left fused. Functional only: active inside `GpuRewriteWrapper` /
`convert_for_gpu`.
"""
from __future__ import annotations

import math
import numbers
import weakref

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import Change, register
from .functional import Observed, register_handler


# id -> tensor, weakly held; membership is by identity (a tensor's == is elementwise)
_SCORES: "weakref.WeakValueDictionary[int, torch.Tensor]" = weakref.WeakValueDictionary()


def _tag(t):
    if isinstance(t, torch.Tensor) and t.dim() == 4 and t.dtype.is_floating_point:
        _SCORES[id(t)] = t
    return t


tag_scores = _tag          # for rewrites that compute attention scores in another way (rewrites.batch_matmul)


def _tagged(t) -> bool:
    return isinstance(t, torch.Tensor) and _SCORES.get(id(t)) is t


def add_at_rank3(scores: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """scores + bias for scores [B, H, S, K] and bias [b, h, S, K] (b in {1, B}, h in {1, H}, b*h in
    {1, B*H}; a rank-2/3 bias counts as [1, .., S, K]), as a rank-3 ADD; the result is reshaped back to
    [B, H, S, K]."""
    b_, h_, s_, k_ = (int(d) for d in scores.shape)
    if bias.dim() < 4:
        bias = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))
    rows = int(bias.shape[0]) * int(bias.shape[1])
    if rows == 1:                       # one [S, K] bias for every head: [B*H, S, K] + [1, S, K]
        out = scores.reshape(b_ * h_, s_, k_) + bias.reshape(1, s_, k_)
    else:                               # a bias per head: both as [1, B*H*S, K] (measured right on llvmpipe;
        out = scores.reshape(1, b_ * h_ * s_, k_) + bias.reshape(1, rows * s_, k_)   # [B*H, S, K] was not)
    return out.reshape(b_, h_, s_, k_)


def _applies(scores, bias) -> bool:
    if not (isinstance(bias, torch.Tensor) and 2 <= bias.dim() <= 4 and bias.dtype.is_floating_point):
        return False
    if bias.dim() < 4:                  # [H, S, K] (LeViT's per-head bias) or [S, K]: broadcast as [1, H, S, K]
        bias = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))
    if tuple(bias.shape[2:]) != tuple(scores.shape[2:]):
        return False
    b, h = int(bias.shape[0]), int(bias.shape[1])
    B, H = int(scores.shape[0]), int(scores.shape[1])
    return b in (1, B) and h in (1, H) and b * h in (1, B * H)


def _add_handler(input, other, *, alpha=1, out=None):
    if out is not None or alpha != 1:
        return NotImplemented
    for scores, bias in ((input, other), (other, input)):
        if _tagged(scores) and _applies(scores, bias):
            return _tag(add_at_rank3(scores, bias))
    return NotImplemented


def _radd_handler(self, other):
    return _add_handler(other, self)


def _iadd_handler(self, other, *, alpha=1):
    if _tagged(self) and _applies(self, other) and alpha == 1:
        return _tag(add_at_rank3(self, other))       # a new tensor: the caller rebinds `x += y`'s name
    return NotImplemented


register_handler(torch.add, "patch_attention_bias_add")(_add_handler)
register_handler(torch.Tensor.add, "patch_attention_bias_add")(_add_handler)
register_handler(torch.Tensor.__add__, "patch_attention_bias_add")(_add_handler)
register_handler(torch.Tensor.__radd__, "patch_attention_bias_add")(_radd_handler)
register_handler(torch.Tensor.__iadd__, "patch_attention_bias_add")(_iadd_handler)


@register_handler(torch.matmul, "patch_attention_bias_add")
@register_handler(torch.Tensor.matmul, "patch_attention_bias_add")
@register_handler(torch.Tensor.__matmul__, "patch_attention_bias_add")
def _matmul_handler(input, other, *, out=None):
    if out is not None or not (isinstance(input, torch.Tensor) and isinstance(other, torch.Tensor)
                               and input.dim() == 4 and other.dim() == 4):
        return NotImplemented
    return Observed(_tag(torch.matmul(input, other)))


def _scalar(v) -> bool:
    return isinstance(v, numbers.Number) and not isinstance(v, bool)


def _per_head(other, scores) -> bool:
    """A tensor that scales whole score maps: it broadcasts over the last two axes (Swin-v2's per-head logit
    scale [H, 1, 1])."""
    return isinstance(other, torch.Tensor) and other.dim() <= scores.dim() and \
        all(int(d) == 1 for d in other.shape[-2:]) and other.dim() >= 2


def _follow(fn):
    """Keep the tag through scaling (x * c, x / c) of a tagged tensor by a number or a per-head scale."""
    def handler(input, other, *args, **kwargs):
        if _tagged(input) and (_scalar(other) or _per_head(other, input)) and not args and not kwargs:
            return Observed(_tag(fn(input, other)))
        return NotImplemented
    return handler


for _f in (torch.mul, torch.Tensor.mul, torch.Tensor.__mul__):
    register_handler(_f, "patch_attention_bias_add")(_follow(torch.mul))
for _f in (torch.div, torch.Tensor.div, torch.Tensor.__truediv__):
    register_handler(_f, "patch_attention_bias_add")(_follow(torch.div))


@register_handler(torch.tanh, "patch_attention_bias_add")
@register_handler(torch.Tensor.tanh, "patch_attention_bias_add")
def _tanh(input):
    if _tagged(input):
        return Observed(_tag(torch.tanh(input)))
    return NotImplemented


@register_handler(torch.Tensor.to, "patch_attention_bias_add")
@register_handler(torch.Tensor.float, "patch_attention_bias_add")
def _to(self, *args, **kwargs):
    if _tagged(self):
        out = torch.Tensor.to(self, *args, **kwargs) if args or kwargs else self.float()
        return Observed(_tag(out) if isinstance(out, torch.Tensor) else out)
    return NotImplemented


def sdpa_rank3(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """F.scaled_dot_product_attention written out -- softmax(q @ k^T * scale + bias) @ v -- with the bias
    added at rank 3 (`add_at_rank3`): a constant mask inside the fused op is the rank-4 ADD of a folded
    constant that the GPU computes wrongly. Equal to the fused op to fp32 rounding (the order of the
    scaling and the sums may differ); a boolean mask or is_causal is the bias log(keep) (0 / -inf),
    as in torch's reference form. The softmax is `safe_softmax`: a fully masked row of a finfo.min mask is
    uniform as in torch (NaN on the fp16 GPU otherwise). dropout_p must be 0."""
    from .shared import repeat_kv_cat
    from .fp16_overflow.softmax import safe_softmax
    from .shared import constant, real_values, value_of
    if dropout_p:
        raise ValueError("dropout_p must be 0 (eval)")
    e, L, S = int(query.shape[-1]), int(query.shape[-2]), int(key.shape[-2])
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        n_rep = int(query.shape[-3]) // int(key.shape[-3])
        key, value = repeat_kv_cat(key, n_rep), repeat_kv_cat(value, n_rep)
    # the layout of HF's eager attention, which converts to a GPU-correct graph: rank-4 scores, the bias
    # added at rank 3, softmax and the value matmul at rank 4 (a rank-3 softmax / value matmul was matched
    # back into a rank-4 ADD of the constant by the converter)
    scores = torch.matmul(query, key.transpose(-2, -1)) * (1.0 / math.sqrt(e) if scale is None else scale)
    known = value_of(attn_mask) if attn_mask is not None else None
    with real_values():
        bias = torch.zeros(1, 1, L, S, dtype=scores.dtype)
        if is_causal:
            bias = torch.log(torch.ones(L, S, dtype=torch.bool).tril().to(scores.dtype)).reshape(1, 1, L, S)
        if known is not None:
            kb = torch.log(known.to(scores.dtype)) if known.dtype == torch.bool else known.to(scores.dtype)
            bias = bias + kb.reshape((1,) * (4 - kb.dim()) + tuple(kb.shape))
    bias = constant(bias)
    if attn_mask is not None and known is None:
        runtime = torch.log(attn_mask.to(scores.dtype)) if attn_mask.dtype == torch.bool else attn_mask
        scores = scores + runtime.reshape((1,) * (4 - runtime.dim()) + tuple(runtime.shape))
    scores = add_at_rank3(scores, bias) if _applies(scores, bias) else scores + bias
    return torch.matmul(safe_softmax(scores, -1), value)


@register_handler(F.scaled_dot_product_attention, "patch_attention_bias_add")
def _sdpa_handler(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Only where the fused op would add a constant mask (a mask that depends on no input, or is_causal)."""
    from .shared import value_of
    constant_mask = is_causal or (isinstance(attn_mask, torch.Tensor) and value_of(attn_mask) is not None)
    if dropout_p or not constant_mask or query.dim() != 4 or key.dim() != 4 or (
            attn_mask is not None and attn_mask.dim() > 4):
        return NotImplemented
    return sdpa_rank3(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


@register("patch_attention_bias_add", wall="masked_attention")
def patch_attention_bias_add(model: nn.Module) -> list[Change]:
    """Functional only (see the module docstring): returns no changes by itself."""
    return []
# ---------------------------------------------------------------------------------------------
# masked attention
# ---------------------------------------------------------------------------------------------

def expand_attention_mask(mask: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, 1, S, S] additive mask -> [B, H, S, S] by concatenation (no BROADCAST_TO), so the ADD
    onto the BATCH_MATMUL scores has equal shapes. A constant mask folds into one [B, H, S, S]
    constant. Masks already [B, H, S, S] are returned unchanged."""
    if mask.dim() != 4:
        raise ValueError(f"expected a rank-4 mask [B, 1, S, S], got shape {tuple(mask.shape)}")
    if int(mask.shape[1]) == num_heads:
        return mask
    if int(mask.shape[1]) != 1:
        raise ValueError(f"mask head axis is {mask.shape[1]}, expected 1 or {num_heads}")
    return torch.cat([mask] * num_heads, dim=1)


def expand_mask_array(mask: np.ndarray, num_heads: int) -> np.ndarray:
    """Host side: the same expansion for a mask fed to the model as an input."""
    mask = np.asarray(mask)
    if mask.shape[1] == num_heads:
        return mask
    return np.ascontiguousarray(np.repeat(mask, num_heads, axis=1))


