"""Helpers the zoo's architecture table builds from: seeded inputs, tiny configs, a wrapper that returns one tensor.

Every builder returns a zero-argument function; calling it imports torch / transformers, builds the model from a
seeded config (nothing is downloaded), redraws its weights (`weights.redraw_weights`) and returns
`(module returning one tensor, example inputs)`.
"""
from __future__ import annotations

from typing import Callable

from .weights import redraw_weights


def _first_tensor(out):
    import torch

    if isinstance(out, torch.Tensor):
        return out
    for key in ("last_hidden_state", "predicted_depth", "logits", "audio_values", "pooler_output"):
        v = getattr(out, key, None) if not isinstance(out, dict) else out.get(key)
        if isinstance(v, torch.Tensor):
            return v
    if isinstance(out, (tuple, list)):
        return _first_tensor(out[0])
    if hasattr(out, "to_tuple"):
        return _first_tensor(out.to_tuple()[0])
    raise TypeError(f"no tensor output in {type(out).__name__}")


def _wrap(model, call: Callable | None = None):
    """A module whose forward returns one tensor: `call(model, *inputs)` or model(*inputs)'s main output."""
    from torch import nn

    class ZooWrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *xs):
            out = call(self.model, *xs) if call else self.model(*xs)
            return _first_tensor(out)

    return ZooWrapper().eval()


def _image(size=32, channels=3):
    import torch

    return (torch.randn(1, channels, size, size, generator=torch.Generator().manual_seed(1)),)


def _ids(n=16, vocab=100):
    import torch

    return (torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(1)),)


def _hf(cls_name: str, config_name: str, inputs: Callable, call: Callable | None = None, module: str | None = None,
        **config):
    """A builder: transformers.<cls_name>(<config_name>(**config)), weights redrawn, wrapped."""
    def build():
        import importlib

        import transformers

        src = importlib.import_module(module) if module else transformers
        cfg = getattr(transformers, config_name)(**config)
        for k in ("attn_implementation", "_attn_implementation"):
            try:
                setattr(cfg, k, "eager")
            except Exception:                                 # noqa: BLE001 - older configs
                pass
        model = getattr(src, cls_name)(cfg).eval()
        redraw_weights(model)
        return _wrap(model, call), inputs()
    return build


_VIT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
            patch_size=8)
_TEXT = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             max_position_embeddings=64)
_LLM = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, max_position_embeddings=64, head_dim=16)


def _audio(n=1600):
    import torch

    return (torch.randn(1, n, generator=torch.Generator().manual_seed(1)),)


def _mel(frames, bins, layout="bf"):
    def make():
        import torch

        shape = (1, bins, frames) if layout == "bf" else (1, frames, bins)
        return (torch.randn(*shape, generator=torch.Generator().manual_seed(1)),)
    return make


def _codes(n=16, codebook=64, books=2):
    def make():
        import torch

        return (torch.randint(0, codebook, (1, 1, books, n), generator=torch.Generator().manual_seed(1)),)
    return make


def _spectrogram(frames=16, bins=16):
    def make():
        import torch

        return (torch.randn(1, frames, bins, generator=torch.Generator().manual_seed(1)),)
    return make
