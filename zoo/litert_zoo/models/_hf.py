"""Builders for `transformers` models: a config class and keyword arguments in, a zoo builder out."""
from __future__ import annotations

from typing import Callable

from ..build import built, ids, install_torchvision_placeholders, text_inputs


def _config(config_name: str, config: dict):
    install_torchvision_placeholders()              # transformers imports torchvision when it is installed
    import transformers

    cfg = getattr(transformers, config_name)(**config)
    for k in ("attn_implementation", "_attn_implementation"):
        try:
            setattr(cfg, k, "eager")
        except Exception:                                 # noqa: BLE001 - older configs
            pass
    return cfg


def _hf(cls_name: str, config_name: str, inputs: Callable, call: Callable | None = None, module: str | None = None,
        **config):
    """A builder: transformers.<cls_name>(<config_name>(**config)), weights redrawn, wrapped."""
    def build():
        import importlib

        cfg = _config(config_name, config)
        import transformers

        src = importlib.import_module(module) if module else transformers
        model = getattr(src, cls_name)(cfg)
        return built(model, inputs(), call)
    return build


def _masked(token_types: bool = True, position_ids: bool = False, vocab: int = 100) -> Callable:
    """Inputs of a text encoder as users pass them: padded batch of 2 with its attention_mask (see text_inputs)."""
    return lambda: text_inputs(vocab=vocab, token_types=token_types, position_ids=position_ids)


def _prompt(n: int = 12) -> Callable:
    return lambda: {"input_ids": ids(n)[0]}


def _causal_lm(cls_name: str, config_name: str, n: int = 12, **config):
    """A causal LM's logits over an n-token prompt, no cache (`use_cache=False`)."""
    return _hf(cls_name, config_name, _prompt(n), call=lambda m, **kw: m(**kw, use_cache=False), **config)


def _decode_step(cls_name: str, config_name: str, past: int = 8, **config):
    """One decode step with a KV cache, as an on-device generator runs it: inputs are the next token and every
    layer's past keys and values ([1, kv_heads, past, head_dim] each); the module builds a DynamicCache from them
    inside forward and returns the logits and every layer's updated keys and values."""
    def build():
        import torch
        import transformers
        from torch import nn

        from ..weights import activations_mode, apply_trained_ranges, redraw_weights

        cfg = _config(config_name, config)
        model = getattr(transformers, cls_name)(cfg).eval()
        mode = activations_mode()
        redraw_weights(model, activations=mode)
        heads = cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        layers = cfg.num_hidden_layers

        class DecodeStep(nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, token, *kv):
                cache = transformers.DynamicCache()
                for i in range(layers):
                    cache.update(kv[2 * i], kv[2 * i + 1], i)
                out = self.model(input_ids=token, cache=cache, use_cache=True)
                new = getattr(out, "cache", None) or out.past_key_values
                flat = [t for layer in new.layers for t in (layer.keys, layer.values)]
                return (out.logits, *flat)

        g = torch.Generator().manual_seed(1)
        token = torch.randint(0, cfg.vocab_size, (1, 1), generator=g)
        kv = tuple(torch.randn(1, kv_heads, past, head_dim, generator=g) for _ in range(2 * layers))
        step = DecodeStep().eval()
        if mode == "trained":
            step.planted = apply_trained_ranges(model, lambda: step(token, *kv))     # for zoo/planted.py
        return step, (token, *kv)
    return build


_VIT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
            patch_size=8)
_TEXT = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             max_position_embeddings=64)
# the wav2vec2-family speech encoders: a 2-layer conv feature extractor (stride 20) under a tiny transformer
_SPEECH = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, conv_dim=[32, 32],
               conv_stride=[5, 4], conv_kernel=[10, 4], num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
_LLM = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, max_position_embeddings=64, head_dim=16)
