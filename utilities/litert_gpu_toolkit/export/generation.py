"""text-generation for `export`: a causal LM as two graphs an on-device decode loop drives.

prefill: input_ids, attention_mask [1, S] (a right-padded prompt) -> logits [1, S, vocab] and every layer's
    keys and values for the S positions (k_0, v_0, ...: [1, kv_heads, S, head_dim]).
decode: one token (input_ids [1, 1]), its position (position_ids [1, 1]), the host's cache of C rows per layer
    (k_0, v_0, ...: [1, kv_heads, C, head_dim], or whatever rows the model's own cache holds: a latent cache for
    multi-head latent attention) and attention_mask [1, C + 1] (1 for every cache row in use,
    then 1 for the new token) -> logits [1, 1, vocab] and the new token's keys and values (k_new_0, ...:
    [1, kv_heads, 1, head_dim]), which the host writes into the next free row.

Only the new rows leave the decode graph: the host owns the cache, so no output aliases an input (the
LiteRT hazard `rewrites.output_aliasing` covers) and no graph needs a scatter. The model itself is Hugging
Face's, called with a `DynamicCache` filled from the inputs; the toolkit's rewrites make it GPU-clean.
"""
from __future__ import annotations

import inspect



def _cache_keyword(model) -> str:
    """The keyword the model's forward takes its cache by (`cache` in transformers 5, `past_key_values` before)."""
    params = inspect.signature(model.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    raise ValueError(f"{type(model).__name__}.forward takes no KV cache: text-generation needs one")


def _layers_of(cache) -> list[tuple]:
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return [(k, v) for k, v in cache]


def _geometry(config) -> tuple[int, int, int]:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = getattr(text, "num_attention_heads", None)
    if not heads:
        raise ValueError(f"{type(config).__name__} has no attention heads (a state-space or recurrent language "
                         "model): text-generation exports attention decoders whose state is a KV cache. Convert "
                         "one step of its recurrence with convert_for_gpu (state in, state out) instead")
    kinds = {str(t) for t in getattr(text, "layer_types", None) or ()}
    other = sorted(t for t in kinds if not t.endswith("attention") or t == "linear_attention")
    if other:
        raise ValueError(f"{type(config).__name__} mixes attention with {', '.join(map(str, other))} layers, whose "
                         "state is not a KV cache (a convolution or recurrent state, replaced each step): "
                         "text-generation exports attention decoders whose whole state is a KV cache. Convert one "
                         "step with convert_for_gpu (every layer's state in and out) instead")
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return text.num_hidden_layers, kv_heads, head_dim


def generation_graphs(model, config, seq_len: int, cache_len: int, seed: int) -> list[tuple]:
    """[(name, module, example inputs, notes)] for prefill and decode; ValueError for shapes that cannot work."""
    import torch
    import transformers

    keyword = _cache_keyword(model)
    layers, kv_heads, head_dim = _geometry(config)
    limit = getattr(config, "max_position_embeddings", None)
    if limit and cache_len + 1 > limit:
        raise ValueError(f"--cache-len {cache_len} + 1 exceeds the model's max_position_embeddings {limit}")
    if seq_len > cache_len:
        raise ValueError(f"--seq-len {seq_len} is longer than --cache-len {cache_len}: "
                          "the prompt's keys and values would not fit the decode cache")

    class Prefill(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True)
            cache = getattr(out, keyword, None) or out.past_key_values
            named = {"logits": out.logits}
            for i, (k, v) in enumerate(_layers_of(cache)):
                named[f"k_{i}"], named[f"v_{i}"] = k, v
            return named

    class Decode(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, position_ids, attention_mask, **kv):
            cache = transformers.DynamicCache()
            for i in range(layers):
                cache.update(kv[f"k_{i}"], kv[f"v_{i}"], i)
            out = self.model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                             use_cache=True, **{keyword: cache})
            named = {"logits": out.logits}
            for i, (k, v) in enumerate(_layers_of(getattr(out, keyword, None) or out.past_key_values)):
                named[f"k_new_{i}"], named[f"v_new_{i}"] = k[:, :, -1:], v[:, :, -1:]
            return named

    g = torch.Generator().manual_seed(seed)
    vocab = config.get_text_config().vocab_size if hasattr(config, "get_text_config") else config.vocab_size
    s, c = seq_len, cache_len
    prompt = max(1, s * 3 // 4)
    mask = torch.zeros(1, s, dtype=torch.int32)
    mask[:, :prompt] = 1
    prefill_inputs = {"input_ids": torch.randint(0, vocab, (1, s), generator=g, dtype=torch.int32) * mask,
                      "attention_mask": mask}
    used = max(1, c // 2)               # an example with half the cache filled: the mask's both values occur
    dmask = torch.zeros(1, c + 1, dtype=torch.int32)
    dmask[:, :used] = 1
    dmask[:, -1] = 1
    decode_inputs = {"input_ids": torch.randint(0, vocab, (1, 1), generator=g, dtype=torch.int32),
                     "position_ids": torch.tensor([[used]], dtype=torch.int32), "attention_mask": dmask}
    # each layer's cache rows as the model's own prefill makes them: [1, heads, rows, width] per keys and values,
    # which is the config's kv heads x head_dim for most models and something else for others (DeepSeek's
    # multi-head latent attention caches one latent "head" of kv_lora_rank, and its rotary key beside it)
    with torch.no_grad():
        made = Prefill().eval()(**prefill_inputs)
    geometry = {name: tuple(made[name].shape) for name in made if name != "logits"}
    for name, (_, heads, _, width) in geometry.items():
        decode_inputs[name] = torch.randn(1, heads, c, width, generator=g)
    kinds = sorted({(h, w) for (_, h, _, w) in geometry.values()})
    shape = (f"{kv_heads} kv heads x {head_dim}" if kinds == [(kv_heads, head_dim)]
             else ", ".join(f"{h} x {w}" for h, w in kinds) + " (heads x width, from the model's prefill)")
    notes = [f"prefill: {s} tokens; decode: a cache of {c} rows ({layers} layers x {shape}); seeded example tokens"]
    return [("prefill", Prefill().eval(), prefill_inputs, notes), ("decode", Decode().eval(), decode_inputs, notes)]
