"""Wall `batch_matmul`: a BATCH_MATMUL the GPU rejects or computes wrongly.

Measured on llvmpipe, ai-edge-litert 2.3.0 (tests/toolkit/rewrites/test_batch_matmul.py):
  * a constant left operand -- `probe @ k^T` with a learned query (SigLIP's and other attention-pooling heads,
    perceiver latents), `ones @ v` after a softmax over a length-1 axis (PVT-v2) -- is rejected: 'Not supported
    batched mat mul case: non-constant tensor';
  * two runtime operands whose batch axes broadcast ([1, 1, S, d] @ [1, H, d, T], [4, 16, 8] @ [1, 8, 16]) run
    GPU-only and return wrong numbers (corr ~0.5).
A constant right operand, and runtime operands with equal batch axes, are right.

`patch_matmul_operands` (default, functional) rewrites `torch.matmul` / `@` / `torch.bmm` / `torch.einsum`:
  * constant @ runtime as (runtime^T @ constant^T)^T: the constant moves to the right. Exact to fp32 rounding
    (the same products; the sum order may differ);
  * runtime @ runtime with broadcast batch axes: the broadcast operand is copied along those axes by
    concatenation (`expand_by_cat`, no BROADCAST_TO), so both batch shapes are equal. Exact (copies only);
  * a two-operand einsum of a runtime and a constant operand (Funnel's `einsum("bind,snd->bnis", q, seg_embed)`,
    Transformer-XL-style relative attention) is written out as one matmul with the runtime operand on the left:
    torch's own einsum may order the pair either way, and put the constant left. Letters of both operands and the
    output are batch axes, of both operands only the contraction, of one operand only summed first. Exact to fp32
    rounding (the same products; the sum order may differ).
A constant is a tensor whose value `patch_fold_constants` / `patch_fold_index_math` know (parameters, buffers,
index math). `F.multi_head_attention_forward` (nn.MultiheadAttention) does its products inside one torch call that
the rewrites cannot see into; it is written out here (`multi_head_attention`) for the common options, so they can.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import Change, register
from .shared import expand_by_cat
from .einsum_axes import matmul_axes, parse
from .functional import in_active_mode, register_handler
from .shared import value_of
T = torch.Tensor


def _is_constant(t) -> bool:
    return isinstance(t, torch.Tensor) and value_of(t) is not None


def matmul_operands(a: torch.Tensor, b: torch.Tensor, product=torch.matmul):
    """a @ b with the constant on the right and equal batch axes (see the module docstring); NotImplemented when
    nothing needs changing."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.dim() < 2 or b.dim() < 2:
        return NotImplemented
    ka, kb = _is_constant(a), _is_constant(b)
    if ka and kb:
        return NotImplemented                              # folded as a whole by patch_fold_constants
    if ka and (a.dim() > 2 or b.dim() > 2):
        return product(b.transpose(-1, -2), a.transpose(-1, -2)).transpose(-1, -2)
    if ka or kb or a.dim() < 3 or b.dim() < 3:
        return NotImplemented
    batch_a, batch_b = tuple(a.shape[:-2]), tuple(b.shape[:-2])
    if batch_a == batch_b:
        return NotImplemented
    try:
        batch = tuple(torch.broadcast_shapes(batch_a, batch_b))
    except RuntimeError:
        return NotImplemented
    a = expand_by_cat(a, batch + tuple(a.shape[-2:]))
    b = expand_by_cat(b, batch + tuple(b.shape[-2:]))
    return product(a, b)


@register_handler(torch.matmul, "patch_matmul_operands")
@register_handler(T.matmul, "patch_matmul_operands")
@register_handler(T.__matmul__, "patch_matmul_operands")
def _matmul(input, other, *, out=None):
    if out is not None:
        return NotImplemented
    result = matmul_operands(input, other)
    if result is not NotImplemented and result.dim() == 4:
        from .masked_attention import tag_scores          # keep the scores visible to the attention-mask rewrite
        tag_scores(result)
    return result


