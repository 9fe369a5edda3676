"""The general lowering: a reshape -> permute -> reshape chain done with tensors of rank <= 4.

Bit-exact: pure data movement.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch


MAX_RANK = 4
VIEWS_HANDLER = "lower_rank_views"


def _prod(values) -> int:
    return int(math.prod(int(v) for v in values))


# ---------------------------------------------------------------------------------------------
# the general lowering
# ---------------------------------------------------------------------------------------------

def _canonical(shape: Sequence[int], perm: Sequence[int]) -> tuple[list[int], list[int]]:
    """Drop size-1 axes, then merge axes that are neighbours both before and after the permutation."""
    keep = [i for i in range(len(shape)) if shape[i] != 1]
    renum = {old: new for new, old in enumerate(keep)}
    sizes = [int(shape[i]) for i in keep]
    order = [renum[p] for p in perm if shape[p] != 1]
    # runs of consecutive input axes that stay consecutive in the output become one axis
    runs: list[list[int]] = []
    for axis in order:
        if runs and runs[-1][-1] + 1 == axis:
            runs[-1].append(axis)
        else:
            runs.append([axis])
    by_start = sorted(runs, key=lambda run: run[0])
    merged_sizes = [_prod(sizes[a] for a in run) for run in by_start]
    index_of = {run[0]: i for i, run in enumerate(by_start)}
    merged_order = [index_of[run[0]] for run in runs]
    return merged_sizes, merged_order


def _swap_blocks(y: torch.Tensor, prefix: int, a: int, b: int, suffix: int) -> torch.Tensor:
    """View flat data as (prefix, a, b, suffix) and exchange the a and b blocks; drops size-1 ends."""
    dims = [prefix, a, b, suffix]
    lead, tail = prefix != 1, suffix != 1
    view = [d for d, keep in zip(dims, (lead, True, True, tail)) if keep]
    i = 1 if lead else 0
    order = list(range(len(view)))
    order[i], order[i + 1] = order[i + 1], order[i]
    return y.reshape(view).permute(order)


def lowrank_permute(x: torch.Tensor, view_shape: Sequence[int], perm: Sequence[int],
                    out_shape: Sequence[int] | None = None) -> torch.Tensor:
    """`x.reshape(view_shape).permute(perm).reshape(out_shape)` without any tensor above rank 4.

    `view_shape` may have any rank; `out_shape` (default: the permuted view shape) must have rank
    <= 4. Each step moves the longest run of axes that is already in output order to its place
    with one rank-4 transpose, so the chain has at most (number of merged axes - 1) transposes.
    Bit-exact: only data movement.
    """
    view_shape = [int(s) for s in view_shape]
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(len(view_shape))):
        raise ValueError(f"perm {perm} is not a permutation of {len(view_shape)} axes")
    if _prod(view_shape) != x.numel():
        raise ValueError(f"view shape {view_shape} does not match {x.numel()} elements")
    if out_shape is None:
        out_shape = [view_shape[p] for p in perm]
    out_shape = [int(s) for s in out_shape]
    if len(out_shape) > MAX_RANK:
        raise ValueError(f"output shape {out_shape} has rank {len(out_shape)} > {MAX_RANK}")
    sizes, order = _canonical(view_shape, perm)
    if len(sizes) <= MAX_RANK:
        y = x.reshape(sizes) if sizes else x.reshape(-1)
        if order != sorted(order):
            y = y.permute(order)
        return y.reshape(out_shape)
    current = list(range(len(sizes)))
    y = x
    i = 0
    while i < len(order):
        k = current.index(order[i])
        if k == i:
            i += 1
            continue
        run = 1
        while i + run < len(order) and k + run < len(current) and current[k + run] == order[i + run]:
            run += 1
        prefix = _prod(sizes[a] for a in current[:i])
        block_a = _prod(sizes[a] for a in current[i:k])
        block_b = _prod(sizes[a] for a in current[k:k + run])
        suffix = _prod(sizes[a] for a in current[k + run:])
        y = _swap_blocks(y, prefix, block_a, block_b, suffix)
        current = current[:i] + current[k:k + run] + current[i:k] + current[k + run:]
        i += run
    return y.reshape(out_shape)
