"""fp16-safe reductions. In torch fp32 every rewrite equals the original; on the software GPU
(llvmpipe, software Vulkan, ai-edge-litert 2.3.0, fp16 default) the plain norms on large activations
fail and the rewritten ones match torch. Cases that pass plain here but are expected to fail on phones
(fp16 accumulators) are asserted as passing here, so the README's table stays true."""
import copy

import pytest
import torch
import torch.nn as nn

from litert_gpu_toolkit.lowering.export import gpu_vs_torch
from litert_gpu_toolkit.rewrites import PATCHES
from litert_gpu_toolkit.rewrites.fp16_overflow import (
    SafeGroupNorm,
    SafeInstanceNorm,
    SafeLayerNorm,
    SafeRMSNorm,
    hierarchical_mean,
    patch_group_norm,
    patch_instance_norm,
    patch_safe_layernorm,
    safe_mean,
    safe_sum,
)
from litert_gpu_toolkit.rewrites.fp16_silent_zero import patch_rmsnorm
from litert_gpu_toolkit.core.symptoms import BY_ID


# ------------------------------------------------------------------------------ hierarchical mean

@pytest.mark.parametrize("n", list(range(1, 70)) + [97, 127, 128, 129, 255, 1000, 4096, 16384])
def test_hierarchical_mean_exact_for_any_length(n):
    x = torch.randn(3, n, dtype=torch.float64) * 100 + 50
    assert torch.allclose(hierarchical_mean(x, (1,), keepdim=False), x.mean(1), rtol=0, atol=1e-11)


@pytest.mark.parametrize("shape,dims", [((2, 3, 7, 5), (2, 3)), ((1, 3, 129, 97), (2, 3)), ((1, 2, 128, 128), (2, 3)),
                                        ((2, 5, 13), (2,)), ((2, 3, 4, 5), (1, 3)), ((2, 3, 4, 5), (0, 1, 2, 3)),
                                        ((4, 1, 1, 1), (2, 3)), ((2, 3, 11), (-1, -2))])
def test_hierarchical_mean_any_dims(shape, dims):
    x = torch.randn(shape, dtype=torch.float64) * 1000
    for keepdim in (True, False):
        got, ref = hierarchical_mean(x, dims, keepdim=keepdim), x.mean(dims, keepdim=keepdim)
        assert got.shape == ref.shape
        assert torch.allclose(got, ref, rtol=0, atol=1e-9)


def test_hierarchical_mean_stages_are_small_and_bounded(monkeypatch):
    """Every pooling window averages at most 7 values per axis (2x2 except the last), no stage input
    exceeds max|x| (values up to 6e4, near fp16's max), and run in float16 the result stays within the
    stated bound gamma(sum(k_i + 1) + 1) * mean|x|."""
    x = (torch.rand(1, 4, 127, 131, generator=torch.Generator().manual_seed(0)) * 2 - 1) * 60000
    seen = []
    real_pool = torch.nn.functional.avg_pool2d

    def spy(inp, kernel, *args, **kwargs):
        seen.append((tuple(kernel), float(inp.abs().max())))
        return real_pool(inp, kernel, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "avg_pool2d", spy)
    got = hierarchical_mean(x.half(), (2, 3), keepdim=False).double()
    assert seen and all(k[0] <= 7 and k[1] <= 7 for k, _ in seen)
    assert all(peak <= 60000 for _, peak in seen)
    n = sum(k[0] * k[1] + 1 for k, _ in seen) + 1
    u = 2.0 ** -11
    bound = n * u / (1 - n * u) * x.double().abs().mean((2, 3))
    assert torch.all(torch.isfinite(got))
    assert torch.all((got - x.double().mean((2, 3))).abs() <= bound)


def test_safe_mean_and_sum_single_axis():
    x = torch.randn(4, 4096, dtype=torch.float64) * 1000
    assert torch.allclose(safe_mean(x, -1), x.mean(-1), atol=1e-9)
    assert torch.allclose(safe_sum(x, 1, keepdim=True), x.sum(1, keepdim=True), atol=1e-6)


# ------------------------------------------------------------------------------ patches, torch fp32

