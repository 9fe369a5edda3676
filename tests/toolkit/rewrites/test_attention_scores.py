"""Attention scores formed before their 1/sqrt(d) scale pass fp16's range (symptom `fp16_overflow`):
`patch_prescale_attention` moves the scale's power of two into the query projection. The spec's three checks:
bit-identical outputs in torch fp32 (bound 0), the converted graph's query weights scaled with no op added, and the
GPU-only fp16 run turned from non-finite into a match -- on a post-LN encoder layer written the way Hugging Face's
eager attention is, with an un-normalised input stream carrying outlier channels."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.lowering.export import gpu_vs_torch
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.fp16_overflow import patch_prescale_attention


class EagerAttention(nn.Module):
    """Self-attention as HF's BERT family writes it: matmul(q, k^T) * scaling, mask added, softmax (the layer's
    residual and norm left out: only the scores are under test)."""

    def __init__(self, width: int = 32, heads: int = 2, norm_q: bool = False):
        super().__init__()
        self.heads, self.head_dim = heads, width // heads
        self.scaling = self.head_dim ** -0.5
        self.query, self.key, self.value = (nn.Linear(width, width) for _ in range(3))
        self.out = nn.Linear(width, width)
        self.q_norm = nn.LayerNorm(self.head_dim) if norm_q else None

    def forward(self, x, mask):
        b, t, _ = x.shape
        split = lambda y: y.view(b, t, self.heads, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        if self.q_norm is not None:                      # a norm between projection and matmul: not foldable
            q = self.q_norm(q)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling + mask
        ctx = torch.matmul(F.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, t, -1)
        return self.out(ctx)


def _inputs(seed=0, outlier=200.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 8, 32, generator=g)
    x[..., 5] *= outlier                                 # an outlier channel in the incoming stream
    mask = torch.zeros(1, 1, 1, 8)
    mask[..., -2:] = torch.finfo(torch.float32).min     # padding: HF's additive mask
    return x, mask


def _model(**kw):
    torch.manual_seed(0)
    m = EagerAttention(**kw).eval()
    with torch.no_grad():                                # the projections amplify the outlier channel
        for lin in (m.query, m.key):
            lin.weight[:, 5] *= 4.0
    return m


def _score_peak(m, x) -> float:
    with torch.no_grad():
        q, k = m.query(x), m.key(x)
        b, t, _ = x.shape
        q = q.view(b, t, m.heads, m.head_dim).transpose(1, 2)
        k = k.view(b, t, m.heads, m.head_dim).transpose(1, 2)
        return float(torch.matmul(q, k.transpose(2, 3)).abs().max())


def test_prescale_is_bit_identical_in_torch():
    model, x = _model(), _inputs()
    assert _score_peak(model, x[0]) > 65504                          # the unscaled scores pass fp16's range
    with torch.no_grad():
        before, w = model(*x), model.query.weight.clone()
    changes = patch_prescale_attention(model, x)
    assert [(c.path, c.rewrite, c.exact) for c in changes] == [("", "patch_prescale_attention", True)], changes
    assert torch.equal(model.query.weight, w * 0.25) and model.scaling == 1.0      # head_dim 16: scaling 2^-2
    assert _score_peak(model, x[0]) < 65504
    original = _model()
    with torch.no_grad():
        assert torch.equal(model(*x), before)
        for seed in (1, 2):                                           # inputs it was not measured on
            assert torch.equal(model(*_inputs(seed)), original(*_inputs(seed)))


def test_prescale_keeps_the_odd_part_of_the_scale():
    torch.manual_seed(0)
    model = EagerAttention(width=64, heads=2).eval()                  # head_dim 32: scaling 2^-3 x 1.414
    with torch.no_grad():
        model.query.weight[:, 5] *= 4.0
        model.key.weight[:, 5] *= 4.0
    x = torch.randn(1, 8, 64)
    x[..., 5] *= 300.0
    mask = torch.zeros(1, 1, 1, 8)
    with torch.no_grad():
        before = model(x, mask)
    assert patch_prescale_attention(model, (x, mask))
    assert model.scaling == pytest.approx(32 ** -0.5 * 8) and 1.0 <= model.scaling < 2.0
    with torch.no_grad():
        assert torch.equal(model(x, mask), before)


def test_prescale_leaves_small_and_unfoldable_models_alone():
    small, x = _model(), _inputs(outlier=1.0)
    w = small.query.weight.clone()
    assert patch_prescale_attention(small, x) == [] and torch.equal(small.query.weight, w)
    assert patch_prescale_attention(_model()) == []                   # no example inputs: nothing measured
    normed, x = _model(norm_q=True), _inputs()                        # a norm after the projection: undone
    with torch.no_grad():
        before, w = normed(*x), normed.query.weight.clone()
    assert patch_prescale_attention(normed, x) == []
    assert torch.equal(normed.query.weight, w) and normed.scaling == 0.25
    with torch.no_grad():
        assert torch.equal(normed(*x), before)


@pytest.mark.slow
def test_prescale_on_the_gpu(gpu, tmp_path):
    x = _inputs()
    plain = gpu_vs_torch(_model(), x, tmp_path / "plain.tflite")
    assert plain.ok, plain.summary()                                   # fully on the GPU ...
    assert plain.comparisons[0].nonfinite > 0 or plain.comparisons[0].corr < 0.99, plain.summary()  # ... wrong

    rewritten = _model()
    assert patch_prescale_attention(rewritten, x)
    res = gpu_vs_torch(rewritten, x, tmp_path / "prescaled.tflite")
    assert res.ok and res.run.gpu.cpu_ops in (None, 0), res.summary()
    assert res.comparisons[0].nonfinite == 0 and res.comparisons[0].corr >= 0.999, res.summary()
    # no op added (head size 16: the remaining multiply is by 1 and the converter drops it)
    assert read_model_info(tmp_path / "prescaled.tflite").num_ops <= \
        read_model_info(tmp_path / "plain.tflite").num_ops

    result = convert_for_gpu(_model(), x, tmp_path / "auto.tflite")    # the defaults apply it by themselves
    assert result.verdict == "PASS", result.summary()
    assert "patch_prescale_attention" in {ch.rewrite for ch in result.changes}


class Shared(nn.Module):
    """One attention layer applied at every depth (ALBERT shares its layer's weights): each call follows the
    pattern, so the fold holds for all of them."""

    def __init__(self):
        super().__init__()
        self.layer = _model()

    def forward(self, x, mask):
        return self.layer(self.layer(x, mask) * 50.0, mask)


def test_prescale_applies_to_a_layer_shared_across_depth():
    model, x = Shared().eval(), _inputs()
    with torch.no_grad():
        before = model(*x)
    changes = patch_prescale_attention(model, x)
    assert [c.path for c in changes] == ["layer"] and model.layer.scaling == 1.0
    with torch.no_grad():
        assert torch.equal(model(*x), before)


class FunctionalProjections(EagerAttention):
    """WavLM's way: the projections' weights handed to a functional attention, the Linear modules never called."""

    def forward(self, x, mask):
        q = F.linear(x, self.query.weight, self.query.bias) * self.scaling
        k, v = F.linear(x, self.key.weight, self.key.bias), F.linear(x, self.value.weight, self.value.bias)
        return self.out(F.softmax(q @ k.transpose(1, 2) + mask[:, 0], dim=-1) @ v)


def test_projections_that_never_ran_as_modules_are_left_alone():
    # measured peaks exist only for modules that ran; this raised KeyError, and convert_for_gpu then applied no
    # module patch at all to the model (the zoo's WavLM row)
    torch.manual_seed(0)
    m, x, mask = FunctionalProjections().eval(), torch.randn(1, 6, 32), torch.zeros(1, 1, 6, 6)
    assert patch_prescale_attention(m, ((x, mask), {})) == []
