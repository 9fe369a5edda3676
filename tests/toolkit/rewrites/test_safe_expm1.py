"""exp(x) - 1 cancels near 0 (symptom `fp16_degraded`): ELU / CELU / SELU / expm1 lower to EXP then SUB, and on an
fp16 GPU an ELU of small negative inputs loses most of its bits. `patch_safe_expm1` (default) computes
tanh(x / 2) * (exp(x) + 1): the same function, within a few fp32 ulps of torch (bound below), no SUB left in the
graph, and on the GPU the precision fp16 storage allows."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.lowering.export import export_tflite, gpu_vs_torch
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.fp16_degraded import expm1_accurate
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper

REL = 4 * 2.0 ** -24        # measured: 2.8 ulps at most over [-30, 12] and +-[1e-30, 1]


def test_expm1_accurate_is_expm1_to_fp32_rounding():
    x = torch.cat([torch.linspace(-30, 12, 100001), -torch.logspace(-30, 0, 5001), torch.logspace(-30, 0, 5001)])
    ref = torch.expm1(x.double())
    rel = (expm1_accurate(x).double() - ref).abs() / ref.abs()
    assert float(rel.max()) <= REL
    special = expm1_accurate(torch.tensor([float("-inf"), float("inf"), float("nan"), 0.0]))
    assert special[0] == -1 and special[1] == float("inf") and special[2].isnan() and special[3] == 0


class Family(nn.Module):
    """Every spelling the rewrite answers, one after the other."""

    def __init__(self):
        super().__init__()
        self.acts = nn.ModuleList([nn.ELU(0.7), nn.CELU(1.5), nn.SELU(), nn.ELU(inplace=True)])

    def forward(self, x):
        ys = [a(x.clone()) for a in self.acts]
        return torch.stack(ys + [F.elu(x, 2.0), torch.expm1(x), x.expm1(), torch.special.expm1(x)])


def test_the_family_under_the_wrapper_matches_torch(monkeypatch):
    from litert_gpu_toolkit.rewrites.fp16_degraded import expm1 as module

    calls = []
    monkeypatch.setattr(module, "expm1_accurate", lambda t: calls.append(1) or expm1_accurate(t))
    x = torch.cat([torch.linspace(-8, 3, 4001), -torch.logspace(-12, 0, 2000)])
    model = Family().eval()
    with torch.no_grad():
        ref, got = model(x), GpuRewriteWrapper(model)(x)
    assert float(((got - ref).abs() / ref.abs().clamp_min(1e-30)).max()) <= 2 * REL
    assert len(calls) == 8                           # every spelling went through the rewrite
    with torch.no_grad():                            # and none does when it is excluded
        GpuRewriteWrapper(model, exclude=["patch_safe_expm1"])(x)
    assert len(calls) == 8


class FunctionalElu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 4, 3)

    def forward(self, x):
        return F.elu(self.conv(x), 0.5)


@pytest.mark.parametrize("make", [lambda: nn.Sequential(nn.Conv1d(4, 4, 3), nn.ELU()), FunctionalElu])
@pytest.mark.parametrize("include", [["patch_safe_expm1"], None])
def test_the_graph_loses_its_subtraction(tmp_path, make, include):
    """Alone or with every default (`patch_select` writes ELU out without SELECT and routes its expm1 here, whichever
    handler comes first): EXP then SUB becomes TANH and EXP, and no SELECT comes back."""
    model = make().eval()
    x = (torch.randn(1, 4, 32),)
    plain = read_model_info(export_tflite(model, x, tmp_path / "plain.tflite")).op_histogram()
    safe = read_model_info(export_tflite(GpuRewriteWrapper(model, include=include), x,
                                         tmp_path / "safe.tflite")).op_histogram()
    assert plain.get("SUB") and "TANH" not in plain
    assert "SUB" not in safe and "SELECT" not in safe and "SELECT_V2" not in safe, safe
    assert safe.get("TANH") == 1 and safe.get("EXP") == 1


class SmallElu(nn.Module):
    def forward(self, x):
        return F.elu(x)


def test_gpu_elu_near_zero(gpu, tmp_path, measured):
    g = torch.Generator().manual_seed(0)
    x = (-torch.rand(1, 64, 64, 16, generator=g) * 0.01,)         # where exp(x) - 1 cancels
    plain = gpu_vs_torch(SmallElu(), x, tmp_path / "plain.tflite").comparisons[0]
    safe = gpu_vs_torch(GpuRewriteWrapper(SmallElu(), include=["patch_safe_expm1"]), x,
                        tmp_path / "safe.tflite").comparisons[0]
    measured("safe_expm1", "elu_near_zero", label="F.elu of inputs in [-0.01, 0], GPU fp16 vs torch",
             snr_plain_db=plain.snr_db, snr_safe_db=safe.snr_db, corr_plain=plain.corr, corr_safe=safe.corr)
    assert plain.corr < 0.999 and plain.snr_db < 40                 # the wall, measured
    assert safe.corr > 0.99999 and safe.snr_db > plain.snr_db + 25
    result = convert_for_gpu(SmallElu(), x, tmp_path / "m.tflite", diagnose_budget_s=0)
    assert result.ok and "patch_safe_expm1" in result.kept, result.summary()


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_celu_matches_elu_identity(alpha):
    x = torch.linspace(-5, 5, 1001)
    with torch.no_grad():
        got = GpuRewriteWrapper(nn.CELU(alpha))(x)
    assert torch.allclose(got, F.celu(x, alpha), rtol=2 * REL, atol=0)
