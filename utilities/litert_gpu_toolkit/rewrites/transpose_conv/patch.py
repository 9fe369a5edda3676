"""`patch_conv_transpose`: replace nn.ConvTranspose1d/2d with the exact form chosen for its geometry.
"""
from __future__ import annotations

import math

from torch import nn

from .. import Change, register, set_submodule
from .polyphase import DepthwisePolyphaseConvT1d, DepthwisePolyphaseConvT2d, PolyphaseConvT1d, PolyphaseConvT2d
from .spec import ConvTSpec
from .zero_stuff import ZeroStuffConvT1d, ZeroStuffConvT2d


# ------------------------------------------------------------------------------------------ patch

_FORMS = {
    ("zerostuff", 1): ZeroStuffConvT1d, ("zerostuff", 2): ZeroStuffConvT2d,
    ("polyphase", 1): PolyphaseConvT1d, ("polyphase", 2): PolyphaseConvT2d,
    ("depthwise", 1): DepthwisePolyphaseConvT1d, ("depthwise", 2): DepthwisePolyphaseConvT2d,
}


def choose_form(spec: ConvTSpec, mode: str = "auto") -> str:
    """polyphase / depthwise / zerostuff for `spec` under `mode`
    (auto = polyphase unless zero-stuff needs fewer MACs)."""
    if mode not in ("auto", "polyphase", "zerostuff"):
        raise ValueError(f"mode must be auto, polyphase or zerostuff, got {mode!r}")
    if mode == "zerostuff":
        return "zerostuff"
    poly = "depthwise" if spec.is_depthwise else "polyphase"
    if mode == "polyphase":
        return poly
    # per output sample: polyphase reads prod(taps) inputs, zero-stuff prod(kernel) (stuffed) inputs
    return poly if math.prod(spec.taps) <= math.prod(spec.kernel) else "zerostuff"


@register("patch_conv_transpose", wall="transpose_conv")
def patch_conv_transpose(model: nn.Module, mode: str = "auto") -> list[Change]:
    """Replace every nn.ConvTranspose1d / 2d in `model` (in place) with a TRANSPOSE_CONV-free exact form.

    mode="auto": polyphase (depthwise polyphase for groups == channels) unless dilation makes the
    zero-stuffed form cheaper; "polyphase" / "zerostuff" force one form. Exact to fp32 rounding.
    """
    if mode not in ("auto", "polyphase", "zerostuff"):
        raise ValueError(f"mode must be auto, polyphase or zerostuff, got {mode!r}")
    changes: list[Change] = []
    for path, m in list(model.named_modules()):
        if type(m) not in (nn.ConvTranspose1d, nn.ConvTranspose2d):
            continue
        spec = ConvTSpec.of(m)
        form = choose_form(spec, mode)
        new = _FORMS[(form, spec.ndim)].from_conv_transpose(m)
        new.train(m.training)
        if path:
            set_submodule(model, path, new)
        else:
            raise ValueError("the root module is itself a ConvTranspose; wrap it or call the class directly")
        changes.append(Change(path, f"{spec.describe()} -> {type(new).__name__}", "patch_conv_transpose", True))
    return changes
