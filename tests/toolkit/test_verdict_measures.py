"""The checker's numerics verdict says which inputs and which measure decided it (issue: a depth model whose output
is 5.0 +- 0.045 was NUMERICS_FAIL at cosine 1.000000 and 0.13 % worst relative error; a pitch model failed on random
inputs and passed on real audio, and the report said neither)."""
import numpy as np
import pytest
import torch

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.check.diagnosis import LOW_SPREAD_MAX_STEPS, _judge, fp16_step, low_spread
from litert_gpu_toolkit.check.verdicts import Tolerance
from litert_gpu_toolkit.core.metrics import compare

RNG = np.random.default_rng(0)
DEPTH = (5.0 + 0.045 * np.tanh(RNG.standard_normal((1, 64, 64)))).astype(np.float32)


def judge(out, ref):
    return _judge(compare(out, ref), out, ref, Tolerance())


def test_fp16_step():
    assert fp16_step(5.0) == 2.0 ** -8 and fp16_step(1.0) == 2.0 ** -10 and fp16_step(0.0) == 2.0 ** -24


def test_a_low_spread_output_is_judged_in_fp16_steps():
    spread, step = low_spread(DEPTH)
    assert step == 2.0 ** -8 and 5 < spread < 10                    # 5.0 +- 0.045: about 7 steps of 0.0039
    noisy = (DEPTH + RNG.normal(0, 0.004, DEPTH.shape)).astype(np.float16).astype(np.float32)
    assert compare(noisy, DEPTH).corr < 0.999                       # corr alone would fail it
    symptom, measure = judge(noisy, DEPTH)
    assert symptom is None and "fp16 steps <=" in measure and "low spread" in measure


def test_the_steps_measure_still_fails_a_flat_or_scrambled_output():
    scrambled = RNG.permutation(DEPTH.ravel()).reshape(DEPTH.shape)     # the right values in the wrong places
    for wrong in (np.full_like(DEPTH, 5.0), scrambled):
        symptom, measure = judge(wrong, DEPTH)
        assert symptom == "degraded" and f"> {LOW_SPREAD_MAX_STEPS}" in measure, measure


def test_an_output_with_spread_is_still_judged_by_corr():
    ref = RNG.standard_normal(4096).astype(np.float32)
    assert low_spread(ref) is None
    symptom, measure = judge(ref + RNG.normal(0, 0.2, ref.shape).astype(np.float32), ref)
    assert symptom == "degraded" and measure == "corr"
    symptom, measure = judge(np.ones_like(ref), ref)               # constant output, varying reference
    assert symptom == "degraded" and measure == "corr"


class DepthHead(torch.nn.Module):
    """A metric-depth head: output 5.0 +- 0.045 m, its variation 7 fp16 steps wide."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Conv2d(8, 1, 1)

    def forward(self, x):
        return 5.0 + 0.045 * torch.tanh(self.head(torch.relu(self.conv(x))))


@pytest.mark.gpu
def test_a_low_spread_output_on_the_gpu_passes_and_says_why(gpu, tmp_path):
    torch.manual_seed(0)
    result = convert_for_gpu(DepthHead(), (torch.randn(1, 3, 64, 64),), tmp_path / "depth.tflite", fallback=False,
                             diagnose_budget_s=0)
    assert result.verdict == "PASS", result.summary()
    corr = result.report.signatures["serving_default"]["output_0"]["vs_cpu"]["gpu_fp16"]["corr"]
    assert corr < 0.999, f"the GPU's fp16 corr is {corr}: the model no longer shows a low-spread output"
    assert "low-spread output(s) judged in fp16 steps" in result.report.summary
    assert "on the caller's inputs" in result.report.summary
    assert any("judged by the largest error in fp16 steps" in w for w in result.report.warnings)


@pytest.mark.gpu
def test_a_numerics_fail_on_random_inputs_says_so(gpu, tmp_path):
    """Right on its real range, wrong on random normal inputs (exp(6x) overflows fp16 from x = 1.85): the check
    of the file alone runs random inputs, and its verdict says so and asks for real ones."""
    from litert_gpu_toolkit.check.checker import check_gpu_compatibility

    class Exp(torch.nn.Module):
        def forward(self, x):
            return torch.exp(x * 6.0)

    path = tmp_path / "exp.tflite"
    torch.manual_seed(0)
    real = torch.rand(1, 256)                      # in [0, 1): exp(6x) < 404
    result = convert_for_gpu(Exp(), (real,), path, fallback=False, diagnose_budget_s=0)
    assert result.verdict == "PASS" and "on the caller's inputs" in result.report.summary, result.summary()
    random = check_gpu_compatibility(str(path))
    assert random.verdict == "NUMERICS_FAIL" and "wrong on random inputs" in random.summary, random.summary
    assert any("rests on random inputs" in w and "--inputs" in w for w in random.warnings)
    given = check_gpu_compatibility(str(path), inputs={"args_0": real.numpy()})
    assert given.verdict == "PASS" and "on the caller's inputs" in given.summary


def test_an_output_below_fp16s_normal_range_is_an_underflow_not_a_low_spread():
    """h41c_efficientnet (the third held-out set): outputs ~1e-7, fp16 corr 0.18, passed before as 1.2 'steps' of
    the subnormal spacing. Such an output fails in fp16 and says why; right numbers (corr) still pass."""
    ref = (1e-7 * RNG.standard_normal(1280)).astype(np.float32)
    assert low_spread(ref) is None
    flushed = ref.astype(np.float16).astype(np.float32)              # what fp16 storage keeps: a few subnormal steps
    assert compare(flushed, ref).corr < 0.999
    symptom, measure = judge(flushed, ref)
    assert symptom == "degraded" and measure.startswith("underflow") and "smallest normal" in measure, measure
    assert judge(ref * (1 + 1e-6), ref)[0] is None                   # an fp32 run: corr decides, as before
