"""Wall `select`: SELECT / SELECT_V2 rejected by the GPU delegate.

ELU / CELU / SELU / PReLU, torch.where, Tensor.masked_fill and boolean-mask assignment lower to
SELECT_V2. `patch_select` replaces the modules with arithmetic forms (ELUArith, PReLUArith) and the
functional handler of the same name rewrites the functional spellings as blends (`arith_where`).
"""
from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import nn

from . import Change, register
from .functional import in_active_mode, register_handler
from .scoping import _is_number, _replace_modules, _scalar_value, scope_rewrites, scoped_rewrites  # noqa: F401
from .shared import FP16_MAX, arith_where, elu_arith, _branch_term  # noqa: F401 - re-exported


# -------------------------------------------------------------------------------------- SELECT

class ELUArith(nn.Module):
    """`elu_arith` as a module (what `patch_select` puts in place of nn.ELU / CELU / SELU)."""

    def __init__(self, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.scale, self.input_scale, self.inplace = float(alpha), float(scale), float(input_scale), inplace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = elu_arith(x, self.alpha, self.scale, self.input_scale)
        return x.copy_(y) if self.inplace else y


class PReLUArith(nn.Module):
    """PReLU as relu(x) - w * relu(-x) (per channel on dim 1): exact (one rounding, like PReLU itself)."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(weight.detach().clone(), requires_grad=weight.requires_grad)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if w.numel() > 1:
            w = w.reshape(-1, *([1] * (x.dim() - 2))) if x.dim() >= 2 else w
        return torch.relu(x) - w * torch.relu(-x)


def _select_module(m: nn.Module):
    if type(m) is nn.ELU:
        return ELUArith(m.alpha, inplace=m.inplace), f"ELU(alpha={m.alpha}) -> relu + expm1(min(x,0))"
    if type(m) is nn.CELU:
        return ELUArith(m.alpha, input_scale=1.0 / m.alpha, inplace=m.inplace), f"CELU({m.alpha}) -> arithmetic"
    if type(m) is nn.SELU:
        return (ELUArith(1.6732632423543772, scale=1.0507009873554805, inplace=m.inplace), "SELU -> arithmetic")
    if type(m) is nn.PReLU:
        return PReLUArith(m.weight), f"PReLU({m.num_parameters}) -> relu(x) - w*relu(-x)"
    return None


@register("patch_select", wall="select", default=False)
def patch_select(model: nn.Module, *, functional: bool = True) -> list[Change]:
    """SELECT / SELECT_V2 sources -> arithmetic (wall `select`). Opt-in (`include=["patch_select"]`): the graph
    pass (`legalize.boolean`, `legalize.masked_assign`) meets the same wall on the exported graph whatever the
    spelling, with smaller graphs (scripts/measure_legalize.py --without patch_select: the 3 zoo rows it fired on
    PASS without it, 0-20 ops fewer; its own wall tests PASS with the pass alone). Keep it for a `where` whose
    runtime branch can hold +/-inf: the pass's blend multiplies that branch by 0 (NaN); `arith_where` does not.

    Modules: ELU, CELU, SELU -> relu + expm1 of min(x, 0); PReLU -> relu(x) - w*relu(-x) (this converter
    already lowers PReLU without SELECT; the rewrite keeps it so). Functional: torch.where / Tensor.where,
    masked_fill(_), boolean-mask assignment (`x[mask] = v`, `index_put_` with a bool mask), F.elu / celu /
    selu / prelu -> `arith_where` / the module forms. Exactness: see `arith_where` (exact for finite and
    +/-inf values in either branch; NaN in the unused branch propagates).
    """
    changes = _replace_modules(model, _select_module, "patch_select")
    if functional:
        changes.append(scope_rewrites(model, ["patch_select"]))
    return changes


def _where_handler(cond, input=None, other=None, *, out=None):
    if input is None or other is None or out is not None or not isinstance(cond, torch.Tensor):
        return NotImplemented
    try:
        return arith_where(cond, input, other)
    except (TypeError, ValueError):
        return NotImplemented


register_handler(torch.where, "patch_select")(_where_handler)


@register_handler(torch.Tensor.where, "patch_select")
def _tensor_where(self, condition, y):
    return _where_handler(condition, self, y)


def _mask_for(self: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
    """A boolean mask over a prefix of `self`'s dims, reshaped to broadcast against `self`."""
    if mask.dtype != torch.bool or mask.dim() > self.dim():
        return None
    if tuple(mask.shape) == tuple(self.shape[:mask.dim()]):
        return mask.reshape(*mask.shape, *([1] * (self.dim() - mask.dim())))
    try:
        torch.broadcast_shapes(mask.shape, self.shape)
    except RuntimeError:
        return None
    return mask


def _fill_value(value):
    if _is_number(value) or isinstance(value, bool):
        return float(value)
    if isinstance(value, torch.Tensor):
        return value
    return None


@register_handler(torch.Tensor.masked_fill, "patch_select")
@register_handler(torch.masked_fill, "patch_select")
def _masked_fill(self, mask, value):
    if not self.dtype.is_floating_point or not isinstance(mask, torch.Tensor):
        return NotImplemented
    try:
        torch.broadcast_shapes(mask.shape, self.shape)
        return arith_where(mask, _fill_value(value), self)
    except (TypeError, ValueError, RuntimeError):
        return NotImplemented


@register_handler(torch.Tensor.masked_fill_, "patch_select")
def _masked_fill_(self, mask, value):
    new = _masked_fill(self, mask, value)
    return NotImplemented if new is NotImplemented else self.copy_(new)


@register_handler(torch.Tensor.__setitem__, "patch_select")
def _setitem(self, key, value):
    """`x[mask] = v` with a boolean mask (over all dims or a prefix) -> x.copy_(where(mask, v, x))."""
    if not isinstance(key, torch.Tensor) or key.dtype != torch.bool or not self.dtype.is_floating_point:
        return NotImplemented
    mask = _mask_for(self, key)
    v = _fill_value(value)
    if mask is None or v is None:
        return NotImplemented
    if isinstance(v, torch.Tensor) and v.numel() != 1:
        try:                                          # per-row values broadcast over the masked prefix
            torch.broadcast_shapes(v.shape, self.shape[key.dim():])
        except RuntimeError:
            return NotImplemented
    elif isinstance(v, torch.Tensor):
        v = v.reshape(())
    try:
        self.copy_(arith_where(mask, v, self))
    except (TypeError, ValueError):
        return NotImplemented
    return None


@register_handler(torch.Tensor.index_put_, "patch_select")
@register_handler(torch.Tensor.index_put, "patch_select")
def _index_put(self, indices, values, accumulate=False):
    if accumulate or len(indices) != 1 or not isinstance(indices[0], torch.Tensor) or indices[0].dtype != torch.bool:
        return NotImplemented
    out = self.clone()
    done = _setitem(out, indices[0], values)
    return NotImplemented if done is NotImplemented else out


def _elu_like(alpha, scale, input_scale):
    def handler(input, *args, inplace=False, **kwargs):
        a = args[0] if args else kwargs.get("alpha", alpha)
        inplace = args[1] if len(args) > 1 else inplace
        if not input.dtype.is_floating_point:
            return NotImplemented
        return in_active_mode(ELUArith(a, scale, (1.0 / a) if input_scale is None else input_scale, inplace), input)
    return handler


register_handler(F.elu, "patch_select")(_elu_like(1.0, 1.0, 1.0))
register_handler(F.celu, "patch_select")(_elu_like(1.0, 1.0, None))


@register_handler(F.selu, "patch_select")
def _selu(input, inplace=False):
    return in_active_mode(ELUArith(1.6732632423543772, 1.0507009873554805, 1.0, inplace), input)


@register_handler(F.prelu, "patch_select")
def _prelu(input, weight):
    w = weight.reshape(-1, *([1] * (input.dim() - 2))) if weight.numel() > 1 and input.dim() >= 2 else weight
    return torch.relu(input) - w * torch.relu(-input)
