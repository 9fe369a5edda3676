"""`l2_normalize` (the handler on F.normalize) in fp16: a zero vector and a vector past 256.

Cosine attention over a padded window (Swin-V2: padded tokens are zeros and the key bias is zeroed) normalises
all-zero keys; F.normalize's eps = 1e-12 is 0 in fp16, so the plain graph gives 0 / 0 on the GPU and the
softmax spreads the NaN. Trained outlier channels (|x| in the hundreds) push the sum of squares past 65504.
The spec's three checks: equal to F.normalize in fp32 (bound: 1e-6 relative, x = 0 exactly), the scaled form
in the graph, and on the GPU the plain model's non-finite output turned into a match."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.lowering.export import export_tflite
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.rewrites.identical_or_constant_inputs import l2_normalize
from wall_checks import _gpu_clean, _gpu_wrong


class CosineAttention(nn.Module):
    """Swin-V2's scores: normalised queries and keys, a logit scale, softmax, values."""

    def forward(self, q, k, v):
        scores = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1) * 10.0
        return scores.softmax(-1) @ v


def _qkv(scale=1.0, zero_keys=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 2, 16, 32, generator=g) for _ in range(3))
    if zero_keys:
        k[..., zero_keys:, :] = 0          # the padded tokens of a window
    return q * scale, k * scale, v


@pytest.mark.parametrize("scale", [1e-3, 1.0, 400.0, 1e5])
def test_l2_normalize_matches_f_normalize(scale):
    x = torch.randn(6, 64, generator=torch.Generator().manual_seed(1)) * scale
    x[2] = 0.0
    for dim in (0, 1, -1):
        want, got = F.normalize(x, dim=dim), l2_normalize(x, dim=dim)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    assert torch.equal(l2_normalize(x, dim=1)[2], torch.zeros(64))      # a zero vector stays zero


def test_l2_normalize_bound_below_the_floor():
    """Below ||x|| = 2^-28 (every entry far under fp16's smallest subnormal) the result is scaled down by
    ||x|| / 2^-28, as the docstring says; at and above it, F.normalize's value."""
    x = torch.full((1, 4), 2.0 ** -40)
    norm = float(torch.linalg.vector_norm(x))
    torch.testing.assert_close(l2_normalize(x, dim=1), x / 2.0 ** -28, rtol=1e-6, atol=0)
    assert norm < 2.0 ** -28
    y = torch.full((1, 4), 2.0 ** -27)
    torch.testing.assert_close(l2_normalize(y, dim=1), F.normalize(y, dim=1), rtol=1e-6, atol=0)


def test_the_graph_works_on_the_scaled_vector(tmp_path):
    q, k, v = _qkv()
    plain = export_tflite(CosineAttention().eval(), (q, k, v), tmp_path / "plain.tflite")
    wrapped = GpuRewriteWrapper(CosineAttention().eval(), include=["l2_normalize"])
    rewritten = export_tflite(wrapped, (q, k, v), tmp_path / "rewritten.tflite")
    with torch.no_grad():
        wrapped(q, k, v)
    assert {c.rewrite for c in wrapped.changes} == {"l2_normalize"}
    maxes = [o.op for o in read_model_info(rewritten).ops if o.op in ("REDUCE_MAX", "MAX_POOL_2D")]
    assert len(maxes) == 2, [o.op for o in read_model_info(rewritten).ops]      # one scale per normalised tensor
    assert not [o.op for o in read_model_info(plain).ops if o.op in ("REDUCE_MAX", "MAX_POOL_2D")]


@pytest.mark.slow
@pytest.mark.parametrize("case", ["zero keys", "outlier range"])
def test_l2_normalize_on_the_gpu(gpu, tmp_path, case):
    inputs = _qkv() if case == "zero keys" else _qkv(scale=300.0, zero_keys=0)
    _gpu_wrong(CosineAttention(), inputs, tmp_path / "plain.tflite")
    _gpu_clean(GpuRewriteWrapper(CosineAttention().eval(), include=["l2_normalize"]), inputs, tmp_path / "safe.tflite")
    if case == "zero keys":
        result = convert_for_gpu(CosineAttention().eval(), inputs, tmp_path / "auto.tflite")   # a default
        assert result.verdict == "PASS", result.summary()
        assert "l2_normalize" in {ch.rewrite for ch in result.changes}
