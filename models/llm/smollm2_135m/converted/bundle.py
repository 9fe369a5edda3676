"""The `.litertlm` side of the recipe: LiteRT-LM's call sequence replayed in torch (to check the graphs before they
are packed), the bundle's LLM metadata, the packing with litert-lm-builder, and a tiny random model with the real
tokenizer for tests. `export_llm.py --format litertlm` drives it; dump_llm_ref.py --tiny uses `load`."""
from __future__ import annotations

from pathlib import Path

PROMPT = "What is the capital of France?"
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")
LITERT_LM_VERSION = "0.18.1"


def tiny_model(tokenizer, layers: int = 2, seed: int = 0):
    """A random-weight Llama with SmolLM2's vocabulary, head layout and rotary base, but 2 small blocks: the
    bundle machinery end to end in seconds (the CI test). fp32, eval."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=576, intermediate_size=256, num_hidden_layers=layers,
                         num_attention_heads=9, num_key_value_heads=3, rope_theta=100000.0, tie_word_embeddings=True,
                         rms_norm_eps=1e-5, max_position_embeddings=8192, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.bos_token_id)
    torch.manual_seed(seed)
    lm = LlamaForCausalLM(config).to(torch.float32).eval()
    with torch.no_grad():   # larger weights than the init's 0.02 std: logits with clear winners (no greedy ties)
        for p in lm.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.08)
    return lm


def load(args):
    """(lm, tokenizer) for --tiny or the real weights."""
    import decoder as D

    if not args.tiny:
        return D.load_model(args.weights)
    from transformers import AutoTokenizer

    from litert_gpu_toolkit.core.weights import resolve_model_dir

    model_dir = resolve_model_dir(args.weights, default=D.package_dir)
    gguf = {"gguf_file": D.GGUF_FILE} if (model_dir / D.GGUF_FILE).exists() else {}
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False, **gguf)
    return tiny_model(tokenizer), tokenizer


def prompt_ids(tokenizer, prompt: str) -> list[int]:
    """The chat-templated prompt's token ids (as dump_llm_ref.py builds them)."""
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                        tokenize=True, return_dict=False)
    return list(ids["input_ids"]) if isinstance(ids, dict) else list(ids)


def step_generate(D, prefill, decode, dims, ids: list[int], steps: int, length: int, capacity: int,
                  embed=None):
    """Greedy generation through the two LitertLmStep modules in torch, the way LiteRT-LM calls them: the prompt
    but its last token in `length`-token prefill chunks (right-padded with 0 and input_pos 0, as the runtime pads),
    then decode from the last prompt token; with `embed` (the token embedding module) the calls take `embeddings`,
    as with a TokenEmbedder in the bundle. Returns (tokens, logits of each decode call)."""
    import numpy as np
    import torch

    cache = {f"kv_cache_{k}": torch.from_numpy(v) for k, v in D.empty_cache(dims, capacity).items()}
    body = ids[:-1]

    def first(tokens):
        return {"tokens": tokens} if embed is None else {"embeddings": embed(tokens)}

    with torch.no_grad():
        for start in range(0, len(body), length):
            chunk = body[start:start + length]
            tokens = np.zeros((1, length), np.int32)
            tokens[0, :len(chunk)] = chunk
            pos = np.zeros((length,), np.int32)
            pos[:len(chunk)] = np.arange(start, start + len(chunk))
            cache = prefill(**first(torch.from_numpy(tokens)), input_pos=torch.from_numpy(pos), **cache)
        token, out_tokens, logits = ids[-1], [], []
        for j in range(steps):
            out = decode(**first(torch.tensor([[token]], dtype=torch.int32)),
                         input_pos=torch.tensor([len(ids) - 1 + j], dtype=torch.int32), **cache)
            step_logits = out.pop("logits")[0, -1]
            cache = out
            token = int(step_logits.argmax())
            out_tokens.append(token)
            logits.append(step_logits.numpy())
    return out_tokens, logits


def torch_check(D, lm, tokenizer, prefill, decode, length: int, capacity: int, steps: int = 8,
                embedder: bool = False) -> float:
    """The step modules' greedy tokens and logits against the HF model's own greedy loop on one prompt."""
    import torch

    dims = D.Dims.of(lm.config)
    ids = prompt_ids(tokenizer, PROMPT)
    got, got_logits = step_generate(D, prefill, decode, dims, ids, steps, length, capacity,
                                    embed=lm.model.embed_tokens if embedder else None)
    want, err = [], 0.0
    with torch.no_grad():
        seq = list(ids)
        for j in range(steps):
            ref = lm(torch.tensor([seq])).logits[0, -1]
            err = max(err, (torch.from_numpy(got_logits[j]) - ref).abs().max().item())
            want.append(int(ref.argmax()))
            seq.append(got[j] if j < len(got) else want[-1])   # teacher-forced on the step modules' tokens
    same = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), steps)
    print(f"      {len(ids)}-token prompt, {steps} greedy steps: tokens equal for {same}/{steps}; "
          f"max |step logits - HF| = {err:.2e}")
    if same < steps:
        raise SystemExit(f"export_llm.py --format litertlm: the step modules diverge from HF at step {same}: "
                         f"{got} vs {want}")
    return err


def llm_metadata_text(tokenizer, capacity: int) -> str:
    """LlmMetadata as a text proto (litert-lm-builder reads text or binary)."""
    ids = [tokenizer.convert_tokens_to_ids(t) for t in STOP_TOKENS]
    stops = "\n".join(f"stop_tokens {{ token_ids {{ ids: {i} }} }}" for i in ids if i is not None)
    return f"{stops}\nmax_num_tokens: {capacity}\nllm_model_type {{ generic_model {{ }} }}\n"


def build_bundle(tflite: Path, tokenizer_dir: Path, metadata: Path, template: Path | None, out: Path,
                 embedder: Path | None = None) -> Path:
    from litert_lm_builder import litertlm_builder as B

    builder = B.LitertLmFileBuilder()
    builder.add_system_metadata(B.Metadata(key="model", value="SmolLM2-135M-Instruct (litert-gpu recipe)",
                                           dtype=B.DType.STRING))
    builder.add_llm_metadata(str(metadata), jinja_prompt_template_path=str(template) if template else None)
    if embedder is not None:
        builder.add_tflite_model(str(embedder), B.TfLiteModelType.EMBEDDER)
    builder.add_tflite_model(str(tflite), B.TfLiteModelType.PREFILL_DECODE)
    builder.add_hf_tokenizer(str(tokenizer_dir / "tokenizer.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    with open(tmp, "wb") as f:
        builder.build(f)
    tmp.replace(out)
    return out
