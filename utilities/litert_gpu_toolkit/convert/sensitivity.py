"""How much of a model's output its input drives: when it is little, a PASS says little.

The GPU check PASSes when the GPU output correlates with torch's. If the output barely depends on the input -- a
randomly initialised classifier whose features decayed through its blocks until the head's bias is nearly all of
its logits, a detector whose boxes are mostly the anchor grid -- any file that gets the constant part right
correlates at 1.000000, whatever it does to the features. Measured 2026-12-04 on the zoo's O(1) rows: timm and
torchvision EfficientNet-B0 logits 0.0% input-driven, RexNet 0.4%, every YOLO under 2%; the zoo's EnCodec
decoder ignored its codes altogether (an all-zero codebook buffer).

`input_share(model, args, kwargs)` runs the model on its example inputs and on a second draw of them and returns,
over the float outputs, the largest std(y - y') / (sqrt(2) std(y)): about 1 when independent inputs move the
output as much as it varies, 0 when the output is a constant. Float inputs are redrawn with the example's mean
and spread; integer inputs that are all 0 / 1 (masks, token types) are kept, other integer inputs (token ids,
positions) redrawn uniformly between the example's smallest and largest value. `convert_for_gpu` records it
(`result.input_share`) and its summary warns below WEAK; the zoo's table marks such rows.
"""
from __future__ import annotations

WEAK = 0.05            # below this share the row's corr is called a weak check


def is_weak(share: float | None) -> bool:
    """A measured share under WEAK (None, unmeasured, is not weak)."""
    return share is not None and share < WEAK


def other_draw(args: tuple, seed: int = 11) -> tuple:
    """A second draw of the example inputs (module docstring); non-tensors are kept."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out: list = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.numel() > 1 and a.is_floating_point():
            a = torch.randn(a.shape, generator=g, dtype=a.dtype) * a.std() + a.mean()
        elif isinstance(a, torch.Tensor) and a.numel() > 1 and a.dtype in (torch.int32, torch.int64):
            lo, hi = int(a.min()), int(a.max())
            if not (lo >= 0 and hi <= 1):
                a = torch.randint(lo, hi + 1, a.shape, generator=g, dtype=a.dtype)
        out.append(a)
    return tuple(out)


def input_share(model, args: tuple, kwargs: dict | None = None) -> float | None:
    """The largest input-driven share of any float output (module docstring); None when no output is a float
    tensor with spread, or when the model raises on either draw (never raises: it measures the check, not the
    model)."""
    import torch

    kwargs = dict(kwargs or {})
    names = list(kwargs)
    redrawn = other_draw(tuple(args) + tuple(kwargs.values()))
    try:
        with torch.no_grad():
            y = _floats(model(*args, **kwargs))
            y2 = _floats(model(*redrawn[:len(args)], **dict(zip(names, redrawn[len(args):]))))
    except (Exception, SystemExit):                        # noqa: BLE001 - see the docstring
        return None
    shares = [float((a - b).double().std() / (2 ** 0.5 * a.double().std()))
              for a, b in zip(y, y2) if a.shape == b.shape and a.numel() > 1 and float(a.double().std()) > 0]
    return round(max(shares), 4) if shares else None


def _floats(out) -> list:
    import torch

    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