class LlamaLikeRMSNorm(nn.Module):
    """The HF LlamaRMSNorm formula (class name containing 'RMSNorm', `variance_epsilon`)."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.variance_epsilon = eps

    def forward(self, h):
        var = h.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (h * torch.rsqrt(var + self.variance_epsilon))


class NotReallyRMSNorm(nn.Module):
    """Named like an RMS norm, computes something else: must be left alone."""

    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = 1e-6

    def forward(self, h):
        return h * self.weight


def _randomise(model):
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
    return model


def _no_bias(norm):
    """timm's GroupNorm1NoBias: `affine` stays True, the bias is None."""
    norm.bias = None
    return norm


@pytest.mark.parametrize("scale", [1e-3, 1.0, 300.0, 3000.0])
def test_patches_exact_in_fp32(scale):
    model = _randomise(nn.ModuleDict({
        "ln": nn.LayerNorm(768), "ln2d": nn.LayerNorm([4, 96]), "rms": nn.RMSNorm(768, eps=1e-6),
        "rms_none": nn.RMSNorm(768), "llama": LlamaLikeRMSNorm(768), "in2": nn.InstanceNorm2d(8, affine=True),
        "in1": nn.InstanceNorm1d(8), "gn": nn.GroupNorm(4, 8), "gn_nobias": _no_bias(nn.GroupNorm(1, 8)),
        "in2_nobias": _no_bias(nn.InstanceNorm2d(8, affine=True))})).eval()
    patched = copy.deepcopy(model)
    changes = (patch_safe_layernorm(patched) + patch_rmsnorm(patched) + patch_instance_norm(patched)
               + patch_group_norm(patched))
    assert {c.path for c in changes} == set(model.keys())
    assert all(c.exact for c in changes)
    kinds = {"ln": SafeLayerNorm, "ln2d": SafeLayerNorm, "rms": SafeRMSNorm, "rms_none": SafeRMSNorm,
             "llama": SafeRMSNorm, "in2": SafeInstanceNorm, "in1": SafeInstanceNorm, "gn": SafeGroupNorm,
             "gn_nobias": SafeGroupNorm, "in2_nobias": SafeInstanceNorm}
    assert all(isinstance(patched[k], cls) for k, cls in kinds.items())
    g = torch.Generator().manual_seed(1)
    a = torch.randn(2, 16, 768, generator=g) * scale
    b = torch.randn(2, 8, 37, 53, generator=g) * scale
    inputs = {"ln": a, "ln2d": a.reshape(2, 16, 4, 192)[..., :96], "rms": a, "rms_none": a, "llama": a,
              "in2": b, "in1": b.flatten(2), "gn": b, "gn_nobias": b, "in2_nobias": b}
    with torch.no_grad():
        for name, x in inputs.items():
            ref, got = model[name](x), patched[name](x)
            tol = 2e-5 * max(1.0, float(ref.abs().max()) / 10)
            assert (got - ref).abs().max().item() <= tol, name


def test_patch_types_and_hf_classes():
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    model = nn.ModuleDict({"llama": LlamaRMSNorm(64, eps=1e-5), "gemma": GemmaRMSNorm(64),
                           "fake": NotReallyRMSNorm(64)})
    _randomise(model)
    x = torch.randn(3, 5, 64) * 200
    with torch.no_grad():
        before = {k: m(x) for k, m in model.items()}
    changes = patch_rmsnorm(model)
    assert sorted(c.path for c in changes) == ["gemma", "llama"]
    assert isinstance(model["llama"], SafeRMSNorm) and model["llama"].offset == 0.0
    assert isinstance(model["gemma"], SafeRMSNorm) and model["gemma"].offset == 1.0
    assert isinstance(model["fake"], NotReallyRMSNorm)
    with torch.no_grad():
        for k, m in model.items():
            assert torch.allclose(m(x), before[k], rtol=1e-5, atol=1e-5), k
    assert patch_rmsnorm(model) == []                                       # idempotent


