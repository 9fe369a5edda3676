"""all-MiniLM-L6-v2 as one module: HF BertModel + mean pooling + L2 normalisation, the GPU rewrites switchable.

Imported by export_encoder.py (and the tests); it imports torch and transformers, so the scripts import it
inside main() and their --help stays instant.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from litert_gpu_toolkit.rewrites.fp16_overflow import MASK_FILL

MASK_VALUE = -MASK_FILL  # finite in fp16 (HF's finfo(fp32).min becomes -inf there); exp(-1e4) is 0 in fp32 too


class SentenceEncoder(torch.nn.Module):
    """HF BertModel + mean pooling + L2 normalisation (sentence-transformers' Pooling and Normalize).

    rewrites=True: the additive mask is (1 - attention_mask) * -1e4 with shape [B, 1, 1, S], passed to
    BERT as a ready 4-D mask (HF uses a 4-D mask as given). Exact: every padded key gets weight
    exp(-1e4 + s) == 0 in fp32, as with HF's own mask. Removes GATHER_ND / SELECT_V2 / LOGICAL_AND.
    rewrites=False: BERT gets the integer mask and builds its own (the plain conversion).
    The normalisation is F.normalize either way: `convert_for_gpu` swaps in the toolkit's l2_normalize (no
    MUL(x, x), which phone delegates decline) by itself.
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
        return {"embedding": F.normalize(pooled, dim=1)}


def load_encoder(model_dir: Path, rewrites: bool = True):
    from transformers import AutoModel, AutoTokenizer

    bert = AutoModel.from_pretrained(model_dir, trust_remote_code=False, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    return SentenceEncoder(bert.eval(), rewrites).eval(), tokenizer
