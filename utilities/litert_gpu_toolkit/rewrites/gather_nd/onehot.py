"""torch.gather and integer-tensor indexing as one-hot MUL + SUM, no GATHER_ND.

Exact: each output is one product with 1.0 plus zeros.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from .. import Change, register
from ..functional import register_handler


# ---------------------------------------------------------------------------------------------
# torch.gather with a runtime index (HF buffered token-type ids, position lookups)
# ---------------------------------------------------------------------------------------------

GATHER_MAX_ELEMENTS = 1 << 20


def gather_onehot(input: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    """torch.gather(input, dim, index) as a one-hot product: no GATHER / GATHER_ND.

    out[..., s, ...] = sum_n input[..., n, ...] * (index[..., s, ...] == n), computed in float32 with
    EQUAL + one BATCH_MATMUL and cast back. Exactly one term is non-zero, so the result is exact for
    finite inputs (integers below 2^24 in magnitude: token types, positions, ids); a non-finite entry
    elsewhere on the gathered axis would turn its row into NaN (0 * inf). Index values outside
    [0, n) give 0 where torch raises."""
    dim = dim % input.dim()
    n = int(input.shape[dim])
    src = input.movedim(dim, -1).to(torch.float32)
    idx = index.movedim(dim, -1)
    if src.shape[:-1] != idx.shape[:-1]:
        src = src[tuple(slice(0, int(s)) for s in idx.shape[:-1])]
    onehot = (idx.unsqueeze(-1) == torch.arange(n, dtype=idx.dtype)).to(torch.float32)   # [..., S, n]
    out = torch.matmul(onehot, src.unsqueeze(-1)).squeeze(-1)
    return out.to(input.dtype).movedim(-1, dim)


def _gather_applies(input, dim, index) -> bool:
    return (
        isinstance(input, torch.Tensor)
        and isinstance(index, torch.Tensor)
        and isinstance(dim, int)
        and 1 <= input.dim() <= 3
        and index.dim() == input.dim()
        and not input.dtype.is_complex
        and index.numel() * int(input.shape[dim]) <= GATHER_MAX_ELEMENTS
        and all(int(i) <= int(s) for d, (i, s) in enumerate(zip(index.shape, input.shape)) if d != dim % input.dim())
    )


@register_handler(torch.gather, "patch_gather_onehot")
@register_handler(torch.Tensor.gather, "patch_gather_onehot")
def _gather_handler(input, dim, index, *, sparse_grad=False, out=None):
    if out is not None or not _gather_applies(input, dim, index):
        return NotImplemented
    return gather_onehot(input, dim, index)


@register("patch_gather_onehot", wall="gather_nd")
def patch_gather_onehot(model: nn.Module) -> list[Change]:
    """torch.gather has no module form: the rewrite happens inside `GpuRewriteWrapper` /
    `convert_for_gpu` (handler "patch_gather_onehot") or by calling `gather_onehot`."""
    return []


def _leading_index(src, key):
    """The integer index tensors of `src[key]` when `key` is advanced indexing on the leading dims only
    (`src[i]`, `src[i, j]`, `src[i, j, :]`, ...: tensors first, then only full slices), else None."""
    key = key if isinstance(key, tuple) else (key,)
    if not isinstance(src, torch.Tensor) or src.dtype.is_complex:
        return None
    k = 0
    while k < len(key) and isinstance(key[k], torch.Tensor):
        if key[k].dtype not in (torch.int64, torch.int32):
            return None
        k += 1
    if k == 0 or k > src.dim() or not all(r == slice(None) or r is Ellipsis for r in key[k:]):
        return None
    return list(key[:k])


def index_onehot(src: torch.Tensor, indices: list[torch.Tensor]) -> torch.Tensor:
    """`src[i0, i1, ..., ik-1]` (integer tensors on the leading dims, broadcast together) as a one-hot
    product: no GATHER / GATHER_ND.

    The indices are folded into one flat index f = i0 * s1 * ... + i1 * s2 * ... + ... over the leading
    N = s0 * ... * sk-1 rows; out = sum_n (f == n) * src.reshape(N, -1)[n], in float32, cast back (bool:
    > 0.5). Exactly one term is non-zero, so the result is exact for finite values (integers below 2^24
    in magnitude, bools); a non-finite row of `src` would turn every output into NaN (0 * inf).
    Negative indices wrap as in torch; out-of-range ones give 0 where torch raises. This is the
    `padding_mask[batch_idx, kv_idx]` of Hugging Face's attention-mask building."""
    k = len(indices)
    lead = [int(d) for d in src.shape[:k]]
    rest = src.shape[k:]
    flat = None
    for d, idx in enumerate(indices):
        idx = idx.to(torch.int32)
        idx = idx + (idx < 0).to(torch.int32) * lead[d]
        stride = math.prod(lead[d + 1 :])
        term = idx * stride if stride != 1 else idx
        flat = term if flat is None else flat + term
    n = math.prod(lead)
    table = src.reshape(n, -1).to(torch.float32)  # [N, R]
    shape = flat.shape
    # one 2-D one-hot [rows, N] whatever the index rank (a rank-4 index would make a rank-5 one-hot)
    onehot = (flat.reshape(-1, 1) == torch.arange(n, dtype=torch.int32)).to(torch.float32)
    # MUL + SUM, not a matmul: the GPU delegate refuses BATCH_MATMUL of two runtime tensors at this rank
    out = (onehot.unsqueeze(-1) * table.unsqueeze(0)).sum(1).reshape(*shape, *rest)
    return out > 0.5 if src.dtype == torch.bool else out.to(src.dtype)


@register_handler(torch.Tensor.__getitem__, "patch_index_onehot")
def _index_handler(src, key):
    indices = _leading_index(src, key)
    if indices is None:
        return NotImplemented
    try:
        shape = torch.broadcast_shapes(*(i.shape for i in indices))
    except RuntimeError:
        return NotImplemented
    n = math.prod(int(s) for s in src.shape[: len(indices)])
    rows = math.prod(int(s) for s in shape)
    width = src.numel() // max(n, 1)
    if n == 0 or rows * n * max(width, 1) > GATHER_MAX_ELEMENTS:
        return NotImplemented
    return index_onehot(src, list(indices))


@register("patch_index_onehot", wall="gather_nd", default=False)
def patch_index_onehot(model: nn.Module) -> list[Change]:
    """Indexing with integer tensors has no module form: the rewrite happens inside `GpuRewriteWrapper` /
    `convert_for_gpu(..., include=["patch_index_onehot"])` (handler "patch_index_onehot") or by calling
    `index_onehot`. Opt-in: it was added after the zoo's measured run, and it also rewrites indexing of
    constant tables (e.g. relative-position biases) that the converter would otherwise fold."""
    return []
