"""apply_patches / convert_for_gpu: selection rules, conversion, check, and never a false success."""

import pytest
import torch
from torch import nn

import litert_gpu_toolkit
from litert_gpu_toolkit.convert.pipeline import apply_patches, convert_for_gpu
from litert_gpu_toolkit.rewrites.registry import functional_selection
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites import PATCHES, Change, register


class Walls(nn.Module):
    """Several walls at once: TRANSPOSE_CONV (non-SAME padding: fails to convert), ELU (SELECT),
    Hardtanh(0, 1) (RELU_0_TO_1), chunk, a runtime expand of a keyword input (BROADCAST_TO), torch.where."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.act, self.gate = nn.ELU(), nn.Hardtanh(0.0, 1.0)

    def forward(self, x, bias):
        y = self.act(self.up(x))
        a, b = y.chunk(2, dim=1)
        y = torch.cat([a, self.gate(b)], 1) + bias.expand(1, 4, 18, 22)
        return torch.where(y > 0.5, y, -y)


X = torch.randn(1, 8, 9, 11)
BIAS = torch.randn(1, 1, 1, 22)


def test_apply_patches_applies_module_patches_and_lists_functional_ones():
    model = Walls()
    ref = model(X, BIAS)
    changes = apply_patches(model, ((X,), {"bias": BIAS}))
    by_rewrite = {c.rewrite for c in changes}
    assert {"patch_conv_transpose", "patch_hardsigmoid", "patch_chunk", "patch_broadcast_to"} <= by_rewrite, changes
    assert "patch_select" not in by_rewrite        # opt-in: the graph pass meets the SELECT wall (legalize.boolean)
    assert all(isinstance(c, Change) and c.exact for c in changes)
    assert type(model.up).__name__ == "PolyphaseConvT2d" and type(model.act).__name__ == "ELU"
    assert "forward" not in model.__dict__          # apply_patches leaves functional rewrites to the wrapper
    assert torch.allclose(model(X, BIAS), ref, rtol=1e-5, atol=1e-6)


def test_include_exclude_and_opt_in_rules():
    model = Walls()
    changes = apply_patches(model, ((X,), {"bias": BIAS}), only=["patch_conv_transpose"])
    assert {c.rewrite for c in changes} == {"patch_conv_transpose"}
    model = Walls()                                     # include= adds to the defaults, it does not restrict
    changes = apply_patches(model, ((X,), {"bias": BIAS}), include=["patch_conv_transpose", "patch_select"])
    assert {"patch_conv_transpose", "patch_select", "patch_chunk"} <= {c.rewrite for c in changes}  # + an opt-in
    model = Walls()
    changes = apply_patches(model, ((X,), {"bias": BIAS}), exclude=["patch_select", "patch_conv_transpose"])
    assert not {"patch_select", "patch_conv_transpose"} & {c.rewrite for c in changes}
    assert isinstance(model.up, nn.ConvTranspose2d) and isinstance(model.act, nn.ELU)
    with pytest.raises(ValueError, match="unknown rewrite.*patch_does_not_exist.*known: .*patch_select"):
        apply_patches(Walls(), None, include=["patch_does_not_exist"])
    with pytest.raises(ValueError, match="patch_nope"):
        convert_for_gpu(Walls(), (X,), "unused.tflite", only=["patch_nope"])

    calls = []

    @register("_test_approx", wall="select", exact=False)
    def _approx(model):
        calls.append("approx")
        return [Change("", "test", "_test_approx", False)]

    @register("_test_optin", wall="select", default=False)
    def _optin(model):
        calls.append("optin")
        return []
    try:
        apply_patches(nn.Identity(), None)
        assert calls == []                               # approximate and opt-in patches stay off
        assert "_test_approx" not in functional_selection()
        apply_patches(nn.Identity(), None, approximate=True, include=["_test_approx", "_test_optin"])
        assert calls == ["approx", "optin"]
    finally:
        PATCHES.pop("_test_approx", None)
        PATCHES.pop("_test_optin", None)


def test_exported_from_the_package():
    assert litert_gpu_toolkit.convert_for_gpu is convert_for_gpu
    assert litert_gpu_toolkit.apply_patches is apply_patches


def test_convert_for_gpu_passes_with_patches(tmp_path, gpu):
    result = convert_for_gpu(Walls(), (X,), tmp_path / "walls.tflite", kwargs={"bias": BIAS})
    assert result.ok, result.summary()
    assert result.verdict == "PASS" and result.path.exists()
    assert result.signatures["serving_default"]["inputs"] == ["args_0", "bias"]
    ops = read_model_info(result.path).op_histogram()
    assert not {"TRANSPOSE_CONV", "SELECT", "SELECT_V2", "RELU_0_TO_1", "BROADCAST_TO", "SPLIT"} & set(ops), ops
    assert {"patch_conv_transpose", "patch_broadcast_to", "legalize"} <= {c.rewrite for c in result.changes}
    assert "PASS" in result.summary()                  # the SELECT_V2 of torch.where: met by the graph pass


def test_convert_failure_is_reported_not_raised(tmp_path):
    result = convert_for_gpu(Walls(), (X,), tmp_path / "plain.tflite", kwargs={"bias": BIAS}, patches=False)
    assert not result.ok and result.verdict == "CONVERT_FAIL" and result.path is None
    assert "mhlo.convolution" in result.error
    assert "patch_conv_transpose" in result.suggestions


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Hardtanh(0.0, 1.0)

    def forward(self, x):
        return self.gate(x * 2.0)


def test_failed_check_is_never_a_success(tmp_path, gpu):
    result = convert_for_gpu(Gate(), (X,), tmp_path / "gate.tflite", patches=False)
    assert result.path is not None and result.path.exists()
    assert not result.ok and result.verdict != "PASS", result.summary()
    assert "patch_hardsigmoid" in result.suggestions
    unchecked = convert_for_gpu(Gate(), (X,), tmp_path / "gate2.tflite", check=False)
    assert not unchecked.ok and unchecked.verdict == "UNCHECKED"


def test_timings_say_where_the_conversion_time_went(tmp_path):
    """ConvertResult.timings: seconds per stage, the checked run's check included; the stages fit in the total."""
    result = convert_for_gpu(Gate(), (X,), tmp_path / "gate.tflite", check=False)
    t = result.timings
    assert {"reference", "rewrite", "legalize", "convert", "total"} <= set(t) and "check" not in t, t
    assert all(v >= 0 for v in t.values()) and sum(v for k, v in t.items() if k != "total") <= t["total"] + 0.05
    assert result.inputs and result.reference                  # what a re-check under another runtime needs


