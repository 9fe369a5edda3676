"""Shape buckets at run time: pick the smallest signature that fits a sequence and pad it there.

`export --task ... --seq-len 32,64,128` writes one file with a signature per length (`seq_32`, `seq_64`, ...), the
weights stored once. An app with a 10-token sentence runs `seq_32`, one with 100 tokens `seq_128`: less work than
padding everything to the longest. Padding is masked (attention_mask 0), so the bucket does not change the result
beyond the GPU's own rounding -- the export checks every bucket against torch, and tests check that one sentence
gives the same output in two buckets.

    from litert_gpu_toolkit.runtime.buckets import buckets_of, pick_bucket, pad_to_bucket
    sizes = buckets_of(signature_keys)                   # {"seq_32": 32, ...}
    key = pick_bucket(sizes, len(ids))                   # "seq_32"
    feeds = pad_to_bucket({"input_ids": ids, "attention_mask": mask}, sizes[key])
"""
from __future__ import annotations

import re

import numpy as np

_BUCKET = re.compile(r"^seq_(\d+)$")


class NoBucketFits(ValueError):
    """The sequence is longer than the largest bucket."""


def buckets_of(signature_keys) -> dict[str, int]:
    """{signature key: its length} for the bucket signatures among `signature_keys`, shortest first."""
    found = {k: int(m.group(1)) for k in signature_keys if (m := _BUCKET.match(k))}
    return dict(sorted(found.items(), key=lambda kv: kv[1]))


def pick_bucket(buckets: dict[str, int], length: int) -> str:
    """The key of the shortest bucket that holds `length` tokens; NoBucketFits when none does."""
    for key, size in sorted(buckets.items(), key=lambda kv: kv[1]):
        if size >= length:
            return key
    raise NoBucketFits(f"{length} tokens do not fit the largest bucket ({max(buckets.values(), default=0)}): "
                       "truncate, or export with a longer --seq-len")


def pad_to_bucket(inputs: dict[str, np.ndarray], size: int, pad_id: int = 0) -> dict[str, np.ndarray]:
    """Each [batch, length] array padded on the right to [batch, size]: token ids with `pad_id`, every other input
    (attention_mask, token_type_ids) with 0 -- a padded position is masked out, never attended to."""
    out = {}
    for name, arr in inputs.items():
        arr = np.asarray(arr)
        if arr.ndim != 2 or arr.shape[1] > size:
            raise ValueError(f"{name}: shape {arr.shape} is not [batch, length <= {size}]")
        fill = pad_id if name == "input_ids" else 0
        out[name] = np.pad(arr, ((0, 0), (0, size - arr.shape[1])), constant_values=fill)
    return out
