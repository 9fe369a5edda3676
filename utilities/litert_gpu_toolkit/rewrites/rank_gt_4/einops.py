"""einops.rearrange patterns and `Rearrange` layers at rank <= 4.

Bit-exact: pure data movement.
"""
from __future__ import annotations

import re
from typing import Sequence

import torch
import torch.nn as nn

from .. import Change, named_modules_of, register, set_submodule
from .lowrank import MAX_RANK, _prod, lowrank_permute


# ---------------------------------------------------------------------------------------------
# einops rearrange
# ---------------------------------------------------------------------------------------------

class UnsupportedPatternError(ValueError):
    """An einops pattern that cannot be lowered to rank <= 4 (the message names the pattern)."""


_TOKEN = re.compile(r"\.\.\.|\(|\)|[A-Za-z_][A-Za-z0-9_]*|\d+")


def _parse_side(pattern: str, side: str) -> list[list[str]]:
    """'b (h p1) ... c' -> [['b'], ['h', 'p1'], ['...'], ['c']]; '()' and '1' are empty groups."""
    groups: list[list[str]] = []
    current: list[str] | None = None
    rest = side
    for token in _TOKEN.findall(side):
        rest = rest.replace(token, "", 1)
        if token == "(":
            if current is not None:
                raise UnsupportedPatternError(f"nested parentheses in {pattern!r}")
            current = []
        elif token == ")":
            if current is None:
                raise UnsupportedPatternError(f"unbalanced parentheses in {pattern!r}")
            groups.append(current)
            current = None
        elif token.isdigit():
            if token != "1":
                raise UnsupportedPatternError(f"axis literal {token} in {pattern!r} (only 1 is allowed in rearrange)")
            if current is None:
                groups.append([])
        elif current is not None:
            current.append(token)
        else:
            groups.append([token])
    if current is not None:
        raise UnsupportedPatternError(f"unbalanced parentheses in {pattern!r}")
    if rest.strip():
        raise UnsupportedPatternError(f"cannot parse {rest.strip()!r} in {pattern!r}")
    return groups


def _check_pattern(pattern: str) -> None:
    """Parse both sides of `pattern` (raises `UnsupportedPatternError` naming it)."""
    if pattern.count("->") != 1:
        raise UnsupportedPatternError(f"{pattern!r} needs exactly one '->'")
    left, right = pattern.split("->")
    _parse_side(pattern, left)
    _parse_side(pattern, right)


def parse_rearrange(pattern: str, shape: Sequence[int], **axes_lengths: int):
    """Turn an einops rearrange `pattern` for an input `shape` into (view_shape, perm, out_shape).

    Raises `UnsupportedPatternError` (naming the pattern) for patterns rearrange itself rejects or
    that this module does not implement (anonymous axes other than 1, '...' inside parentheses
    on the input side).
    """
    _check_pattern(pattern)
    left_text, right_text = pattern.split("->")
    left, right = _parse_side(pattern, left_text), _parse_side(pattern, right_text)
    shape = [int(s) for s in shape]
    if any("..." in g and g != ["..."] for g in left):
        raise UnsupportedPatternError(f"'...' inside parentheses on the input side of {pattern!r}")
    if ["..."] in left:
        n_dots = len(shape) - (len(left) - 1)
        if n_dots < 0 or left.count(["..."]) > 1:
            raise UnsupportedPatternError(f"{pattern!r} does not fit an input of rank {len(shape)}")
        dots = [f"...{i}" for i in range(n_dots)]
        at = left.index(["..."])
        left = left[:at] + [[d] for d in dots] + left[at + 1:]
        expanded_right = []
        for g in right:
            if g == ["..."]:
                expanded_right.extend([d] for d in dots)
            else:
                expanded_right.append([a for n in g for a in (dots if n == "..." else [n])])
        right = expanded_right
    names_left = [a for g in left for a in g]
    names_right = [a for g in right for a in g]
    if len(set(names_left)) != len(names_left) or len(set(names_right)) != len(names_right):
        raise UnsupportedPatternError(f"repeated axis name in {pattern!r}")
    if set(names_left) != set(names_right):
        raise UnsupportedPatternError(f"axes {sorted(set(names_left) ^ set(names_right))} appear on one side only "
                                      f"of {pattern!r}")
    if len(left) != len(shape):
        raise UnsupportedPatternError(f"{pattern!r} has {len(left)} input axes, the tensor has {len(shape)}")
    sizes = {k: int(v) for k, v in axes_lengths.items()}
    for group, dim in zip(left, shape):
        known = _prod(sizes[a] for a in group if a in sizes)
        unknown = [a for a in group if a not in sizes]
        if len(unknown) > 1:
            raise UnsupportedPatternError(f"axes {unknown} of {pattern!r} need lengths")
        if unknown:
            if known == 0 or dim % known:
                raise UnsupportedPatternError(f"{pattern!r}: {dim} is not divisible by {known}")
            sizes[unknown[0]] = dim // known
        elif known != dim:
            raise UnsupportedPatternError(f"{pattern!r}: axis group {group} is {known}, the tensor has {dim}")
    elementary = names_left
    view_shape = [sizes[a] for a in elementary]
    perm = [elementary.index(a) for a in names_right]
    out_shape = [_prod(sizes[a] for a in g) for g in right]
    return view_shape, perm, out_shape


