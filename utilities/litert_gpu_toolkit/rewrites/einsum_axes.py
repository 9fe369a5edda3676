"""A two-operand einsum read as one batched matmul: which letters are batch, free and contracted axes.

Shared by `lower_rank_views` (rank-5 products, rank_gt_4/products.py) and `patch_matmul_operands` (a constant
operand moved right, batch_matmul.py): both write einsum(sa,sb->so) as (batch, free_a, summed) @ (batch, summed,
free_b), then reorder the product to `so`.
"""
from __future__ import annotations


def parse(equation: str, operands: int) -> tuple[list[str], str] | None:
    """(input subscripts, output subscript) of an einsum with an explicit output and no ellipsis, or None."""
    eq = equation.replace(" ", "")
    if "..." in eq or "->" not in eq:
        return None
    lhs, out = eq.split("->")
    ins = lhs.split(",")
    return (ins, out) if len(ins) == operands else None


def matmul_axes(sa: str, sb: str, so: str) -> tuple[list[str], list[str], list[str], list[str]] | None:
    """(batch, free_a, free_b, summed) letters of einsum(sa,sb->so), each list in output / `sa` order; None when a
    letter repeats within a subscript, the output has a letter no operand has, or a letter of one operand only is
    summed away (sum it first)."""
    if any(len(set(s)) != len(s) for s in (sa, sb, so)) or set(so) - set(sa) - set(sb):
        return None
    if any(c not in so for c in sa if c not in sb) or any(c not in so for c in sb if c not in sa):
        return None
    batch = [c for c in so if c in sa and c in sb]
    free_a = [c for c in so if c in sa and c not in sb]
    free_b = [c for c in so if c in sb and c not in sa]
    summed = [c for c in sa if c in sb and c not in so]
    return batch, free_a, free_b, summed