def test_multi_signature_conversion_is_checked_per_signature(tmp_path, gpu):
    result = convert_for_gpu(Gate(), None, tmp_path / "multi.tflite",
                             signatures={"small": (torch.randn(1, 4, 5, 5),), "large": (X,)})
    assert set(result.signatures) == {"small", "large"}
    assert set(result.report.signatures) == {"small", "large"}      # the checker compared both with torch
    assert result.ok, result.summary()
    assert {c.rewrite for c in result.changes} == {"patch_hardsigmoid"}


def test_rewrite_wrapper_rejects_unknown_names():
    from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper

    with pytest.raises(ValueError, match="patch_selekt.*known: .*patch_select"):
        GpuRewriteWrapper(nn.Identity(), include=["patch_selekt"])
    with pytest.raises(ValueError, match="not the string"):
        GpuRewriteWrapper(nn.Identity(), include="patch_select")
    assert GpuRewriteWrapper(nn.Identity(), include=["patch_select"]).include == ["patch_select"]


class Raises(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def test_a_rewrite_that_raises_is_dropped_not_raised(tmp_path, gpu):
    calls = []

    @register("_test_raises", wall="select")
    def _boom(model):
        calls.append(1)
        raise RuntimeError("size mismatch in a test rewrite")
    try:
        model = Raises()
        result = convert_for_gpu(model, (X,), tmp_path / "r.tflite")
    finally:
        PATCHES.pop("_test_raises", None)
    assert calls and result.ok, result.summary()
    assert "_test_raises" in result.dropped and "size mismatch" in result.dropped["_test_raises"]
    assert "rewrite dropped: _test_raises" in result.summary()


class Harmful(nn.Module):
    """Plain conversion is exact; the test rewrite below breaks the numbers (a stand-in for a rewrite that
    is wrong for a model it was not written for)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(11, 11)

    def forward(self, x):
        return self.lin(x)


def test_never_worse_than_plain_and_model_not_mutated(tmp_path, gpu):
    @register("_test_harmful", wall="select")
    def _harm(model):
        with torch.no_grad():
            model.lin.weight.mul_(-1.0)
        return [Change("lin", "negate (test)", "_test_harmful", True)]
    try:
        model = Harmful()
        before = model.lin.weight.detach().clone()
        result = convert_for_gpu(model, (X,), tmp_path / "h.tflite")
    finally:
        PATCHES.pop("_test_harmful", None)
    assert torch.equal(model.lin.weight, before)                # inplace=False: the caller's model untouched
    assert result.ok, result.summary()
    assert "_test_harmful" in result.dropped and "_test_harmful" not in result.kept
    assert len(result.attempts) >= 2 and result.path.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.tflite", "h.tflite.convert.log"]  # tries: gone


def _fake(verdict, gpu_ops, total, entries):
    """A ConvertResult holding a checker-like report: entries = {label: (corr, within_tolerance, symptom)}."""
    from types import SimpleNamespace

    from litert_gpu_toolkit.convert.pipeline import ConvertResult

    vs_ref = {lbl: {"corr": corr, "within_tolerance": ok, "symptom": sym} for lbl, (corr, ok, sym) in entries.items()}
    problems = [f"serving_default/output_0 on {lbl} vs reference: outside tolerance ({sym})"
                for lbl, (corr, ok, sym) in entries.items() if not ok]
    report = SimpleNamespace(verdict=verdict, ok=verdict == "PASS", problems=problems, summary=verdict,
                             residency={"gpu_ops": gpu_ops, "total_ops": total},
                             signatures={"serving_default": {"output_0": {"vs_reference": vs_ref, "vs_cpu": {}}}})
    return ConvertResult(None, [], report=report)


def test_quality_ranks_gpu_residency_and_never_demotes_good_numbers():
    from litert_gpu_toolkit.convert.pipeline import describe, quality

    good = (1.0, True, None)
    # Swin v2's case: 77% on the GPU, corr 1.000000, yet "outside tolerance" (an rtol/atol or vs-CPU failure)
    rewritten = _fake("FALLBACK", 77, 100, {"gpu_fp16+cpu": (0.9999996, False, "degraded"), "gpu_fp32+cpu": good})
    plain = _fake("FALLBACK", 4, 100, {"gpu_fp16+cpu": good, "gpu_fp32+cpu": good})
    assert quality(rewritten) > quality(plain), (quality(rewritten), quality(plain))
    assert "wrong numbers" not in describe(rewritten)
    # wrong numbers do demote: non-finite on fp16, or a corr below 0.999
    nan16 = _fake("FALLBACK", 90, 100, {"gpu_fp16+cpu": (None, False, "nonfinite"), "gpu_fp32+cpu": good})
    low = _fake("FALLBACK", 90, 100, {"gpu_fp16+cpu": (0.95, False, "degraded")})
    assert quality(plain) > quality(nan16) and quality(plain) > quality(low)
    assert "wrong numbers: serving_default/output_0 on gpu_fp16+cpu: nonfinite" in describe(nan16)
    # PASS beats any FALLBACK; between equals, more of the graph on the GPU wins, then the corr
    passing = _fake("PASS", 100, 100, {"gpu_fp16": (0.9991, True, None)})
    assert quality(passing) > quality(rewritten)
    assert quality(_fake("FALLBACK", 50, 100, {"g": good})) > quality(_fake("FALLBACK", 40, 100, {"g": good}))
    assert quality(_fake("FALLBACK", 50, 100, {"g": good})) > quality(_fake("FALLBACK", 50, 100, {"g": (0.9995, True,
                                                                                                         None)}))
    # between two NUMERICS_FAIL files at full residency, finite-but-degraded beats non-finite (whose corr is
    # None: trained EfficientViT kept the inf file, its fp32 corr of 1.0 read as the worst output)
    inf = _fake("NUMERICS_FAIL", 100, 100, {"gpu_fp16": (None, False, "nonfinite"), "gpu_fp32": good})
    degraded = _fake("NUMERICS_FAIL", 100, 100, {"gpu_fp16": (0.9938, False, "degraded"), "gpu_fp32": good})
    assert quality(degraded) > quality(inf), (quality(degraded), quality(inf))


class TwoLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(11, 11), nn.Linear(11, 11)

    def forward(self, x):
        return self.b(self.a(x))


class _Broken(nn.Module):
    def forward(self, x):
        raise AttributeError("'NoneType' object has no attribute 'reshape'")


def test_a_patch_that_breaks_the_forward_is_the_one_blamed(monkeypatch):
    """A module patch that returns changes but leaves a model whose forward raises (patch_group_norm on timm's
    GroupNorm1NoBias did) is named in `errors`; the patches after it are not run, so a later one that runs the
    model (as patch_safe_reductions does) is not blamed for it."""
    import litert_gpu_toolkit.rewrites.apply as apply_mod
    from litert_gpu_toolkit.rewrites.apply import apply_patches
    from litert_gpu_toolkit.rewrites.registry import PatchSpec

    later = []

    def breaks(model):
        model.a = _Broken()
        return [Change("a", "replaced (test)", "_test_breaks", True)]

    def runs_the_model(model, example_inputs):
        later.append(1)
        model(*example_inputs[0])
        return []
    monkeypatch.setattr(apply_mod, "PATCHES", {"_test_breaks": PatchSpec("_test_breaks", breaks, True, "select", True),
                                               "_test_runs": PatchSpec("_test_runs", runs_the_model, True, "select",
                                                                       True)})
    errors: dict = {}
    apply_patches(TwoLayers().eval(), ((X,), {}), errors=errors)
    assert list(errors) == ["_test_breaks"] and "NoneType" in errors["_test_breaks"], errors
    assert not later