def test_running_stats_instance_norm_left_alone_and_registry():
    m = nn.Sequential(nn.InstanceNorm2d(4, track_running_stats=True))
    m.eval()
    assert patch_instance_norm(m) == []
    for name in ("patch_safe_layernorm", "patch_rmsnorm", "patch_instance_norm", "patch_group_norm"):
        spec = PATCHES[name]
        assert spec.exact and spec.wall in BY_ID and name in BY_ID[spec.wall].rewrites


# ------------------------------------------------------------------------------ on the GPU

class MeanHead(nn.Module):
    """A plain spatial mean / single-axis sum, or their safe forms once `safe` is set."""

    def __init__(self, kind):
        super().__init__()
        self.kind, self.safe = kind, False

    def forward(self, x):
        if self.kind == "spatial_mean":
            return hierarchical_mean(x, (2, 3), keepdim=False) if self.safe else x.mean((2, 3))
        return safe_sum(x, -1) if self.safe else x.sum(-1)


class NormBank(nn.Module):
    """One graph, one conversion: every case an output (order = CASES)."""

    def __init__(self):
        super().__init__()
        self.ln768 = nn.LayerNorm(768)
        self.llama768 = LlamaLikeRMSNorm(768)
        self.ln4096 = nn.LayerNorm(4096)
        self.rms4096 = nn.RMSNorm(4096, eps=1e-6)
        self.in128 = nn.InstanceNorm2d(8, affine=True)
        self.gn128 = nn.GroupNorm(4, 8)
        self.ln4096_mild = nn.LayerNorm(4096)
        self.mean128 = MeanHead("spatial_mean")
        self.sum4096 = MeanHead("sum")

    def forward(self, a, b, c, d, e, f):
        return (self.ln768(a), self.llama768(a), self.ln4096(b), self.rms4096(b), self.in128(c), self.gn128(c),
                self.ln4096_mild(d), self.mean128(e), self.sum4096(f))


# case -> fails plain on llvmpipe?  (False = passes here, expected to fail only on fp16-accumulating phones)
CASES = {"ln768_x300": True, "llama_rmsnorm768_x300": True, "ln4096_x1000": True, "rmsnorm4096_x1000": True,
         "instancenorm_128x128_x100": True, "groupnorm_128x128_x100": True,
         "ln4096_x30": False, "mean_128x128_offset": False, "sum4096": False}
# case -> how the reference's table names it
LABELS = {"ln768_x300": "LayerNorm 768, x300", "llama_rmsnorm768_x300": "HF LlamaRMSNorm 768, x300",
          "ln4096_x1000": "LayerNorm 4096, x1000", "rmsnorm4096_x1000": "nn.RMSNorm 4096, x1000",
          "instancenorm_128x128_x100": "InstanceNorm2d 128x128, x100",
          "groupnorm_128x128_x100": "GroupNorm(4, 8) 128x128, x100",
          "ln4096_x30": "LayerNorm 4096, x30 (each x^2 < 65504, their sum 3.7e6)",
          "mean_128x128_offset": "spatial mean over 128x128, values 100..800 (sum 1.3e7)",
          "sum4096": "single-axis sum over 4096 (results < 65504, partial sums larger)"}
# case -> what a phone (fp16 accumulators) needs, for the cases this GPU cannot show failing
ON_PHONES = {"ln4096_x30": "the sum passes 65504 in an fp16 accumulator; use `hierarchical=True`",
             "mean_128x128_offset": "fp16 accumulator; use `hierarchical_mean`",
             "sum4096": "fp16 accumulator; use `safe_sum`"}


def _inputs():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(1, 16, 768, generator=g) * 300
    b = torch.randn(1, 8, 4096, generator=g) * 1000
    c = torch.randn(1, 8, 128, 128, generator=g) * 100
    d = torch.randn(1, 8, 4096, generator=g) * 30                        # x^2 < 65504, sum of x^2 ~ 3.7e6
    offsets = torch.linspace(100, 800, 8).reshape(1, 8, 1, 1)
    e = torch.randn(1, 8, 128, 128, generator=g) * 50 + offsets          # a 16384-term sum reaches ~1.3e7
    rows = torch.linspace(-12, 12, 8).reshape(1, 8, 1)
    f = torch.randn(1, 8, 4096, generator=g) * 20 + rows                 # sums within fp16, partial sums not
    return a, b, c, d, e, f