def rearrange(x: torch.Tensor, pattern: str, **axes_lengths: int) -> torch.Tensor:
    """`einops.rearrange` for torch tensors, computed at rank <= 4 (bit-exact); no einops needed.

    Raises `UnsupportedPatternError` naming the pattern when the input or the output has rank > 4
    or the pattern is not a plain rearrange.
    """
    if x.dim() > MAX_RANK:
        raise UnsupportedPatternError(f"cannot lower {pattern!r}: the input already has rank {x.dim()}")
    view_shape, perm, out_shape = parse_rearrange(pattern, x.shape, **axes_lengths)
    if len(out_shape) > MAX_RANK:
        raise UnsupportedPatternError(f"cannot lower {pattern!r}: its output has rank {len(out_shape)}")
    return lowrank_permute(x, view_shape, perm, out_shape)


class Rearrange(nn.Module):
    """Drop-in for `einops.layers.torch.Rearrange` computed at rank <= 4."""

    def __init__(self, pattern: str, **axes_lengths: int):
        super().__init__()
        self.pattern = pattern
        self.axes_lengths = dict(axes_lengths)
        _check_pattern(pattern)

    def forward(self, x):
        return rearrange(x, self.pattern, **self.axes_lengths)

    def extra_repr(self):
        return repr(self.pattern)


@register("patch_einops", wall="rank_gt_4")
def patch_einops(model: nn.Module) -> list[Change]:
    """`einops.layers.torch.Rearrange` modules -> `Rearrange` (rank <= 4, bit-exact).

    Works without einops installed (then there is nothing to patch). A pattern that cannot be
    lowered raises `UnsupportedPatternError` naming it -- at patch time when it fails to parse,
    else at the first forward (lowering needs the input shape). Functional `einops.rearrange`
    calls are caught inside `GpuRewriteWrapper` by the "lower_rank_views" handler (einops runs
    reshape -> permute -> reshape on the tensor, which that handler follows).
    """
    import sys

    layers = sys.modules.get("einops.layers.torch")
    if layers is None:
        try:
            import einops.layers.torch as layers
        except ImportError:
            return []
    changes = []
    for path, m in named_modules_of(model, layers.Rearrange):
        if not path:
            continue
        pattern = m.pattern
        _check_pattern(pattern)
        set_submodule(model, path, Rearrange(pattern, **dict(m.axes_lengths)))
        changes.append(Change(path, f"Rearrange({pattern!r}) -> rank-4 view/permute chain", "patch_einops", True))
    return changes
