"""Shape buckets at run time: pick the smallest signature that holds an input and pad it to that size.

`export --task ...` with several sizes writes one file with a signature per size, the weights stored once:

    --seq-len 32,64,128          text      seq_32, seq_64, seq_128        (tokens)
    --image-size 224,320         images    img_224, img_320               (the square side, pixels)
    --audio-seconds 1,2.5        audio     audio_1000ms, audio_2500ms     (milliseconds of samples)

An app with a 10-token sentence runs `seq_32`, one with 100 tokens `seq_128`: less work than padding everything to
the longest. The export checks every bucket against torch at its own size.

What padding means differs by kind, and only text is exact:
- text: padded positions are masked (attention_mask 0), so the bucket does not change the result beyond the GPU's
  own rounding (tests check one sentence in two buckets);
- images and audio: nothing masks a padded pixel or sample. `pad_image_to_bucket` / `pad_audio_to_bucket` pad
  with zeros (after normalisation: the mean colour; silence), and the outputs are the model's outputs *for the
  padded input* -- a convolution near the edge sees the zeros. For a classifier an app usually resizes to the
  bucket instead; for dense outputs it crops the valid region (`valid_fraction`).

    from litert_gpu_toolkit.runtime.buckets import buckets_of, pick_bucket, pad_to_bucket
    sizes = buckets_of(signature_keys)                   # {"seq_32": 32, ...}
    key = pick_bucket(sizes, len(ids))                   # "seq_32"
    feeds = pad_to_bucket({"input_ids": ids, "attention_mask": mask}, sizes[key])

The native runner picks and pads a bucket itself: a job entry whose signature is `seq_*`, `img_*` or `audio_*`
(phone/protocol.py).
"""
from __future__ import annotations

import re

import numpy as np

# kind -> (signature key pattern, the unit its number counts)
KINDS = {"seq": (re.compile(r"^seq_(\d+)$"), "tokens"), "img": (re.compile(r"^img_(\d+)$"), "pixels"),
         "audio": (re.compile(r"^audio_(\d+)ms$"), "ms")}


class NoBucketFits(ValueError):
    """The input is larger than the largest bucket."""


def bucket_name(kind: str, size: float) -> str:
    """The signature key of a bucket: seq_<tokens>, img_<side>, audio_<milliseconds>ms."""
    if kind == "audio":
        return f"audio_{int(round(size * 1000))}ms"          # size in seconds
    if kind not in KINDS:
        raise ValueError(f"unknown bucket kind {kind!r}; known: {', '.join(KINDS)}")
    return f"{kind}_{int(size)}"


def buckets_of(signature_keys, kind: str = "seq") -> dict[str, int]:
    """{signature key: its size} for the `kind` buckets among `signature_keys`, smallest first."""
    pattern = KINDS[kind][0]
    found = {k: int(m.group(1)) for k in signature_keys if (m := pattern.match(k))}
    return dict(sorted(found.items(), key=lambda kv: kv[1]))


def pick_bucket(buckets: dict[str, int], size: int, unit: str = "tokens") -> str:
    """The key of the smallest bucket that holds `size` (tokens, the image's longer side, milliseconds);
    NoBucketFits when none does."""
    for key, n in sorted(buckets.items(), key=lambda kv: kv[1]):
        if n >= size:
            return key
    raise NoBucketFits(f"{size} {unit} do not fit the largest bucket ({max(buckets.values(), default=0)}): "
                       "truncate, or export with a larger size")


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


def pad_image_to_bucket(pixels: np.ndarray, side: int) -> np.ndarray:
    """[batch, channels, H, W] (H, W <= side) padded at the bottom and right with 0 to [batch, channels, side,
    side]. Not masked: the model sees the zeros (see the module's note)."""
    pixels = np.asarray(pixels)
    if pixels.ndim != 4 or max(pixels.shape[2:]) > side:
        raise ValueError(f"pixels: shape {pixels.shape} is not [batch, channels, H <= {side}, W <= {side}]")
    return np.pad(pixels, ((0, 0), (0, 0), (0, side - pixels.shape[2]), (0, side - pixels.shape[3])))


def pad_audio_to_bucket(values: np.ndarray, samples: int) -> np.ndarray:
    """[batch, T] (T <= samples) padded at the end with silence (0) to [batch, samples]. Not masked: the frames
    after the clip's end are the model's output for silence; keep the first `valid_fraction` of them."""
    values = np.asarray(values)
    if values.ndim != 2 or values.shape[1] > samples:
        raise ValueError(f"values: shape {values.shape} is not [batch, T <= {samples}]")
    return np.pad(values, ((0, 0), (0, samples - values.shape[1])))


def valid_fraction(given: int, bucket: int) -> float:
    """The share of a padded bucket that holds the input (per side for images, of the frames for audio): an app
    keeps that leading part of a dense output."""
    if not 0 < given <= bucket:
        raise ValueError(f"{given} is not within a bucket of {bucket}")
    return given / bucket