@register_handler(T.__rmatmul__, "patch_matmul_operands")
def _rmatmul(self, other):
    return _matmul(other, self)


@register_handler(torch.bmm, "patch_matmul_operands")
@register_handler(T.bmm, "patch_matmul_operands")
def _bmm(input, mat2, *, out=None):
    return NotImplemented if out is not None else matmul_operands(input, mat2, torch.bmm)


@register_handler(torch.baddbmm, "patch_matmul_operands")
@register_handler(T.baddbmm, "patch_matmul_operands")
def _baddbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * (batch1 @ batch2) written out, so the product and the add each meet their own rewrites
    (BLOOM adds a constant ALiBi bias this way; a rank-3 add of a constant is `constant_operand`'s wall). Equal to
    the fused call to fp32 rounding."""
    if out is not None or not all(isinstance(t, torch.Tensor) for t in (input, batch1, batch2)):
        return NotImplemented
    from .functional import active_mode

    mode = active_mode()
    if mode is None:
        return NotImplemented
    with mode:
        product = torch.bmm(batch1, batch2)
        product = product if alpha == 1 else product * alpha
        return product + (input if beta == 1 else input * beta)


def einsum_runtime_left(equation: str, a: torch.Tensor, b: torch.Tensor, matmul=torch.matmul):
    """einsum(equation, a, b) as one matmul with the runtime operand on the left (see the module docstring); the
    operand that is constant goes right. NotImplemented unless exactly one operand is constant."""
    parsed = parse(equation, 2) if all(isinstance(t, torch.Tensor) for t in (a, b)) else None
    if parsed is None or _is_constant(a) == _is_constant(b) or max(a.dim(), b.dim()) > 4:
        return NotImplemented                       # rank-5 views are lower_rank_views' (products.py)
    (sa, sb), out = parsed
    if (len(sa), len(sb)) != (a.dim(), b.dim()) or any(len(set(s)) != len(s) for s in (sa, sb, out)):
        return NotImplemented                       # before any op: nothing is traced for a call left alone
    if _is_constant(a):
        a, b, sa, sb = b, a, sb, sa
    # a letter of one operand only, and not of the output, is summed away first
    if any(c not in sb and c not in out for c in sa):
        a, sa = a.sum([i for i, c in enumerate(sa) if c not in sb and c not in out]), \
            "".join(c for c in sa if c in sb or c in out)
    if any(c not in sa and c not in out for c in sb):
        b, sb = b.sum([i for i, c in enumerate(sb) if c not in sa and c not in out]), \
            "".join(c for c in sb if c in sa or c in out)
    axes = matmul_axes(sa, sb, out)
    if axes is None:
        return NotImplemented
    batch, left, right, inner = axes
    size = {**dict(zip(sa, a.shape)), **dict(zip(sb, b.shape))}
    n = lambda letters: math.prod(size[c] for c in letters)     # noqa: E731
    lhs = a.permute([sa.index(c) for c in batch + left + inner]).reshape(
        ([n(batch)] if batch else []) + [n(left), n(inner)])
    rhs = b.permute([sb.index(c) for c in batch + inner + right]).reshape(
        ([n(batch)] if batch else []) + [n(inner), n(right)])
    product = matmul(lhs, rhs).reshape([size[c] for c in batch + left + right])
    order = batch + left + right
    return product.permute([order.index(c) for c in out])


@register_handler(torch.einsum, "patch_matmul_operands")
def _einsum(equation, *operands):
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str) or len(operands) != 2:
        return NotImplemented
    # re-entered: the written-out product meets the other rewrites (and the constant stays right)
    return in_active_mode(einsum_runtime_left, equation, *operands)


# ------------------------------------------------------------------------------- nn.MultiheadAttention

def _mha_supported(kw: dict) -> bool:
    return (not kw.get("training") or not kw.get("dropout_p")) and kw.get("bias_k") is None and \
        kw.get("bias_v") is None and not kw.get("add_zero_attn") and kw.get("static_k") is None and \
        kw.get("static_v") is None and not kw.get("is_causal")


def multi_head_attention(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias, bias_k,  # noqa: PLR0913 - F.multi_head_attention_forward's signature
                         bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias, training=True,
                         key_padding_mask=None, need_weights=True, attn_mask=None,
                         use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                         v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                         is_causal=False):
    """F.multi_head_attention_forward written out with matmuls, for unbatched-or-(L, N, E) inputs, no bias_k /
    bias_v / zero attention / static keys, dropout off. Equal to torch's to fp32 rounding. Boolean masks are
    -inf where True, as torch does; float masks are added."""
    unbatched = query.dim() == 2
    if unbatched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = (int(d) for d in query.shape)
    src_len = int(key.shape[0])
    head_dim = embed_dim // num_heads
    if use_separate_proj_weight:
        wq, wk, wv = q_proj_weight, k_proj_weight, v_proj_weight
    else:
        wq, wk, wv = in_proj_weight[:embed_dim], in_proj_weight[embed_dim:2 * embed_dim], in_proj_weight[2 * embed_dim:]
    bq = bk = bv = None
    if in_proj_bias is not None:
        bq, bk, bv = in_proj_bias[:embed_dim], in_proj_bias[embed_dim:2 * embed_dim], in_proj_bias[2 * embed_dim:]
    q, k, v = F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)
    # [L, N, E] -> [N, H, L, D]
    q = q.reshape(tgt_len, bsz, num_heads, head_dim).permute(1, 2, 0, 3)
    k = k.reshape(src_len, bsz, num_heads, head_dim).permute(1, 2, 0, 3)
    v = v.reshape(src_len, bsz, num_heads, head_dim).permute(1, 2, 0, 3)
    scores = torch.matmul(q * math.sqrt(1.0 / float(head_dim)), k.transpose(-1, -2))     # [N, H, L, S]
    if attn_mask is not None:
        mask = attn_mask if attn_mask.dtype != torch.bool else \
            torch.zeros(attn_mask.shape, dtype=scores.dtype).masked_fill(attn_mask, float("-inf"))
        lead = (bsz, num_heads) if mask.dim() == 3 else (1, 1)
        mask = mask.reshape(*lead, tgt_len, src_len)
        scores = scores + mask
    if key_padding_mask is not None:
        kpm = key_padding_mask if key_padding_mask.dtype != torch.bool else \
            torch.zeros(key_padding_mask.shape, dtype=scores.dtype).masked_fill(key_padding_mask, float("-inf"))
        scores = scores + kpm.reshape(bsz, 1, 1, src_len)
    weights = torch.softmax(scores, dim=-1)
    out = torch.matmul(weights, v)                                                   # [N, H, L, D]
    out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)
    out = F.linear(out, out_proj_weight, out_proj_bias)
    avg = None
    if need_weights:
        avg = weights.mean(dim=1) if average_attn_weights else weights
        if unbatched:
            avg = avg.squeeze(0)
    if unbatched:
        out = out.squeeze(1)
    return out, avg


@register_handler(F.multi_head_attention_forward, "patch_matmul_operands")
def _mha(*args, **kwargs):
    names = multi_head_attention.__code__.co_varnames[:multi_head_attention.__code__.co_argcount]
    bound = dict(zip(names, args), **kwargs)
    if not _mha_supported(bound) or bound["query"].dim() not in (2, 3) or bound.get("dropout_p") and \
            bound.get("training"):
        return NotImplemented
    from .functional import active_mode

    mode = active_mode()
    if mode is None:
        return NotImplemented
    with mode:                  # the written-out products go through the rewrites, this one included
        return multi_head_attention(**bound)


@register("patch_matmul_operands", wall="batch_matmul")
def patch_matmul_operands(model: nn.Module) -> list[Change]:
    """Functional only (see the module docstring): returns no changes by itself."""
    return []
