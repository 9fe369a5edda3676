"""Wall `relu_0_to_1`: hard-sigmoid / Hardtanh(0, 1) / clamp(0, 1) lower to RELU_0_TO_1 (rejected from LiteRT 2.1.5).

`patch_hardsigmoid` replaces the modules and the functional spellings with min/max arithmetic
(`clamp01`, `hardsigmoid_arith`): exact.
"""
from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import nn

from . import Change, register
from .functional import register_handler
from .scoping import _is_number, _replace_modules, _scalar_value, scope_rewrites, scoped_rewrites  # noqa: F401


# -------------------------------------------------------------------------------- RELU_0_TO_1

def clamp01(x: torch.Tensor) -> torch.Tensor:
    """clamp(x, 0, 1) without RELU_0_TO_1: y = min(x, 2); relu(y) - relu(y - 1) -> MINIMUM, SUB, RELU, SUB.

    Bit-exact for every input, inf included: y - 1 is exact for y in [1, 2] (Sterbenz), and y < 1 gives
    relu(y) - 0. The spec's plain relu(x) - relu(x - 1) is exact only while x - 1 is exact (|x| < 2**24
    in fp32, |x| < 2048 on an fp16 GPU -- above that it returns 0 or 2 instead of 1); the min(x, 2) in
    front removes that limit. The converter folds min(relu(x), 1), clamp(x, 0, 1) and even
    0.5 * clamp(2x, 0, 2) back into RELU_0_TO_1; this form it leaves alone (measured).
    """
    y = torch.clamp(x, max=2.0)
    return torch.relu(y) - torch.relu(y - 1.0)


def hardsigmoid_arith(x: torch.Tensor) -> torch.Tensor:
    """hardsigmoid(x) = relu6(x + 3) / 6 (torch's own formula, bit-exact) -> ADD (fused RELU6) + DIV/MUL."""
    return F.relu6(x + 3.0) / 6.0


class HardsigmoidArith(nn.Module):
    """nn.Hardsigmoid as relu6(x + 3) / 6 (bit-exact), never RELU_0_TO_1."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        y = hardsigmoid_arith(x)
        return x.copy_(y) if self.inplace else y


class Clamp01(nn.Module):
    """nn.Hardtanh(0, 1) / clamp(x, 0, 1) as `clamp01` (bit-exact), never RELU_0_TO_1."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        y = clamp01(x)
        return x.copy_(y) if self.inplace else y


def _hardsigmoid_module(m):
    if type(m) is nn.Hardsigmoid:
        return HardsigmoidArith(m.inplace), "Hardsigmoid -> relu6(x + 3) / 6"
    if type(m) in (nn.Hardtanh,) and (m.min_val, m.max_val) == (0.0, 1.0):
        return Clamp01(m.inplace), "Hardtanh(0, 1) -> relu(y) - relu(y - 1), y = min(x, 2)"
    return None


@register("patch_hardsigmoid", wall="relu_0_to_1")
def patch_hardsigmoid(model: nn.Module, *, functional: bool = True) -> list[Change]:
    """RELU_0_TO_1 sources -> exact arithmetic (wall `relu_0_to_1`, LiteRT#8598).

    Modules: Hardsigmoid -> relu6(x + 3) / 6; Hardtanh(0, 1) -> `clamp01`. Functional: F.hardsigmoid,
    F.hardtanh(x, 0, 1), torch.clamp / Tensor.clamp / clip with bounds (0, 1) -- e.g. hardswish's inner
    term written as x * clamp(x / 6 + 0.5, 0, 1). Bit-exact. nn.Hardswish itself lowers to HARD_SWISH
    here (accepted) and is left alone.
    """
    changes = _replace_modules(model, _hardsigmoid_module, "patch_hardsigmoid")
    if functional:
        changes.append(scope_rewrites(model, ["patch_hardsigmoid"]))
    return changes


@register_handler(F.hardsigmoid, "patch_hardsigmoid")
def _hardsigmoid(input, inplace=False):
    y = hardsigmoid_arith(input)
    return input.copy_(y) if inplace else y


@register_handler(F.hardtanh, "patch_hardsigmoid")
def _hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if (float(min_val), float(max_val)) != (0.0, 1.0):
        return NotImplemented
    y = clamp01(input)
    return input.copy_(y) if inplace else y


def _clamp_bounds(args, kwargs):
    lo = args[0] if len(args) > 0 else kwargs.get("min")
    hi = args[1] if len(args) > 1 else kwargs.get("max")
    return lo, hi


@register_handler(torch.clamp, "patch_hardsigmoid")
@register_handler(torch.clip, "patch_hardsigmoid")
@register_handler(torch.Tensor.clamp, "patch_hardsigmoid")
@register_handler(torch.Tensor.clip, "patch_hardsigmoid")
def _clamp(input, *args, **kwargs):
    lo, hi = _clamp_bounds(args, kwargs)
    if not (_is_number(lo) and _is_number(hi)) or (float(lo), float(hi)) != (0.0, 1.0) or "out" in kwargs:
        return NotImplemented
    return clamp01(input)
