"""exp(x) - 1 cancels for small x: ELU, CELU, SELU and expm1 lower to EXP then SUB, and in fp16 that loses them.

Near 0, exp(x) sits next to 1, where fp16's spacing is 2^-11 (2^-10 above 1): subtracting 1 leaves an absolute
error of about 2^-12 on a result of size |x|, so an ELU fed values around -0.01 comes back with ~5 % error, and
every layer after it inherits that. torch computes these with expm1 and has no such loss; the GPU does: on
llvmpipe (ai-edge-litert 2.3.0) an ELU of inputs in [-0.01, 0] comes back at SNR 32 dB against torch, where fp16
storage alone keeps ~70 dB -- and a random EnCodec decoder (ELU between every conv) goes from corr 0.99998 in torch
with fp16 tensors to 0.9989 on the GPU; torch with fp16 tensors and ELU written as exp(x) - 1 gives 0.9991.

`expm1_accurate(x) = tanh(x / 2) * (exp(x) + 1)` is the same function for every x (tanh(x/2) = (e^x - 1) /
(e^x + 1)), and neither factor cancels: tanh keeps its relative precision near 0 and exp(x) + 1 is near 2.
Exact to fp32 rounding (a few ulps; the test bounds it); ±inf and NaN as torch. The same ELU on the GPU: 69 dB.
Ops: MUL, TANH, EXP, ADD, MUL instead of EXP, SUB; the ELU family is `select.elu_arith` (relu(x) + alpha *
expm1(min(x, 0)), SELECT-free) with this expm1, and `patch_select`'s modules route their expm1 here too.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..functional import register_handler
from ..registry import declare
from ..shared import elu_arith

NAME = "patch_safe_expm1"
declare(NAME, wall="fp16_degraded")

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def expm1_accurate(x: torch.Tensor) -> torch.Tensor:
    """exp(x) - 1 without cancellation near 0 (module docstring): tanh(x / 2) * (exp(x) + 1)."""
    return torch.tanh(x * 0.5) * (torch.exp(x) + 1.0)


def _floating(x) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()


def _done(input, y, inplace):
    return input.copy_(y) if inplace else y


def patch_safe_expm1(model):
    """Wrap `model` so ELU / CELU / SELU / expm1 compute as `expm1_accurate` (functional: on by default inside
    `GpuRewriteWrapper` and `convert_for_gpu`; nn.ELU & co. call the functions); named here for the symptom table."""
    from ..functional import GpuRewriteWrapper

    return GpuRewriteWrapper(model, include=[NAME])


@register_handler(F.elu, NAME)
def _elu(input, alpha=1.0, inplace=False):
    if not _floating(input):
        return NotImplemented
    return _done(input, elu_arith(input, float(alpha), expm1=expm1_accurate), inplace)


@register_handler(F.celu, NAME)
def _celu(input, alpha=1.0, inplace=False):
    if not _floating(input) or float(alpha) == 0.0:
        return NotImplemented
    return _done(input, elu_arith(input, float(alpha), input_scale=1.0 / float(alpha), expm1=expm1_accurate), inplace)


@register_handler(F.selu, NAME)
def _selu(input, inplace=False):
    if not _floating(input):
        return NotImplemented
    return _done(input, elu_arith(input, SELU_ALPHA, SELU_SCALE, expm1=expm1_accurate), inplace)


@register_handler(torch.expm1, NAME)
@register_handler(torch.Tensor.expm1, NAME)
@register_handler(torch.special.expm1, NAME)
def _expm1(input, *args, **kwargs):
    if not _floating(input) or args or kwargs:
        return NotImplemented
    return expm1_accurate(input)
