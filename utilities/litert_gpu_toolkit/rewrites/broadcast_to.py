"""Wall `broadcast_to`: a runtime BROADCAST_TO rejected by the GPU delegate.

GQA's repeat_kv (expand + reshape) and other runtime expands lower to BROADCAST_TO. `patch_repeat_kv`
and `patch_broadcast_to` (functional handlers on Tensor.expand / expand_as / broadcast_to /
repeat_interleave) build the same tensor by concatenation (`repeat_kv_cat`, `expand_by_cat`): exact.
A product with a constant of ones that broadcasts a runtime tensor (CANINE's `ones([B, S, 1]) * mask[:, None]`,
an outer-product mask) is the converter's BROADCAST_TO too; `patch_broadcast_to` writes it as that expand by
concatenation: bit-exact (1 * x is x).
"""
from __future__ import annotations


import torch
from torch import nn

from . import Change, register
from .functional import register_handler
from .scoping import _is_number, _replace_modules, _scalar_value, scope_rewrites, scoped_rewrites  # noqa: F401
from .shared import repeat_kv_cat, expand_by_cat, _tile  # noqa: F401 - re-exported


# --------------------------------------------------------------------------------- BROADCAST_TO

def _target_shape(x: torch.Tensor, sizes) -> tuple[int, ...] | None:
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
        sizes = tuple(sizes[0])
    if not all(isinstance(s, int) for s in sizes) or len(sizes) < x.dim():
        return None
    lead = len(sizes) - x.dim()
    out = []
    for i, s in enumerate(sizes):
        if i < lead:
            if s < 0:
                return None
            out.append(s)
        else:
            have = x.shape[i - lead]
            out.append(have if s == -1 else s)
            if have != 1 and out[-1] != have:
                return None
    return tuple(out)


@register_handler(torch.Tensor.expand, "patch_repeat_kv")
def _expand_repeat_kv(self, *sizes, **kwargs):
    """The rank-5 GQA idiom x[:, :, None].expand(b, k, n, s, d): copy at rank 4, then view back (folds away)."""
    shape = _target_shape(self, sizes)
    if shape is None or self.dim() != 5 or len(shape) != 5:
        return NotImplemented
    grown = [i for i, (h, w) in enumerate(zip(self.shape, shape)) if h != w]
    if len(grown) != 1:
        return NotImplemented
    a, n = grown[0], shape[grown[0]]
    x4 = self.squeeze(a)
    if a == 0:
        y = _tile(x4, n, 0)
    else:
        y = torch.cat([x4.narrow(a - 1, i, 1) for i in range(x4.shape[a - 1]) for _ in range(n)], a - 1)
    return y.reshape(shape)


@register_handler(torch.Tensor.expand, "patch_broadcast_to")
def _expand(self, *sizes, **kwargs):
    shape = _target_shape(self, sizes)
    if shape is None:
        return NotImplemented
    return expand_by_cat(self, shape)


@register_handler(torch.Tensor.expand_as, "patch_broadcast_to")
def _expand_as(self, other):
    return expand_by_cat(self, other.shape)


@register_handler(torch.broadcast_to, "patch_broadcast_to")
@register_handler(torch.Tensor.broadcast_to, "patch_broadcast_to")
def _broadcast_to(self, size):
    shape = _target_shape(self, (tuple(size),))
    return NotImplemented if shape is None else expand_by_cat(self, shape)


def _times_ones(a, b=None, *, out=None):
    from .shared import real_values, value_of
    if out is not None or not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return NotImplemented
    ones, x = (a, b) if value_of(a) is not None else (b, a)
    known = value_of(ones)
    if known is None or value_of(x) is not None or ones.dtype != x.dtype or not x.is_floating_point():
        return NotImplemented
    with real_values():
        if not bool((known == 1).all()):
            return NotImplemented
    try:
        shape = tuple(torch.broadcast_shapes(tuple(a.shape), tuple(b.shape)))
    except RuntimeError:
        return NotImplemented
    if shape == tuple(x.shape):
        return NotImplemented                           # nothing broadcast: an ordinary MUL the GPU runs
    return expand_by_cat(x, shape)


for _f in (torch.mul, torch.Tensor.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__):
    register_handler(_f, "patch_broadcast_to")(_times_ones)


@register_handler(torch.Tensor.repeat, "patch_broadcast_to")
def _repeat(self, *sizes):
    """x.repeat(sizes) as copies joined by CONCATENATION: litert-torch lowers a repeat to BROADCAST_TO (diffusers'
    1-D UNet repeats its timestep embedding along time). Bit-exact (copies only)."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
        sizes = tuple(sizes[0])
    if not all(isinstance(s, int) and s >= 1 for s in sizes) or len(sizes) < self.dim() or all(s == 1 for s in sizes):
        return NotImplemented
    x = self.reshape((1,) * (len(sizes) - self.dim()) + tuple(self.shape))
    for dim, n in enumerate(sizes):
        if n != 1:
            x = _tile(x, n, dim)
    return x


@register_handler(torch.Tensor.repeat_interleave, "patch_repeat_kv")
@register_handler(torch.repeat_interleave, "patch_repeat_kv")
def _repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    if not isinstance(input, torch.Tensor) or not isinstance(repeats, int) or dim is None or input.dim() > 4 \
            or input.shape[dim] * repeats > 256:
        return NotImplemented
    dim = dim % input.dim()
    return torch.cat([input.narrow(dim, i, 1) for i in range(input.shape[dim]) for _ in range(repeats)], dim)


@register("patch_repeat_kv", wall="broadcast_to")
def patch_repeat_kv(model: nn.Module, *, functional: bool = True) -> list[Change]:
    """GQA repeat_kv (x[:, :, None].expand(...).reshape(...), repeat_interleave on heads) -> `repeat_kv_cat`.

    Removes BROADCAST_TO (runtime expand, rejected by the GPU even at rank 4; LiteRT#9191) and the rank-5
    tensor in one go. Bit-exact, same head order. Functional only: scopes the handler on `model.forward`.
    """
    return [scope_rewrites(model, ["patch_repeat_kv"])] if functional else []


@register("patch_broadcast_to", wall="broadcast_to")
def patch_broadcast_to(model: nn.Module, *, functional: bool = True) -> list[Change]:
    """Tensor.expand / expand_as / broadcast_to -> copies by CONCATENATION (`expand_by_cat`). Bit-exact.

    On a parameter or buffer the copies fold into one constant at the target shape (a baked constant);
    on a runtime tensor they are SLICE-free concatenations. Functional only: scopes the handler.
    """
    return [scope_rewrites(model, ["patch_broadcast_to"])] if functional else []
