"""The `fft` rule: torch.fft transforms of real data, read back as real numbers, become cos / sin matrix products
(FNet's token mixing, a magnitude spectrum). Bound: fp32 rounding of the DFT sums (relative <= 2e-6 here, n <= 64).
GPU: llvmpipe (software Vulkan), ai-edge-litert 2.3.0."""
import pytest
import torch

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.legalize import legalize

FFT_OPS = ("fft_", "_fft_")


class FNetMixing(torch.nn.Module):
    def forward(self, x):                                     # FNet: fftn over (tokens, hidden), real part
        return torch.fft.fftn(x, dim=(1, 2)).real * 2


class Spellings(torch.nn.Module):
    def forward(self, x):
        return (torch.fft.rfft(x, dim=-1).abs(),                                      # one-sided magnitude
                torch.fft.fft(x, dim=1, norm="ortho").imag,                           # another axis, ortho
                torch.fft.ifft(torch.fft.fft(x, dim=-1), dim=1).real,                 # complex in, inverse
                torch.view_as_real(torch.fft.rfft2(x, norm="forward")),               # both parts, stacked
                torch.fft.fft2(x).real)                                               # the 2-D default axes


class ComplexOut(torch.nn.Module):
    def forward(self, x):                                     # a complex product: not this rule's to carry
        return torch.view_as_real(torch.fft.fft(x) * torch.fft.fft(x.flip(-1)))


def _ops(legal) -> list[str]:
    return [str(n.target) for n in legal.module.graph.nodes if n.op == "call_function"]


def _rel(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("model", [FNetMixing(), Spellings()], ids=["fnet", "spellings"])
def test_real_read_dfts_become_matrix_products_to_fp32_rounding(model):
    x = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(0))
    legal = legalize(model.eval(), (x,))
    assert not [o for o in _ops(legal) if any(f in o for f in FFT_OPS)], _ops(legal)
    assert any("cos / sin" in d for d in legal.done), legal.done
    got, want = legal.module(x), model(x)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert g.shape == w.shape and _rel(g, w) <= 2e-6, _rel(g, w)


def test_a_complex_value_read_by_another_op_is_left_and_named():
    legal = legalize(ComplexOut().eval(), (torch.randn(2, 8, 16),))
    assert any("fft_fft" in o for o in _ops(legal)) and any("complex value" in s for s in legal.left), legal.left


def test_fnet_mixing_converts_and_runs_on_the_gpu(gpu, tmp_path):
    x = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(0))
    plain = convert_for_gpu(FNetMixing().eval(), (x,), tmp_path / "p.tflite", patches=False, diagnose_budget_s=0)
    assert plain.verdict == "CONVERT_FAIL", plain.summary()
    result = convert_for_gpu(FNetMixing().eval(), (x,), tmp_path / "m.tflite", only=("legalize",), fallback=False,
                             diagnose_budget_s=0)
    assert result.ok, result.summary()
