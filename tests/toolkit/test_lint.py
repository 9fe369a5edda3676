"""lint_for_mobile finds each phone-only pattern by graph structure, and the rewritten model is clean."""
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from ai_edge_litert import schema_py_generated as schema

from litert_gpu_toolkit.lowering.export import export_tflite
from litert_gpu_toolkit.lint.mobile import lint_for_mobile, phone_risk_line
from litert_gpu_toolkit.core.symptoms import BY_ID
from litert_gpu_toolkit.runtime.tiny_models import add_model_bytes, single_op_model_bytes


class ConvT(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.ConvTranspose2d(4, 4, 4, stride=2, padding=1)

    def forward(self, x):
        return self.c(x)


class HardTanh01(nn.Module):
    def forward(self, x):
        return F.hardtanh(x, 0.0, 1.0)


class SelfDiv(nn.Module):
    def forward(self, x):
        return x / x


class RuntimeExpand(nn.Module):
    def forward(self, x):
        return x.expand(1, 4, 8, 16) + 1.0


class StateUpdate(nn.Module):
    def forward(self, h, x):
        new_h = h + x
        return new_h, new_h * 2


class MaskedScores(nn.Module):
    def forward(self, q, k, mask):
        return torch.softmax(q @ k.transpose(-1, -2) + mask, -1)


class Rank5(nn.Module):
    def forward(self, x):
        return (x.reshape(1, 2, 4, 4, 16) * 2).reshape(1, 8, 4, 16)


class Warp(nn.Module):
    def forward(self, x, grid):
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


class WhereMask(nn.Module):
    def forward(self, x):
        return torch.where(x > 0, x, torch.zeros_like(x) - 1)


class IntMask(nn.Module):
    def forward(self, x, m):
        return x * m.to(torch.float32)[:, None, :]


class Spectrum(nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x).abs()


class FoldedProduct(nn.Module):
    """Two blocks each scale one shared table by their own gain: each gain x table folds to 2 MiB."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(512, 1024))
        self.gains = nn.ParameterList([nn.Parameter(torch.rand(1024)) for _ in range(2)])

    def forward(self, x):
        for gain in self.gains:
            x = torch.relu(x + gain * self.table)
        return x


class GlobalPool(nn.Module):
    def forward(self, x):
        return x.mean((2, 3))


TORCH_CASES = {
    "transpose_conv": (ConvT, (torch.randn(1, 4, 8, 8),)),
    "relu_0_to_1": (HardTanh01, (torch.randn(1, 4, 8, 8),)),
    "identical_or_constant_inputs": (SelfDiv, (torch.randn(1, 4, 8, 8),)),
    "broadcast_to": (RuntimeExpand, (torch.randn(1, 1, 8, 16),)),
    "output_aliasing": (StateUpdate, (torch.randn(1, 8), torch.randn(1, 8))),
    "masked_attention": (MaskedScores, (torch.randn(1, 4, 8, 16), torch.randn(1, 4, 8, 16), torch.randn(1, 1, 8, 8))),
    "rank_gt_4": (Rank5, (torch.randn(1, 8, 4, 16),)),
    "gather_nd": (Warp, (torch.randn(1, 2, 8, 8), torch.rand(1, 6, 6, 2) * 2 - 1)),
    "select": (WhereMask, (torch.randn(1, 8, 4),)),
    "cast": (IntMask, (torch.randn(1, 4, 8), torch.ones(1, 8, dtype=torch.int32))),
    "fft": (Spectrum, (torch.randn(1, 64),)),
    "constant_blowup": (FoldedProduct, (torch.randn(512, 1024),)),
    "long_reduction": (GlobalPool, (torch.randn(1, 4, 64, 64),)),
}


@pytest.mark.parametrize("symptom", sorted(TORCH_CASES))
def test_pattern_found_in_converted_model(symptom, tmp_path):
    cls, args = TORCH_CASES[symptom]
    path = export_tflite(cls(), args, tmp_path / f"{symptom}.tflite")
    findings = lint_for_mobile(path)
    hits = [f for f in findings if f.symptom == symptom]
    assert hits, f"{symptom} not found; findings: {[f.line() for f in findings]}"
    for f in hits:
        assert f.rewrites == list(BY_ID[symptom].rewrites) and f.why and f.tensors and f.node >= 0


def test_split_found_in_hand_built_graph():
    options = schema.SplitOptionsT()
    options.numSplits = 2
    model = single_op_model_bytes("SPLIT", [("axis", (), np.array(1, np.int32)), ("x", (1, 8, 4, 4), None)],
                                  [("a", (1, 4, 4, 4)), ("b", (1, 4, 4, 4))], options=options,
                                  options_type="SplitOptions")
    assert [f.symptom for f in lint_for_mobile(model)] == ["split"]


def test_neg_inf_maxpool_padding_found_and_finite_padding_clean():
    pads = np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32)

    def padv2(value):
        return single_op_model_bytes("PADV2", [("x", (1, 8, 8, 4), None), ("p", (4, 2), pads),
                                               ("v", (1,), np.array([value], np.float32))], [("y", (1, 10, 10, 4))])

    assert [f.symptom for f in lint_for_mobile(padv2(-np.inf))] == ["maxpool_neg_inf_pad"]
    assert lint_for_mobile(padv2(-3.0e4)) == []


def test_clean_model_has_no_findings():
    assert lint_for_mobile(add_model_bytes()) == []


def test_phone_risk_line_names_phone_only_walls(tmp_path):
    path = export_tflite(ConvT(), (torch.randn(1, 4, 8, 8),), tmp_path / "convt.tflite")
    line = phone_risk_line(lint_for_mobile(path))
    assert line.startswith("passes here; phone risks: ") and "TRANSPOSE_CONV" in line


def test_cli_exit_codes_and_json(tmp_path):
    clean = tmp_path / "clean.tflite"
    clean.write_bytes(add_model_bytes())
    out = subprocess.run([sys.executable, "-m", "litert_gpu_toolkit", "lint", str(clean)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    risky = export_tflite(HardTanh01(), (torch.randn(1, 4, 8, 8),), tmp_path / "hs.tflite")
    report = tmp_path / "lint.json"
    out = subprocess.run([sys.executable, "-m", "litert_gpu_toolkit", "lint", str(risky), "--json", str(report)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "RELU_0_TO_1" in out.stdout
    assert json.loads(report.read_text())[0]["upstream"] == "google-ai-edge/LiteRT#8598"
    bad = tmp_path / "bad.tflite"
    bad.write_text("not a model")
    out = subprocess.run([sys.executable, "-m", "litert_gpu_toolkit", "lint", str(bad)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "text file" in out.stderr and "Traceback" not in out.stderr


def test_checker_includes_the_lint_on_a_passing_model(gpu, tmp_path):
    import io

    from litert_gpu_toolkit import check_gpu_compatibility, print_report

    path = export_tflite(ConvT(), (torch.randn(1, 4, 8, 8),), tmp_path / "convt.tflite")
    report = check_gpu_compatibility(path, precisions=("fp16",))
    assert report.verdict == "PASS", report.summary
    assert report.phone_risk.startswith("passes here; phone risks:") and "TRANSPOSE_CONV" in report.phone_risk
    assert any(f["symptom"] == "transpose_conv" for f in report.to_dict()["phone_risks"])
    buf = io.StringIO()
    print_report(report, file=buf)
    assert "phone risks" in buf.getvalue()


# ---- the rewritten counterparts are clean -------------------------------------------------------

def _rewritten(symptom):
    """(module, args) for the toolkit-rewritten form of each TORCH_CASES pattern."""
    from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper

    cls, args = TORCH_CASES[symptom]
    if symptom == "transpose_conv":
        from litert_gpu_toolkit.rewrites.transpose_conv import patch_conv_transpose
        model = cls()
        assert patch_conv_transpose(model)
        return model, args
    if symptom == "output_aliasing":
        from litert_gpu_toolkit.rewrites.output_aliasing import AliasSafeOutputs
        return AliasSafeOutputs(cls()), args, {"one": torch.ones(1)}
    if symptom == "masked_attention":
        from litert_gpu_toolkit.rewrites.masked_attention import expand_attention_mask

        class Expanded(nn.Module):
            def forward(self, q, k, mask):
                return torch.softmax(q @ k.transpose(-1, -2) + expand_attention_mask(mask, q.shape[1]), -1)
        return Expanded(), args
    if symptom == "rank_gt_4":
        from litert_gpu_toolkit.rewrites.rank_gt_4 import lower_rank_views
        return lower_rank_views(cls()), args
    if symptom == "select":
        return GpuRewriteWrapper(cls(), include=["patch_select"]), args
    if symptom == "relu_0_to_1":
        return GpuRewriteWrapper(cls(), include=["patch_hardsigmoid"]), args
    if symptom == "broadcast_to":
        return GpuRewriteWrapper(cls(), include=["patch_repeat_kv", "patch_broadcast_to"]), args
    if symptom == "identical_or_constant_inputs":
        return GpuRewriteWrapper(cls(), include=["patch_degenerate_softmax"]), args
    if symptom == "cast":
        class FloatMask(nn.Module):
            def forward(self, x, m):
                return x * m[:, None, :]
        return FloatMask(), (args[0], args[1].float())
    if symptom == "fft":
        from litert_gpu_toolkit.rewrites.fft import ConvSTFT
        return ConvSTFT(n_fft=64, hop_length=64, center=False, output="magnitude"), args
    if symptom == "constant_blowup":
        from litert_gpu_toolkit.rewrites.constant_blowup import constant_to_input
        wrapped = constant_to_input(cls(), ["table"])
        return wrapped, args, wrapped.runtime_inputs()
    if symptom == "gather_nd":
        return GpuRewriteWrapper(cls(), include=["patch_grid_sample"]), args
    if symptom == "long_reduction":
        return GpuRewriteWrapper(cls(), include=["patch_pooled_reductions"]), args
    raise KeyError(symptom)


@pytest.mark.parametrize("symptom", sorted(TORCH_CASES))
def test_rewritten_counterpart_is_clean(symptom, tmp_path):
    model, args, *kwargs = _rewritten(symptom)
    path = export_tflite(model, args, tmp_path / f"{symptom}_fixed.tflite", kwargs=kwargs[0] if kwargs else None)
    findings = [f for f in lint_for_mobile(path) if f.symptom == symptom]
    assert not findings, [f.line() for f in findings]


class Flip(nn.Module):
    def forward(self, x):
        return x.flip(-1) * 2


def test_flip_found_and_rewrite_is_exact_and_right_on_gpu(gpu, tmp_path):
    from litert_gpu_toolkit.lowering.export import gpu_vs_torch
    from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper

    x = torch.linspace(-4, 4, 2 * 3 * 24).reshape(1, 2, 3, 24)
    plain = export_tflite(Flip(), (x,), tmp_path / "flip.tflite")
    assert [f.symptom for f in lint_for_mobile(plain)] == ["reverse_v2"]
    fixed = GpuRewriteWrapper(Flip(), include=["patch_flip"])
    assert torch.equal(fixed(x), Flip()(x))
    result = gpu_vs_torch(fixed, (x,), tmp_path / "flip_fixed.tflite")
    assert not result.info.has_op("REVERSE_V2") and result.ok, result.summary()
    assert result.comparisons[0].corr > 0.9999 and result.comparisons[0].nonfinite == 0


@pytest.mark.parametrize("kind", ["rmsnorm", "layernorm"])
def test_distinct_squares_leave_no_identical_input_op(gpu, tmp_path, kind):
    """The safe norms square by x*x (an op with identical inputs, flagged for phones); with
    distinct_squares=True they are lint-clean, equal in torch to fp32 rounding, and right on the GPU."""
    from litert_gpu_toolkit.lowering.export import gpu_vs_torch
    from litert_gpu_toolkit.rewrites.fp16_silent_zero import patch_rmsnorm
    from litert_gpu_toolkit.rewrites.fp16_overflow import patch_safe_layernorm

    torch.manual_seed(0)
    norm = nn.RMSNorm(256, eps=1e-6) if kind == "rmsnorm" else nn.LayerNorm(256)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = norm

        def forward(self, x):
            return self.norm(x * 300.0)

    x = torch.randn(1, 8, 256)
    reference = Net()(x)
    safe, distinct = Net(), Net()
    patch = patch_rmsnorm if kind == "rmsnorm" else patch_safe_layernorm
    assert patch(safe) and patch(distinct, distinct_squares=True)
    torch.testing.assert_close(distinct(x), reference, rtol=1e-5, atol=1e-5)
    plain_path = export_tflite(safe, (x,), tmp_path / "safe.tflite")
    assert any(f.symptom == "identical_or_constant_inputs" for f in lint_for_mobile(plain_path))
    result = gpu_vs_torch(distinct, (x,), tmp_path / "distinct.tflite")
    assert not [f for f in lint_for_mobile(result.path) if f.symptom == "identical_or_constant_inputs"]
    assert result.ok and result.comparisons[0].corr > 0.999 and result.comparisons[0].nonfinite == 0, result.summary()


def test_misaligned_grouped_conv_found_and_split_form_is_exact_clean_and_right_on_gpu(gpu, tmp_path):
    from litert_gpu_toolkit.lowering.export import gpu_vs_torch
    from litert_gpu_toolkit.rewrites.grouped_conv import patch_grouped_conv

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(8, 4, 3, padding=1, groups=2), nn.ReLU())
    x = torch.randn(1, 8, 12, 12)
    plain = export_tflite(net, (x,), tmp_path / "grouped.tflite")
    assert [f.symptom for f in lint_for_mobile(plain)] == ["grouped_conv"]
    wrong = gpu_vs_torch(net, (x,), plain, convert=False)   # the wall itself: silently wrong (or a crash)
    assert not wrong.ok or not wrong.comparisons[0].corr > 0.99, wrong.summary()
    fixed = nn.Sequential(nn.Conv2d(8, 4, 3, padding=1, groups=2), nn.ReLU())
    fixed.load_state_dict(net.state_dict())
    assert patch_grouped_conv(fixed)
    torch.testing.assert_close(fixed(x), net(x), rtol=1e-6, atol=1e-6)
    result = gpu_vs_torch(fixed, (x,), tmp_path / "split.tflite")
    assert lint_for_mobile(result.path) == []
    assert result.ok and result.comparisons[0].corr > 0.999, result.summary()
