"""Activations past fp16's range between two linear layers (symptom `fp16_overflow`): `patch_rescale_homogeneous`
scales them by 2^-k through ReLU / LeakyReLU / pooling, folded into the two layers' weights. The three checks the
spec asks of a rewrite: bit-identical outputs in torch fp32 (the bound is 0), the converted graph's first conv
weights scaled by 2^-k (no op added), and the GPU-only fp16 run turned from non-finite into a match."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.lowering.export import gpu_vs_torch
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.fp16_overflow import patch_rescale_homogeneous


class Hot(nn.Module):
    """A conv whose outputs reach ~7e4 (fp16 max 65504: BN folded into large weights), LeakyReLU, a conv with small
    weights that brings the values back to O(1), ReLU, max pool, a linear head."""

    def __init__(self, gain: float = 3e4):
        super().__init__()
        self.a = nn.Conv2d(3, 16, 3, padding=1)
        self.b = nn.Conv2d(16, 16, 3, padding=1)
        self.head = nn.Linear(16 * 8 * 8, 10)
        self.act = nn.LeakyReLU(0.1)
        with torch.no_grad():
            self.a.weight.mul_(gain)
            self.a.bias.mul_(gain)
            self.b.weight.div_(gain)

    def forward(self, x):
        y = self.act(self.a(x))
        y = F.max_pool2d(F.relu(self.b(y)), 2)
        return self.head(y.flatten(1))


class HotResidual(Hot):
    """The large tensor also feeds a residual add: scaling it would change the output, so nothing may change."""

    def forward(self, x):
        h = self.a(x)
        return self.b(F.relu(h)) + h


def _example(seed=0):
    return (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(seed)),)


def test_rescale_is_bit_identical_in_torch():
    torch.manual_seed(0)
    model, x = Hot().eval(), _example()
    with torch.no_grad():
        before, w_a, w_b = model(*x), model.a.weight.clone(), model.b.weight.clone()
    changes = patch_rescale_homogeneous(model, x)
    assert [c.path for c in changes] == ["a"] and changes[0].exact
    k = round(float(torch.log2(w_a.abs().max() / model.a.weight.detach().abs().max())))
    assert k >= 6                                       # peak ~7e4 brought to ~2^10
    assert torch.equal(model.a.weight, w_a * 2.0 ** -k) and torch.equal(model.b.weight, w_b * 2.0 ** k)
    torch.manual_seed(0)
    original = Hot().eval()
    for seed in (0, 1, 2):                              # bit-identical on inputs it was not calibrated on too
        with torch.no_grad():
            assert torch.equal(model(*_example(seed)), original(*_example(seed)))
    with torch.no_grad():
        assert torch.equal(before, model(*x))


def test_rescale_leaves_residual_and_small_models_alone():
    torch.manual_seed(0)
    residual, x = HotResidual().eval(), _example()
    with torch.no_grad():
        before = residual(*x)
    assert patch_rescale_homogeneous(residual, x) == []
    with torch.no_grad():
        assert torch.equal(residual(*x), before)
    small = Hot(gain=1.0).eval()                        # nothing near fp16's range: not applied (it has a cost)
    w = small.a.weight.clone()
    assert patch_rescale_homogeneous(small, x) == [] and torch.equal(small.a.weight, w)
    assert patch_rescale_homogeneous(Hot().eval()) == []   # no example inputs: nothing measured, nothing changed


@pytest.mark.slow
def test_rescale_on_the_gpu(gpu, tmp_path):
    torch.manual_seed(0)
    model, x = Hot().eval(), _example()
    plain = gpu_vs_torch(model, x, tmp_path / "plain.tflite")
    assert plain.ok, plain.summary()                    # it runs fully on the GPU ...
    assert plain.comparisons[0].nonfinite > 0 or plain.comparisons[0].corr < 0.99, plain.summary()  # ... wrongly

    torch.manual_seed(0)
    rewritten = Hot().eval()
    assert patch_rescale_homogeneous(rewritten, x)
    res = gpu_vs_torch(rewritten, x, tmp_path / "rescaled.tflite")
    assert res.ok and res.run.gpu.cpu_ops in (None, 0), res.summary()
    c = res.comparisons[0]
    assert c.nonfinite == 0 and c.corr >= 0.999, res.summary()
    assert read_model_info(tmp_path / "rescaled.tflite").num_ops == read_model_info(tmp_path / "plain.tflite").num_ops

    torch.manual_seed(0)
    result = convert_for_gpu(Hot().eval(), x, tmp_path / "auto.tflite")   # the default applies it by itself
    assert result.verdict == "PASS", result.summary()
    assert "patch_rescale_homogeneous" in {ch.rewrite for ch in result.changes}


class HotGated(nn.Module):
    """A gated MLP (an LLM's SwiGLU block) on an un-normalised stream with an outlier channel: gate and up stay near
    400, their product reaches ~1e5 (past fp16's 65504) before the down projection brings it back."""

    def __init__(self, width: int = 32, hidden: int = 64):
        super().__init__()
        self.gate = nn.Linear(width, hidden, bias=False)
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)
        with torch.no_grad():
            self.gate.weight.mul_(4.0)
            self.up.weight.mul_(4.0)
            self.down.weight.div_(300.0)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def _stream(seed=0, outlier=400.0):
    x = torch.randn(1, 8, 32, generator=torch.Generator().manual_seed(seed))
    x[..., 3] *= outlier                                # the outlier channel of a trained residual stream
    return (x,)


def _gated_peak(model, x) -> float:
    with torch.no_grad():
        return float((F.silu(model.gate(x)) * model.up(x)).abs().max())


def test_rescale_through_a_gated_product_is_bit_identical():
    torch.manual_seed(0)
    model, x = HotGated().eval(), _stream()
    assert _gated_peak(model, *x) > 65504 and float(model.up(*x).abs().max()) < 2 ** 13   # only the product is hot
    with torch.no_grad():
        before, w_up, w_down = model(*x), model.up.weight.clone(), model.down.weight.clone()
    changes = patch_rescale_homogeneous(model, x)
    assert [(c.path, c.exact) for c in changes] == [("up", True)], changes
    k = round(float(torch.log2(w_up.abs().max() / model.up.weight.abs().max())))
    assert k >= 5 and torch.equal(model.up.weight, w_up * 2.0 ** -k) and torch.equal(model.down.weight,
                                                                                      w_down * 2.0 ** k)
    assert _gated_peak(model, *x) < 2 ** 11
    torch.manual_seed(0)
    original = HotGated().eval()
    with torch.no_grad():
        assert torch.equal(model(*x), before)
        for seed in (1, 2):
            assert torch.equal(model(*_stream(seed)), original(*_stream(seed)))
    small = HotGated().eval()                           # no outlier: nothing near the limit, nothing changes
    assert patch_rescale_homogeneous(small, _stream(outlier=1.0)) == []


@pytest.mark.slow
def test_rescale_through_a_gated_product_on_the_gpu(gpu, tmp_path):
    torch.manual_seed(0)
    model, x = HotGated().eval(), _stream()
    plain = gpu_vs_torch(model, x, tmp_path / "plain.tflite")
    assert plain.ok, plain.summary()
    assert plain.comparisons[0].nonfinite > 0 or plain.comparisons[0].corr < 0.99, plain.summary()
    torch.manual_seed(0)
    rewritten = HotGated().eval()
    assert patch_rescale_homogeneous(rewritten, x)
    res = gpu_vs_torch(rewritten, x, tmp_path / "rescaled.tflite")
    assert res.ok and res.run.gpu.cpu_ops in (None, 0), res.summary()
    assert res.comparisons[0].nonfinite == 0 and res.comparisons[0].corr >= 0.999, res.summary()
    assert read_model_info(tmp_path / "rescaled.tflite").num_ops == read_model_info(tmp_path / "plain.tflite").num_ops