@pytest.fixture(scope="module")
def norm_runs(gpu, tmp_path_factory):
    folder = tmp_path_factory.mktemp("norms")
    plain = _randomise(NormBank()).eval()
    patched = copy.deepcopy(plain)
    changes = (patch_safe_layernorm(patched) + patch_rmsnorm(patched) + patch_instance_norm(patched)
               + patch_group_norm(patched))
    patched.mean128.safe = patched.sum4096.safe = True
    args = _inputs()
    with torch.no_grad():
        for o_plain, o_patched in zip(plain(*args), patched(*args)):    # the rewrite is exact in torch fp32
            assert (o_plain - o_patched).abs().max().item() <= 2e-5 * max(1.0, float(o_plain.abs().max()) / 10)
    return (gpu_vs_torch(plain, args, folder / "plain.tflite"), gpu_vs_torch(patched, args, folder / "safe.tflite"),
            changes)


def _failed(c) -> bool:
    return c.nonfinite > 0 or c.all_zero or not (c.corr >= 0.99)


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(CASES))
def test_plain_conversion_on_software_gpu(norm_runs, case, measured):
    plain, _, _ = norm_runs
    assert plain.ok, plain.summary()
    c = plain.comparisons[list(CASES).index(case)]
    measured("fp16_norms", case, label=LABELS[case], on_phones=ON_PHONES.get(case, ""),
             fails_plain_here=CASES[case], plain_corr=c.corr,
             plain_max_abs=c.max_abs, plain_nonfinite=c.nonfinite, plain_all_zero=c.all_zero)
    print(f"\n[llvmpipe fp16] plain {case}: corr={c.corr:.4f} nonfinite={c.nonfinite} all_zero={c.all_zero} "
          f"max_abs={c.max_abs:.3g}")
    if CASES[case]:
        assert _failed(c), f"{case} no longer fails plain on this GPU: update the README table ({c})"
    else:
        assert c.nonfinite == 0 and c.corr >= 0.999, f"{case} now fails on the desktop GPU too ({c})"


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(CASES))
def test_rewritten_matches_torch_on_software_gpu_fp16(norm_runs, case, measured):
    _, safe, changes = norm_runs
    assert safe.ok, safe.summary()
    assert len(changes) == 7
    c = safe.comparisons[list(CASES).index(case)]
    measured("fp16_norms", case, label=LABELS[case], rewritten_corr=c.corr, rewritten_max_abs=c.max_abs)
    print(f"\n[llvmpipe fp16] rewritten {case}: corr={c.corr:.6f} max_abs={c.max_abs:.3g}")
    assert c.nonfinite == 0 and not c.all_zero and c.corr >= 0.999, (case, c)


@pytest.mark.gpu
def test_rewritten_graph_has_no_new_walls(norm_runs):
    _, safe, _ = norm_runs
    ops = safe.info.op_histogram()
    assert "AVERAGE_POOL_2D" in ops and "REDUCE_MAX" in ops
    assert not any(w in ops for w in ("GATHER_ND", "BROADCAST_TO", "SELECT_V2", "TRANSPOSE_CONV"))


# ------------------------------------------------------------------ channels-first LayerNorm (ConvNeXt)

