"""How much of a row's output the input drives: when it is little, the row's corr says little.

A zoo row PASSes when the GPU output correlates with torch's. If the output barely depends on the input -- a
classifier whose features decayed through random blocks until the head's bias is nearly all of its logits --
any file that computes the bias right correlates at 1.000000, whatever it does to the features. Measured
2026-12-04: in the O(1) mode the zoo's timm and torchvision EfficientNet-B0 logits are 0.0% input-driven and
RexNet's 0.65%; planting trained ranges made them input-driven again.

`input_share(model, args)` runs the model on its example inputs and on a second draw of them, and returns, over
the outputs, the largest std(y - y') / (sqrt(2) std(y)): about 1 when independent inputs move the output as much
as it varies, 0 when the output is a constant. Float inputs are redrawn with the example's mean and spread;
integer inputs that are all 0 / 1 (masks, token types) are kept, other integer inputs (token ids, positions)
redrawn uniformly between the example's smallest and largest value.
"""
from __future__ import annotations

WEAK = 0.05            # below this share the row's corr is called a weak check


def other_draw(args: tuple, seed: int = 11) -> tuple:
    """A second draw of the example inputs (module docstring); non-tensors are kept."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.numel() > 1 and a.is_floating_point():
            a = torch.randn(a.shape, generator=g, dtype=a.dtype) * a.std() + a.mean()
        elif isinstance(a, torch.Tensor) and a.numel() > 1 and a.dtype in (torch.int32, torch.int64):
            lo, hi = int(a.min()), int(a.max())
            if not (lo >= 0 and hi <= 1):
                a = torch.randint(lo, hi + 1, a.shape, generator=g, dtype=a.dtype)
        out.append(a)
    return tuple(out)


def input_share(model, args: tuple) -> float | None:
    """The largest input-driven share of any float output (module docstring); None when no output is a float
    tensor with spread."""
    import torch

    with torch.no_grad():
        y, y2 = _floats(model(*args)), _floats(model(*other_draw(tuple(args))))
    shares = [float((a - b).double().std() / (2 ** 0.5 * a.double().std()))
              for a, b in zip(y, y2) if a.shape == b.shape and a.numel() > 1 and float(a.double().std()) > 0]
    return round(max(shares), 4) if shares else None


def _floats(out) -> list:
    import torch

    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
