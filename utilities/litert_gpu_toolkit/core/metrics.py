"""How close is an output to its reference? One set of metrics used by the checker, bisect and recipes."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class Comparison:
    max_abs: float          # max |out - ref| over finite positions
    max_rel: float          # max |out - ref| / max(|ref|, eps), eps = 1e-6 * max|ref|
    corr: float             # Pearson correlation (nan when either side is constant)
    cosine: float           # cosine similarity of the flattened tensors
    nonfinite: int          # count of NaN / inf in `out`
    all_zero: bool          # `out` is exactly zero everywhere while `ref` is not
    bit_identical: bool     # `out` equals `ref` bit for bit
    size: int
    snr_db: float = float("nan")   # 10 log10(sum ref^2 / sum (out - ref)^2) over finite positions; inf when equal

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in asdict(self).items()}


def compare(out: np.ndarray, ref: np.ndarray) -> Comparison:
    """Compare `out` against `ref` (shapes must match after squeezing size-1 axes)."""
    out = np.asarray(out)
    ref = np.asarray(ref)
    if out.shape != ref.shape:
        if out.size == ref.size and np.squeeze(out).shape == np.squeeze(ref).shape:
            out = out.reshape(ref.shape)
        else:
            raise ValueError(f"shape mismatch: output {out.shape} vs reference {ref.shape}")
    bit_identical = out.dtype == ref.dtype and np.array_equal(out, ref, equal_nan=True)
    o = out.astype(np.float64).ravel()
    r = ref.astype(np.float64).ravel()
    finite = np.isfinite(o) & np.isfinite(r)
    nonfinite = int(np.size(o) - np.count_nonzero(np.isfinite(o)))
    if finite.any():
        diff = np.abs(o[finite] - r[finite])
        scale = np.abs(r[finite])
        eps = 1e-6 * max(float(scale.max()), 1e-30)
        max_abs = float(diff.max())
        max_rel = float((diff / np.maximum(scale, eps)).max())
    else:
        max_abs = max_rel = float("inf")
    if finite.sum() > 1 and np.std(o[finite]) > 0 and np.std(r[finite]) > 0:
        corr = float(np.corrcoef(o[finite], r[finite])[0, 1])
    elif finite.any() and np.array_equal(o[finite], r[finite]):
        corr = 1.0
    else:
        corr = float("nan")
    norm = np.linalg.norm(o[finite]) * np.linalg.norm(r[finite]) if finite.any() else 0.0
    cosine = float(np.dot(o[finite], r[finite]) / norm) if norm > 0 else float("nan")
    all_zero = bool(np.all(o == 0) and np.any(r != 0))
    return Comparison(max_abs, max_rel, corr, cosine, nonfinite, all_zero, bool(bit_identical), int(o.size),
                      snr_db(o[finite], r[finite]) if finite.any() else float("nan"))


def box_iou(a, b) -> float:
    """IoU of two [x1, y1, x2, y2] boxes (continuous coordinates); 0 when their union is empty."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def snr_db(out: np.ndarray, ref: np.ndarray) -> float:
    """Signal-to-noise ratio of `out` against `ref` in dB: 10 log10(sum ref^2 / sum (out - ref)^2).

    inf when the two are equal; -inf when the reference is all zero but `out` is not."""
    o = np.asarray(out, dtype=np.float64).ravel()
    r = np.asarray(ref, dtype=np.float64).ravel()
    noise = float(np.sum((o - r) ** 2))
    signal = float(np.sum(r ** 2))
    if noise == 0.0:
        return float("inf")
    if signal == 0.0:
        return float("-inf")
    return float(10.0 * np.log10(signal / noise))
