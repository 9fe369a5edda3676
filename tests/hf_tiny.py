"""Tiny Hugging Face models built from configs (never downloaded), called the way users call them.

Weights are redrawn so activations are O(1) (HF's 0.02-std init makes every output nearly constant, and a
correlation on a constant says nothing). Shared by the rewrite tests and tests/toolkit/test_hf_calling_conventions.py.
"""
import os

import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def redraw(model: nn.Module, seed: int = 0) -> nn.Module:
    """Matrices ~ N(0, 1/fan_in), norm weights ~ 1 + N(0, 0.01), other vectors ~ N(0, 0.01)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
            elif name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return model.eval()


class Outputs(nn.Module):
    """The model's named outputs as a tuple (what a user reads off the output object)."""

    def __init__(self, model: nn.Module, keys):
        super().__init__()
        self.model, self.keys = model, list(keys)

    def forward(self, *args):
        out = self.model(*args)
        return tuple(out[k] for k in self.keys)


ENCODERS = ("bert", "roberta", "xlm_roberta", "electra", "albert", "distilbert", "mpnet")


def text_encoder(arch: str, impl: str = "eager"):
    """(model returning last_hidden_state [and pooler_output], (ids, attention_mask[, token_type_ids])):
    batch 2, the second row padded."""
    import transformers as T

    kw = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
              max_position_embeddings=64, attn_implementation=impl)
    keys, token_types = ["last_hidden_state", "pooler_output"], True
    if arch == "bert":
        model = T.BertModel(T.BertConfig(**kw))
    elif arch == "roberta":
        model = T.RobertaModel(T.RobertaConfig(**kw, pad_token_id=1))
    elif arch == "xlm_roberta":
        model = T.XLMRobertaModel(T.XLMRobertaConfig(**kw, pad_token_id=1))
    elif arch == "electra":
        model, keys = T.ElectraModel(T.ElectraConfig(**kw, embedding_size=32)), keys[:1]
    elif arch == "albert":
        model = T.AlbertModel(T.AlbertConfig(**kw, embedding_size=32))
    elif arch == "mpnet":
        model, token_types = T.MPNetModel(T.MPNetConfig(**kw)), False
    elif arch == "distilbert":
        cfg = T.DistilBertConfig(vocab_size=100, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                 max_position_embeddings=64, attn_implementation=impl)
        model, keys, token_types = T.DistilBertModel(cfg), keys[:1], False
    else:
        raise KeyError(arch)
    ids = torch.randint(3, 100, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 8:] = 0
    args = (ids, mask) + ((torch.zeros(2, 12, dtype=torch.long),) if token_types else ())
    return Outputs(redraw(model), keys).eval(), args


def clip_text(with_projection: bool = False, impl: str = "eager"):
    """CLIPTextModel (last_hidden_state, pooler_output) or ...WithProjection (text_embeds, last_hidden_state),
    called with (ids, attention_mask): batch 2, each row ends at its EOS, the second padded after it."""
    import transformers as T

    cfg = T.CLIPTextConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, max_position_embeddings=16, eos_token_id=99, bos_token_id=98,
                           pad_token_id=1, projection_dim=32, attn_implementation=impl)
    if with_projection:
        model, keys = T.CLIPTextModelWithProjection(cfg), ["text_embeds", "last_hidden_state"]
    else:
        model, keys = T.CLIPTextModel(cfg), ["last_hidden_state", "pooler_output"]
    ids = torch.randint(3, 90, (2, 12), generator=torch.Generator().manual_seed(4))
    ids[:, 0], ids[0, 11], ids[1, 7], ids[1, 8:] = 98, 99, 99, 1
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 8:] = 0
    return Outputs(redraw(model), keys).eval(), (ids, mask)


class Logits(nn.Module):
    """A causal LM called without a cache: ids -> logits."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, use_cache=False).logits


def causal_lm(arch: str, hidden: int = 96, heads: int = 6, kv_heads: int = 3, head_dim: int = 16,
              impl: str = "eager", layers: int = 2):
    """(LM for `arch`, config); the config's head_dim is set where the architecture takes one."""
    import transformers as T

    kw = dict(vocab_size=128, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
              num_key_value_heads=kv_heads, intermediate_size=2 * hidden, max_position_embeddings=64,
              attn_implementation=impl, head_dim=head_dim)
    if arch == "llama":
        model = T.LlamaForCausalLM(T.LlamaConfig(**kw))
    elif arch == "qwen2":
        model = T.Qwen2ForCausalLM(T.Qwen2Config(**kw))
    elif arch == "mistral":
        model = T.MistralForCausalLM(T.MistralConfig(**kw, sliding_window=None))
    elif arch == "gemma":
        model = T.GemmaForCausalLM(T.GemmaConfig(**kw))
    elif arch == "phi3":
        kw.pop("head_dim")                       # Phi-3: head_dim = hidden / heads
        model = T.Phi3ForCausalLM(T.Phi3Config(**kw, pad_token_id=0, bos_token_id=1, eos_token_id=2))
    else:
        raise KeyError(arch)
    return redraw(model)


def lm_logits(arch: str, **dims):
    """(Logits(model), (ids [1, 12],))."""
    ids = torch.randint(0, 128, (1, 12), generator=torch.Generator().manual_seed(2))
    return Logits(causal_lm(arch, **dims)).eval(), (ids,)


class DecodeStep(nn.Module):
    """One decode step with a KV cache held by the caller: (ids [1, 1], k_0, v_0, k_1, v_1, ...) ->
    (logits, new k_0, new v_0, ...). A transformers DynamicCache is built from the tensors inside forward."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, *kv):
        import transformers as T

        cache = T.DynamicCache(config=self.model.config)
        for i in range(len(kv) // 2):
            cache.update(kv[2 * i], kv[2 * i + 1], i)
        past = kv[0].shape[2]
        positions = torch.arange(past, past + ids.shape[1]).unsqueeze(0)
        out = self.model(input_ids=ids, past_key_values=cache, position_ids=positions, use_cache=True)
        return (out.logits,) + tuple(t for layer in out.past_key_values.layers for t in (layer.keys, layer.values))


def lm_decode_step(arch: str, past: int = 11, **dims):
    """(DecodeStep(model), (ids [1, 1], k/v [1, kv_heads, past, head_dim] per layer))."""
    model = causal_lm(arch, **dims)
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    g = torch.Generator().manual_seed(3)
    kv = tuple(torch.randn(1, cfg.num_key_value_heads, past, head_dim, generator=g)
               for _ in range(2 * cfg.num_hidden_layers))
    return DecodeStep(model).eval(), (torch.randint(0, 128, (1, 1), generator=g),) + kv
