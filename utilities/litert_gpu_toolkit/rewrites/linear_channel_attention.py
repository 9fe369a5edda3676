"""Wall `linear_channel_attention`: 'tfl.mul operands don't have broadcast-compatible shapes' at conversion.

Channel attention written with nn.Linear on a pooled rank-4 tensor confuses the converter's layout
handling; `patch_channel_attention_linear` swaps those Linear layers for 1x1 convolutions
(`LinearAsConv1x1`): exact.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from . import Change, register, set_submodule
from .scoping import _is_number, _replace_modules, _scalar_value, scope_rewrites, scoped_rewrites  # noqa: F401


# ------------------------------------------------------------------- channel attention via Linear

class LinearAsConv1x1(nn.Module):
    """nn.Linear whose rank-4 calls ([N, H, W, C], channels last) run as a 1x1 Conv2d (exact, same sums).

    Rank-2 and rank-3 calls stay F.linear (FULLY_CONNECTED converts fine). Fixes the conversion failure
    of a Linear applied to a rank-4 tensor ('tfl.batch_matmul' op found invalid output rank; older
    converters: 'tfl.mul operands don't have broadcast-compatible shapes').
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:
            return F.linear(x, self.weight, self.bias)
        w = self.weight.reshape(self.out_features, self.in_features, 1, 1)
        return F.conv2d(x.permute(0, 3, 1, 2), w, self.bias).permute(0, 2, 3, 1)


def _rank4_linears(model: nn.Module, example_inputs) -> set[str]:
    seen: set[str] = set()
    hooks = []
    for path, m in model.named_modules():
        if type(m) is nn.Linear:
            hooks.append(m.register_forward_pre_hook(
                lambda mod, args, path=path: seen.add(path)
                if args and isinstance(args[0], torch.Tensor) and args[0].dim() == 4 else None))
    try:
        args, kwargs = _split_inputs(example_inputs)
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for h in hooks:
            h.remove()
    return seen


def _split_inputs(example_inputs):
    if isinstance(example_inputs, dict):
        return (), dict(example_inputs)
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,), {}
    if isinstance(example_inputs, tuple) and len(example_inputs) == 2 and isinstance(example_inputs[1], dict) \
            and isinstance(example_inputs[0], tuple):
        return example_inputs[0], example_inputs[1]
    return tuple(example_inputs), {}


@register("patch_channel_attention_linear", wall="linear_channel_attention")
def patch_channel_attention_linear(model: nn.Module, example_inputs=None, *, paths: Sequence[str] | None = None
                                   ) -> list[Change]:
    """nn.Linear applied to rank-4 tensors (channel attention, SE blocks in channels-last) -> 1x1 conv.

    Which Linears: those at `paths`; else those a forward pass on `example_inputs` calls with a rank-4
    input; else every nn.Linear (the replacement only changes rank-4 calls). Exact (same products and
    sums, order may differ: fp32 rounding).
    """
    if paths is not None:
        targets = set(paths)
    elif example_inputs is not None:
        targets = _rank4_linears(model, example_inputs)
    else:
        targets = {p for p, m in model.named_modules() if type(m) is nn.Linear}
    changes = []
    for path in sorted(targets):
        m = model.get_submodule(path)
        if type(m) is not nn.Linear or not path:
            continue
        set_submodule(model, path, LinearAsConv1x1(m))
        changes.append(Change(path, f"Linear({m.in_features}->{m.out_features}) on rank-4 input -> 1x1 conv",
                              "patch_channel_attention_linear", True))
    return changes
