"""Wall `split`: Tensor.chunk / torch.split lower to SPLIT, rejected by the GPU.

`patch_chunk` spells them as plain slices (`chunk_slices`, `split_slices`): exact.
"""
from __future__ import annotations


import torch
from torch import nn

from . import Change, register
from .functional import register_handler
from .scoping import _is_number, _replace_modules, _scalar_value, scope_rewrites, scoped_rewrites  # noqa: F401


# ------------------------------------------------------------------------------------ SPLIT

def split_slices(x: torch.Tensor, split_size_or_sections, dim: int = 0) -> tuple[torch.Tensor, ...]:
    """torch.split as explicit slices (narrow -> SLICE). Bit-exact."""
    n = x.shape[dim]
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        sizes = [min(size, n - i) for i in range(0, n, size)] or [0]
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n:
            raise ValueError(f"split sizes {sizes} do not add up to {n}")
    out, start = [], 0
    for s in sizes:
        out.append(x.narrow(dim, start, s))
        start += s
    return tuple(out)


def chunk_slices(x: torch.Tensor, chunks: int, dim: int = 0) -> tuple[torch.Tensor, ...]:
    """Tensor.chunk as explicit slices, with chunk's sizes (ceil(n / chunks) each, fewer chunks if needed)."""
    n = x.shape[dim]
    size = max(1, -(-n // chunks))
    return split_slices(x, size, dim)


@register_handler(torch.chunk, "patch_chunk")
@register_handler(torch.Tensor.chunk, "patch_chunk")
def _chunk(input, chunks, dim=0):
    return chunk_slices(input, chunks, dim)


@register_handler(torch.split, "patch_chunk")
@register_handler(torch.Tensor.split, "patch_chunk")
def _split(tensor, split_size_or_sections, dim=0):
    if not (isinstance(split_size_or_sections, int) or all(isinstance(s, int) for s in split_size_or_sections)):
        return NotImplemented
    return split_slices(tensor, split_size_or_sections, dim)


@register("patch_chunk", wall="split")
def patch_chunk(model: nn.Module, *, functional: bool = True) -> list[Change]:
    """Tensor.chunk / split / torch.split -> explicit slices (SLICE, never SPLIT). Bit-exact.

    litert-torch 0.10.0 already lowers chunk / split to SLICE; the rewrite pins that for converters that
    emit SPLIT (GPU-rejected). Functional only: scopes the handler on `model.forward`.
    """
    return [scope_rewrites(model, ["patch_chunk"])] if functional else []