class ChannelsFirstLayerNorm(nn.LayerNorm):
    """The ConvNeXt spelling: permute to channels-last, LayerNorm, permute back."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class OddLayerNorm(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x) * 2.0


class CfBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.norm = ChannelsFirstLayerNorm(16, eps=1e-6)
        self.last = nn.LayerNorm(16)

    def forward(self, x):
        y = self.norm(self.conv(x) * 40.0)
        return self.last(y.permute(0, 2, 3, 1))


def _cf_block():
    torch.manual_seed(0)
    m = CfBlock().eval()
    with torch.no_grad():
        for ln in (m.norm, m.last):
            ln.weight.copy_(torch.rand(16) + 0.5)
            ln.bias.copy_(torch.randn(16) * 0.1)
    return m


def test_channels_first_layernorm_exact_in_torch():
    m = _cf_block()
    x = torch.randn(1, 3, 9, 7)
    ref = m(x)
    patched = copy.deepcopy(m)
    changes = patch_safe_layernorm(patched)
    assert {c.path for c in changes} == {"norm", "last"}
    assert patched.norm.channels_first and not patched.last.channels_first
    assert "channels-first" in next(c.what for c in changes if c.path == "norm")
    assert torch.allclose(patched(x), ref, rtol=0, atol=2e-5)
    odd = nn.Sequential(OddLayerNorm(8))            # a subclass computing something else is left alone
    assert patch_safe_layernorm(odd) == [] and isinstance(odd[0], OddLayerNorm)


def test_hf_convnext_layernorm_is_patched_exactly():
    pytest.importorskip("transformers")
    from transformers.models.convnext.modeling_convnext import ConvNextLayerNorm

    model = nn.Sequential(ConvNextLayerNorm(16, data_format="channels_first"), nn.Conv2d(16, 4, 1),
                          ConvNextLayerNorm(4, data_format="channels_first")).eval()
    x = torch.randn(2, 16, 5, 6) * 20
    ref = model(x)
    changes = patch_safe_layernorm(model)
    assert len(changes) == 2 and all(m.channels_first for m in (model[0], model[2]))
    assert torch.allclose(model(x), ref, rtol=0, atol=2e-5)


@pytest.mark.gpu
def test_channels_first_layernorm_on_software_gpu(gpu, tmp_path):
    m = _cf_block()
    patched = copy.deepcopy(m)
    patch_safe_layernorm(patched)
    x = torch.randn(1, 3, 9, 7)
    run = gpu_vs_torch(patched, (x,), tmp_path / "cf.tflite")
    assert run.ok, run.summary()
    print(f"\n[llvmpipe fp16] channels-first SafeLayerNorm: corr={run.min_corr():.6f}")
    assert run.min_corr() >= 0.999
    ops = run.info.op_histogram()
    assert ops.get("TRANSPOSE", 0) <= 1, ops        # the permute pair around the first norm is gone


class _ZeroedRows(nn.Module):
    """ESM's padding: embeddings zeroed where the mask is 0, then a LayerNorm with BERT's eps 1e-12."""

    def __init__(self, norm):
        super().__init__()
        self.norm = norm

    def forward(self, x, keep):                              # keep [1, S, 1] in {0, 1}
        return self.norm(x * keep)


def test_an_all_zero_row_stays_zero_in_torch():
    for norm in (SafeLayerNorm(nn.LayerNorm(32, eps=1e-12)), SafeRMSNorm(torch.ones(32), 1e-12)):
        x = torch.randn(1, 6, 32)
        keep = torch.tensor([1.0] * 4 + [0.0] * 2).view(1, 6, 1)
        out = _ZeroedRows(norm)(x, keep)
        assert torch.equal(out[:, 4:], torch.zeros_like(out[:, 4:]))    # as nn.LayerNorm: 0 / sqrt(eps) = 0
        if isinstance(norm, SafeLayerNorm):                             # bound: fp32 rounding, as before the guard
            torch.testing.assert_close(out, nn.functional.layer_norm(x * keep, (32,), eps=1e-12),
                                       rtol=2e-5, atol=2e-5)


@pytest.mark.gpu
def test_an_all_zero_row_with_a_tiny_eps_is_finite_on_the_fp16_gpu(gpu, tmp_path):
    """Measured on the software GPU before the guard: the zero rows came back NaN (1e-12 is 0 in fp16, and
    rsqrt(0) * 0 is NaN), which made ESM with a padded batch NUMERICS_FAIL at full residency."""
    torch.manual_seed(0)
    model = _ZeroedRows(SafeLayerNorm(nn.LayerNorm(32, eps=1e-12))).eval()
    x, keep = torch.randn(1, 6, 32), torch.tensor([1.0] * 4 + [0.0] * 2).view(1, 6, 1)
    result = gpu_vs_torch(model, (x, keep), tmp_path / "zero_rows.tflite")
    assert result.ok and all(c.nonfinite == 0 for c in result.comparisons), result.summary()
    assert result.min_corr() > 0.999, result.summary()
