"""What every zoo builder shares: seeded inputs, a wrapper that returns what users read, the torchvision shim.

Every builder returns a zero-argument function; calling it imports the model's library, builds the model from a
config (nothing is downloaded), redraws its weights (`weights.redraw_weights`; in the `trained` mode also
`weights.apply_trained_ranges`), sets its BatchNorm statistics from
the example inputs (`weights.calibrate_batch_norms`) and returns
`(module, example inputs tuple)`. The module takes the inputs positionally and returns every tensor a user
reads (see `user_outputs`).
"""
from __future__ import annotations

from typing import Callable

from .weights import activations_mode, apply_trained_ranges, calibrate_batch_norms, redraw_weights

# Fields of a model output that are never what a user reads from a converted file: per-layer stacks and caches.
SKIPPED_FIELDS = ("hidden_states", "attentions", "cross_attentions", "encoder_hidden_states",
                  "encoder_attentions", "decoder_hidden_states", "decoder_attentions", "reshaped_hidden_states")


def user_outputs(out) -> tuple:
    """Every tensor at the top level of `out`: a ModelOutput's fields (pooled / projected embeddings too, not only
    the first), a tuple's items, a dict's values. Nested containers (hidden-state tuples, caches, feature lists)
    are skipped, and so is a field named in SKIPPED_FIELDS; when the top level holds no tensor, the first item's
    tensors are taken."""
    import torch

    if isinstance(out, torch.Tensor):
        return (out,)
    if hasattr(out, "items"):                                  # ModelOutput and dict
        items = [v for k, v in out.items() if k not in SKIPPED_FIELDS]
    elif isinstance(out, (tuple, list)):
        items = list(out)
    else:
        raise TypeError(f"no tensor output in {type(out).__name__}")
    found = tuple(v for v in items if isinstance(v, torch.Tensor))
    if not found and items and (isinstance(items[0], (tuple, list)) or hasattr(items[0], "items")):
        return user_outputs(items[0])                          # e.g. ((predictions, coefficients), protos)
    if not found:
        raise TypeError(f"no top-level tensor in {type(out).__name__}")
    return found


def wrap(model, names: tuple[str, ...] = (), call: Callable | None = None):
    """A module taking the inputs positionally: `call(model, **named)` / `model(**named)` when `names` are given
    (how users call Hugging Face models: by keyword), else `model(*inputs)`; returns `user_outputs`."""
    from torch import nn

    class ZooWrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model
            self.names, self.call = names, call        # read by models/calls.py to call the model another way

        def forward(self, *xs):
            if names:
                kw = dict(zip(names, xs))
                out = call(self.model, **kw) if call else self.model(**kw)
            else:
                out = call(self.model, *xs) if call else self.model(*xs)
            outs = user_outputs(out)
            return outs[0] if len(outs) == 1 else outs

    return ZooWrapper().eval()


def built(model, inputs, call: Callable | None = None):
    """Redraw `model`'s weights and wrap it; `inputs` is a tuple (positional) or a dict (keyword inputs)."""
    model = model.eval()
    mode = activations_mode()
    redraw_weights(model, activations=mode)
    if isinstance(inputs, dict):
        wrapped, args = wrap(model, tuple(inputs), call), tuple(inputs.values())
    else:
        wrapped, args = wrap(model, (), call), tuple(inputs)
    if mode == "trained":            # before the BatchNorm calibration: later layers bound what it plants
        wrapped.planted = apply_trained_ranges(model, lambda: wrapped(*args))    # for zoo/planted.py
    if mode == "library":            # the library's own BatchNorm statistics too
        return wrapped, args
    try:                             # eight draws in one batch: statistics over more than a few positions
        calibrate_batch_norms(model, lambda: wrapped(*_calibration_inputs(args, 8)))
    except Exception:                # noqa: BLE001 - a model fixed to its example's batch: one draw
        calibrate_batch_norms(model, lambda: wrapped(*_calibration_inputs(args, 1)))
    return wrapped, args


def _calibration_inputs(args: tuple, copies: int) -> tuple:
    """Other draws of the example inputs for `calibrate_batch_norms`, `copies` of them stacked along the batch axis:
    float tensors redrawn from a normal of the same mean and spread (seeded), other inputs repeated. The statistics
    describe the input distribution, not the one test input (a BatchNorm fitted to it exactly, then pooled over the
    same few positions, returns rounding noise), over more than the few positions one small input has."""
    import torch

    g = _gen(7)
    out = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.dim() and copies > 1:
            shape = (a.shape[0] * copies, *a.shape[1:])
            if a.is_floating_point() and a.numel() > 1:
                a = torch.randn(shape, generator=g, dtype=a.dtype) * a.std() + a.mean()
            else:
                a = a.repeat(copies, *([1] * (a.dim() - 1)))
        elif isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel() > 1:
            a = torch.randn(a.shape, generator=g, dtype=a.dtype) * a.std() + a.mean()
        out.append(a)
    return tuple(out)


def _gen(seed=1):
    import torch

    return torch.Generator().manual_seed(seed)


def image(size=32, channels=3, batch=1):
    import torch

    return (torch.randn(batch, channels, size, size, generator=_gen()),)


def ids(n=16, vocab=100, batch=1):
    import torch

    return (torch.randint(0, vocab, (batch, n), generator=_gen()),)


def text_inputs(n=16, vocab=100, token_types=True, position_ids=False, pad_from=10):
    """How users call a text encoder: two sequences, the second padded from `pad_from` (its attention_mask 0
    there), token type ids, and position ids when asked."""
    import torch

    input_ids = torch.randint(3, vocab, (2, n), generator=_gen())
    mask = torch.ones(2, n, dtype=torch.long)
    mask[1, pad_from:] = 0
    input_ids[1, pad_from:] = 0
    named = {"input_ids": input_ids, "attention_mask": mask}
    if token_types:
        tt = torch.zeros(2, n, dtype=torch.long)
        tt[:, n // 2:] = 1
        named["token_type_ids"] = tt
    if position_ids:
        named["position_ids"] = torch.arange(n).unsqueeze(0).expand(2, n).clone()
    return named


def audio(n=1600):
    import torch

    return (torch.randn(1, n, generator=_gen()),)


def mel(frames, bins, layout="bf"):
    def make():
        import torch

        shape = (1, bins, frames) if layout == "bf" else (1, frames, bins)
        return (torch.randn(*shape, generator=_gen()),)
    return make


def codes(n=16, codebook=64, books=2):
    def make():
        import torch

        return (torch.randint(0, codebook, (1, 1, books, n), generator=_gen()),)
    return make


def spectrogram(frames=16, bins=16):
    def make():
        import torch

        return (torch.randn(1, frames, bins, generator=_gen()),)
    return make


def install_torchvision_placeholders() -> None:
    """PyPI's torchvision is built against CUDA torch: beside the CPU torch its C extension does not load and
    `import torchvision` fails with "operator torchvision::nms does not exist". Defining placeholder schemas for
    the ops its Python code registers fakes for lets the pure-Python model code import; a model that calls one
    of these ops raises (they have no kernel). Idempotent; call before importing torchvision, timm or diffusers."""
    import torch

    try:
        torch.ops.torchvision.nms.default                      # noqa: B018 - probing the registry
        return
    except (AttributeError, RuntimeError):
        pass
    lib = torch.library.Library("torchvision", "DEF")          # kept alive by the module-level reference below
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _LIBS.append(lib)


_LIBS: list = []
