""""lower_rank_views", continued: products and stacks of rank > 4 views.

Window attention written with einsum on (B, groups, heads, tokens, dim) views (torchvision's MaxViT), a
diffusion transformer's unpatchify written as a one-operand einsum ("nhwpqc->nchpwq", diffusers' DiT), and a
rotary embedding that interleaves halves with `torch.stack([-x2, x1], -1).reshape(x.shape)` (timm's EVA-02) each
put rank-5 / rank-6 tensors into the graph. Here:

  * a one-operand einsum that only reorders axes is the permute it spells;
  * a two-operand einsum with no repeated letter inside an operand, and `a @ b`, is one batched matmul: each
    operand's view is reordered to (batch, free, contracted) / (batch, contracted, free), merged to rank 3 and
    multiplied; the product is a view again (it comes back to rank <= 4 wherever the model reshapes it);
  * `torch.stack(ts, dim)` of equal-shaped rank-4 tensors into a rank-5 result is a rank-3 concatenation of
    their (before dim, 1, from dim) views, kept as a view;
  * `F.scaled_dot_product_attention` on rank-5 query / key / value that share their leading axes (local attention
    over blocks, (B, heads, blocks, tokens, dim): timm's NesT) runs once with every leading axis merged into the
    heads axis, (1, prod(leading), tokens, dim); the result is a view of that. A mask of rank <= 2 broadcasts the
    same way and is passed through; any other mask, dropout, or broadcast leading axes return NotImplemented.

Bound: the views, permutes, the stack and the attention's regrouping are bit-exact (the attention computes the
same rows, each on its own); a product adds the same terms as torch's einsum / matmul,
possibly in another order (fp32 rounding of a dot product of length K: relative error <= K * 2^-24). A view the
regrouping cannot merge returns NotImplemented and the call runs as written.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..einsum_axes import matmul_axes, parse
from ..registry import register_handler
from .lowrank import MAX_RANK, VIEWS_HANDLER, _prod
from .views import _finish, _Lazy, _lazy_of, _plain, _regroup


def _as_lazy(t):
    lazy = _lazy_of(t)
    if lazy is not None:
        return lazy
    if isinstance(t, torch.Tensor) and t.dim() <= MAX_RANK:
        return _plain(t, [int(n) for n in t.shape])
    return None


def _reordered(lazy: _Lazy, order: list[int]) -> _Lazy:
    groups = lazy.groups()
    return _Lazy(lazy.base, lazy.elem, tuple(lazy.perm[j] for o in order for j in groups[o]),
                 tuple(lazy.counts[o] for o in order))


def _rank3(lazy: _Lazy, order: list[int], sizes: list[int], split: tuple[int, int]):
    """The view reordered by `order`, merged into (prod of the first split[0], next split[1], the rest)."""
    moved = _reordered(lazy, order)
    a, b = split
    merged = _regroup(moved, [_prod(sizes[:a]), _prod(sizes[a:a + b]), _prod(sizes[a + b:])])
    return None if merged is None else merged.materialize()


def _product(la: _Lazy, lb: _Lazy, sa: str, sb: str, so: str, real_fn):
    """einsum(sa,sb->so) of two views as one bmm; None when it is not one."""
    axes = matmul_axes(sa, sb, so)
    if axes is None:
        return None
    size = {c: n for s, lz in ((sa, la), (sb, lb)) for c, n in zip(s, lz.shape())}
    if any(size[c] != n for s, lz in ((sa, la), (sb, lb)) for c, n in zip(s, lz.shape())):
        return None                                     # broadcasting: not handled here
    batch, free_a, free_b, summed = axes
    a3 = _rank3(la, [sa.index(c) for c in batch + free_a + summed], [size[c] for c in batch + free_a + summed],
                (len(batch), len(free_a)))
    b3 = _rank3(lb, [sb.index(c) for c in batch + summed + free_b], [size[c] for c in batch + summed + free_b],
                (len(batch), len(summed)))
    if a3 is None or b3 is None:
        return None
    small = torch.bmm(a3, b3)
    natural = batch + free_a + free_b
    lazy = _reordered(_plain(small, [size[c] for c in natural]), [natural.index(c) for c in so])
    return _finish(real_fn, lazy)


def _on_einsum(equation, *operands):
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str) or not 1 <= len(operands) <= 2:
        return NotImplemented
    parsed = parse(equation, len(operands))
    if parsed is None:
        return NotImplemented
    ins, out = parsed
    tracked = [_lazy_of(t) is not None for t in operands]
    if not any(tracked) and all(t.dim() <= MAX_RANK for t in operands) and len(out) <= MAX_RANK:
        return NotImplemented                           # nothing of rank > 4 involved
    if len(operands) == 1:
        (s,), lazy = ins, _lazy_of(operands[0])
        if lazy is None or sorted(s) != sorted(out) or len(set(s)) != len(s):
            return NotImplemented
        return _finish(lambda: torch.einsum(equation, *operands), _reordered(lazy, [s.index(c) for c in out]))
    la, lb = (_as_lazy(t) for t in operands)
    if la is None or lb is None:
        return NotImplemented
    done = _product(la, lb, ins[0], ins[1], out, lambda: torch.einsum(equation, *operands))
    return NotImplemented if done is None else done


_LETTERS = "abcdefghij"


def _on_matmul(a, b):
    la, lb = _lazy_of(a), _lazy_of(b)
    if la is None and lb is None or not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return NotImplemented
    if a.dim() < 3 or a.dim() != b.dim() or a.shape[:-2] != b.shape[:-2]:
        return NotImplemented
    batch = _LETTERS[:a.dim() - 2]
    la, lb = _as_lazy(a), _as_lazy(b)
    if la is None or lb is None:
        return NotImplemented
    done = _product(la, lb, batch + "xy", batch + "yz", batch + "xz", lambda: torch.matmul(a, b))
    return NotImplemented if done is None else done


def _on_stack(tensors, dim=0):
    tensors = list(tensors)
    if not tensors or any(not isinstance(t, torch.Tensor) or _lazy_of(t) is not None for t in tensors):
        return NotImplemented
    shape = [int(n) for n in tensors[0].shape]
    if len(shape) + 1 <= MAX_RANK or len(shape) > MAX_RANK or any(list(t.shape) != shape for t in tensors):
        return NotImplemented
    d = dim % (len(shape) + 1)
    pre, post = _prod(shape[:d]), _prod(shape[d:])
    small = torch.cat([t.reshape(pre, 1, post) for t in tensors], dim=1)
    out = shape[:d] + [len(tensors)] + shape[d:]
    return _finish(lambda: torch.stack(tensors, dim), _plain(small, out))


def _on_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kwargs):
    qkv = (query, key, value)
    if not all(isinstance(t, torch.Tensor) for t in qkv) or all(_lazy_of(t) is None for t in qkv):
        return NotImplemented
    lead = [int(n) for n in query.shape[:-2]]
    if (query.dim() <= MAX_RANK or dropout_p or kwargs.get("enable_gqa") or any(t.dim() != query.dim() for t in qkv)
            or any([int(n) for n in t.shape[:-2]] != lead for t in qkv)):
        return NotImplemented
    if isinstance(attn_mask, torch.Tensor) and (attn_mask.dim() > 2 or _lazy_of(attn_mask) is not None):
        return NotImplemented
    merged = []
    for t in qkv:
        lazy = _regroup(_as_lazy(t), [1, _prod(lead), int(t.shape[-2]), int(t.shape[-1])])
        if lazy is None:
            return NotImplemented
        merged.append(lazy.materialize())
    small = F.scaled_dot_product_attention(*merged, attn_mask=attn_mask, is_causal=is_causal, scale=scale)
    shape = lead + [int(n) for n in small.shape[-2:]]
    return _finish(lambda: F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal,
                                                          scale=scale, **kwargs), _plain(small, shape))


register_handler(torch.einsum, VIEWS_HANDLER)(_on_einsum)
register_handler(F.scaled_dot_product_attention, VIEWS_HANDLER)(_on_attention)
for _fn in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__):
    register_handler(_fn, VIEWS_HANDLER)(_on_matmul)
register_handler(torch.stack, VIEWS_HANDLER)(_on_stack)
