"""torch.stft / Tensor.stft / torch.istft called in forward (rewrite `patch_stft`, fft/functional.py).

Proof: (1) in torch fp32 the wrapped model matches torch.stft / torch.istft: spectra within 2e-5 of the
largest magnitude, power within 4e-5 of its square, signals within 2e-5 absolute (unit-scale input);
(2) the plain conversion fails (no FFT lowering); (3) wrapped, it converts with no FFT / complex op,
compiles GPU-only and matches torch (llvmpipe, software Vulkan, ai-edge-litert 2.3.0, fp16).
"""
import math

import pytest
import torch
from torch import nn

from litert_gpu_toolkit.lowering.export import export_tflite, gpu_vs_torch
from litert_gpu_toolkit.rewrites.fft import SplitComplex
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper

WINDOWS = {"hann": torch.hann_window, "hamming": torch.hamming_window, None: None}

# n_fft, hop, win_length, window, center, pad_mode, normalized, onesided
CONFIGS = [
    (512, 128, None, "hann", True, "reflect", False, None),
    (256, 64, 200, "hamming", True, "constant", False, True),
    (255, 100, None, "hann", False, "reflect", True, True),
    (64, 16, None, None, True, "reflect", False, False),
    (300, 128, None, "hann", True, "replicate", False, True),
]


def _signal(n, batch=2):
    g = torch.Generator().manual_seed(0)
    t = torch.arange(n) / 16000.0
    return 0.5 * torch.sin(2 * math.pi * (200 * t + 3000 * t * t)) + 0.05 * torch.randn(batch, n, generator=g)


class Spectra(nn.Module):
    """Common consumers of a complex STFT in forward."""

    def __init__(self, n_fft, hop, win, window, center, pad_mode, normalized, onesided):
        super().__init__()
        self.kw = dict(n_fft=n_fft, hop_length=hop, win_length=win, center=center, pad_mode=pad_mode,
                       normalized=normalized, onesided=onesided)
        w = WINDOWS[window]
        self.register_buffer("window", None if w is None else w(win or n_fft))

    def forward(self, x):
        z = torch.stft(x, window=self.window, return_complex=True, **self.kw)
        return torch.view_as_real(z), z.abs(), z.abs() ** 2, (z * z.conj()).real, x.stft(
            window=self.window, return_complex=True, **self.kw).imag


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"n{c[0]}-h{c[1]}-{c[3]}-c{int(c[4])}-{c[5]}")
def test_stft_consumers_match_torch(cfg):
    model = Spectra(*cfg)
    wrapped = GpuRewriteWrapper(model, include=["patch_stft"])
    x = _signal(3000)
    refs, outs = model(x), wrapped(x)
    scale = refs[1].max().item()
    bounds = [2e-5 * scale, 2e-5 * scale, 4e-5 * scale ** 2, 4e-5 * scale ** 2, 2e-5 * scale]
    for out, ref, bound in zip(outs, refs, bounds):
        assert out.shape == ref.shape and (out - ref).abs().max().item() <= bound
    assert [c.rewrite for c in wrapped.changes] == ["patch_stft"] * 2     # torch.stft and Tensor.stft
    assert wrapped(x[0])[0].shape == refs[0][0].shape                    # unbatched signal


class RoundTrip(nn.Module):
    def __init__(self, n_fft=128, hop=32, window="hann", center=True, length=True):
        super().__init__()
        self.n_fft, self.hop, self.center, self.length = n_fft, hop, center, length
        self.register_buffer("window", WINDOWS[window](n_fft))

    def forward(self, x):
        z = torch.stft(x, self.n_fft, self.hop, window=self.window, center=self.center, return_complex=True)
        z = torch.polar(z.abs() * 0.5, z.angle())            # a magnitude edit, as an enhancer would do
        return torch.istft(z, self.n_fft, self.hop, window=self.window, center=self.center,
                           length=x.shape[-1] if self.length else None)


@pytest.mark.parametrize("kw", [dict(), dict(hop=48, length=False), dict(center=False, hop=32, window="hamming"),
                                dict(n_fft=100, hop=25, window="hamming")])
def test_istft_matches_torch(kw):
    model = RoundTrip(**kw)
    wrapped = GpuRewriteWrapper(model, include=["patch_stft"])
    x = _signal(1000)
    ref, out = model(x), wrapped(x)
    assert out.shape == ref.shape and (out - ref).abs().max().item() <= 2e-5
    assert {c.rewrite for c in wrapped.changes} == {"patch_stft"}


def test_view_as_complex_and_unsupported_consumers_fall_back_exactly():
    class M(nn.Module):
        def forward(self, x):
            z = torch.view_as_complex(x)
            return torch.exp(z).real, (z / 2).imag, z[:, 1:].abs()

    x = torch.randn(2, 5, 2)
    for a, b in zip(GpuRewriteWrapper(M())(x), M()(x)):
        assert torch.allclose(a, b, atol=1e-6)
    z = SplitComplex(torch.ones(2, 3), torch.zeros(2, 3))
    assert z.shape == (2, 3) and z.dim() == 2 and torch.equal(torch.view_as_real(z)[..., 0], torch.ones(2, 3))
    with pytest.raises(ValueError):
        SplitComplex(torch.ones(2), torch.ones(3))


class SpeechFrontEnd(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(128))

    def forward(self, x):
        z = torch.stft(x, 128, 32, window=self.window, return_complex=True)
        y = torch.istft(z * 0.5, 128, 32, window=self.window, length=x.shape[-1])
        return z.abs(), torch.view_as_real(z), y


def test_stft_in_forward_fails_to_convert_plainly(tmp_path):
    with pytest.raises(Exception):
        export_tflite(SpeechFrontEnd(), (_signal(1024, 1),), tmp_path / "plain.tflite")


def test_stft_in_forward_runs_gpu_only(gpu, tmp_path):
    wrapped = GpuRewriteWrapper(SpeechFrontEnd())
    x = _signal(1024, 1)
    res = gpu_vs_torch(wrapped, (x,), tmp_path / "stft.tflite")
    hist = res.info.op_histogram()
    assert not any("FFT" in op or "COMPLEX" in op for op in hist), hist
    assert "TRANSPOSE_CONV" not in hist and "GATHER_ND" not in hist and not res.info.high_rank_tensors(), hist
    assert res.ok and res.run.gpu.cpu_ops in (None, 0), res.summary()
    assert len(res.comparisons) == 3
    for c in res.comparisons:
        assert c.nonfinite == 0 and c.corr >= 0.999, res.summary()


def test_return_complex_false_gives_the_real_view():
    class M(nn.Module):
        def forward(self, x):
            return torch.stft(x, 64, 16, window=torch.ones(64), return_complex=False)

    x = _signal(500)
    with pytest.warns(UserWarning):
        ref = M()(x)
    out = GpuRewriteWrapper(M(), include=["patch_stft"])(x)
    assert out.shape == ref.shape and (out - ref).abs().max().item() <= 2e-5 * ref.abs().max().item()
