"""Transposed conv without TRANSPOSE_CONV: zero-stuffed and polyphase forms.

Proof: (1) exact in torch over a sweep of options and odd sizes; (2) the plain conversion holds
TRANSPOSE_CONV (the desktop GPU accepts it -- the wall is phone-side op-version skew -- so this test
pins the op, and would notice if the converter stopped emitting it); (3) each rewritten form converts
without it, compiles GPU-only and matches torch on the GPU (fp16).
"""
import itertools

import pytest
import torch
from torch import nn

from litert_gpu_toolkit.lowering.export import export_tflite, gpu_vs_torch
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites import PATCHES
from litert_gpu_toolkit.rewrites.transpose_conv import (
    ConvTSpec,
    DepthwisePolyphaseConvT2d,
    PolyphaseConvT1d,
    PolyphaseConvT2d,
    ZeroStuffConvT1d,
    ZeroStuffConvT2d,
    choose_form,
    conv_transpose_macs,
    conv_per_group,
    interleave_phases,
    patch_conv_transpose,
)


def _rel_err(out, ref):
    out, ref = out.detach(), ref.detach()
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-12))


SWEEP_1D = [
    dict(k=k, s=s, p=p, op=op, d=d, g=g, cin=cin, cout=cout)
    for (k, s, p, d), (cin, cout, g) in itertools.product(
        [
            (4, 2, 1, 1),
            (8, 4, 2, 1),
            (3, 2, 1, 1),
            (5, 3, 0, 1),
            (2, 2, 0, 1),
            (7, 4, 3, 1),
            (3, 2, 2, 2),
            (1, 3, 0, 1),
        ],
        [(3, 5, 1), (6, 4, 2)],
    )
    for op in range(max(s, d))
    if op < max(s, d)
]


@pytest.mark.parametrize("cls", [ZeroStuffConvT1d, PolyphaseConvT1d])
def test_1d_forms_are_exact_over_options(cls):
    torch.manual_seed(0)
    for c in SWEEP_1D:
        m = nn.ConvTranspose1d(
            c["cin"],
            c["cout"],
            c["k"],
            stride=c["s"],
            padding=c["p"],
            output_padding=c["op"],
            dilation=c["d"],
            groups=c["g"],
            bias=c["k"] % 2 == 0,
        )
        r = cls.from_conv_transpose(m)
        for length in (1, 13):
            x = torch.randn(2, c["cin"], length) * 3 - 1  # negative values, odd sizes
            ref = m(x)
            if ref.numel() == 0:
                continue
            out = r(x)
            assert out.shape == ref.shape, (c, length)
            assert _rel_err(out, ref) < 2e-6, (c, length)


SWEEP_2D = [
    ((4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 1),
    ((3, 5), (2, 3), (1, 2), (1, 2), (1, 1), 2),
    ((8, 8), (4, 4), (2, 2), (3, 1), (1, 1), 1),
    ((3, 3), (2, 2), (0, 1), (1, 0), (2, 1), 1),
    ((2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 6),
    ((5, 4), (3, 2), (2, 1), (2, 1), (1, 1), 3),
    ((1, 1), (2, 2), (0, 0), (1, 1), (1, 1), 1),
]


@pytest.mark.parametrize("cls", [ZeroStuffConvT2d, PolyphaseConvT2d])
def test_2d_forms_are_exact_over_options(cls):
    torch.manual_seed(1)
    for k, s, p, op, d, g in SWEEP_2D:
        m = nn.ConvTranspose2d(
            6, 6 if g == 6 else 9 if g == 3 else 4, k, stride=s, padding=p, output_padding=op, dilation=d, groups=g
        )
        r = cls.from_conv_transpose(m)
        for hw in ((1, 1), (5, 7), (6, 3)):
            x = torch.randn(2, 6, *hw) * 2 - 0.5
            ref = m(x)
            out = r(x)
            assert out.shape == ref.shape, (k, s, p, op, d, g, hw)
            assert _rel_err(out, ref) < 2e-6, (k, s, p, op, d, g, hw)


def test_unbatched_input_and_output_size_argument():
    m = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1)
    x = torch.randn(3, 5, 4)
    for cls in (ZeroStuffConvT2d, PolyphaseConvT2d):
        r = cls.from_conv_transpose(m)
        assert _rel_err(r(x), m(x)) < 2e-6
        xb = x[None]
        assert _rel_err(r(xb, output_size=(10, 8)), m(xb, output_size=(10, 8))) < 2e-6


def test_interleave_is_pixel_shuffle_order_and_handles_unequal_strides():
    z = torch.randn(2, 3 * 4, 5, 7)
    assert torch.equal(interleave_phases(z, (2, 2)), nn.functional.pixel_shuffle(z, 2))
    z = torch.randn(2, 3 * 6, 5, 7)
    out = interleave_phases(z, (2, 3))
    ref = z.reshape(2, 3, 2, 3, 5, 7).permute(0, 1, 4, 2, 5, 3).reshape(2, 3, 10, 21)
    assert torch.equal(out, ref)
    z1 = torch.randn(2, 4 * 3, 9)
    assert torch.equal(interleave_phases(z1, (3,)), z1.reshape(2, 4, 3, 9).permute(0, 1, 3, 2).reshape(2, 4, 27))


def test_grouped_conv_split_is_exact():
    x = torch.randn(1, 6, 7, 5)
    w, b = torch.randn(4, 3, 3, 3), torch.randn(4)
    assert _rel_err(conv_per_group(x, w, b, 2, 1), nn.functional.conv2d(x, w, b, 1, 1, 1, 2)) < 1e-6


def test_macs_and_auto_choice():
    spec = ConvTSpec.of(nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1))
    native = conv_transpose_macs(spec, (32, 32), "native")
    assert conv_transpose_macs(spec, (32, 32), "zerostuff") == 4 * native  # s*s times the MACs
    assert conv_transpose_macs(spec, (32, 32), "polyphase") < 1.1 * native  # + the border rows only
    assert choose_form(spec) == "polyphase"
    dw = ConvTSpec.of(nn.ConvTranspose2d(8, 8, 4, stride=2, padding=1, groups=8))
    assert choose_form(dw) == "depthwise"
    dilated = ConvTSpec.of(nn.ConvTranspose1d(4, 4, 3, stride=1, dilation=3))  # densified kernel: 7 taps vs 3
    assert choose_form(dilated) == "zerostuff" and choose_form(dilated, "polyphase") == "polyphase"


def test_patch_replaces_every_conv_transpose_and_is_registered():
    model = nn.Sequential(nn.ConvTranspose1d(4, 4, 4, 2, 1, groups=4), nn.ReLU(), nn.ConvTranspose1d(4, 2, 3, 2))
    x = torch.randn(1, 4, 9)
    ref = model(x)
    changes = patch_conv_transpose(model)
    assert [c.path for c in changes] == ["0", "2"] and all(c.exact for c in changes)
    assert type(model[0]).__name__ == "DepthwisePolyphaseConvT1d" and isinstance(model[2], PolyphaseConvT1d)
    assert _rel_err(model(x), ref) < 2e-6
    assert PATCHES["patch_conv_transpose"].wall == "transpose_conv"
    with pytest.raises(ValueError):
        patch_conv_transpose(nn.Sequential(), mode="fast")


# ------------------------------------------------------------------------------ on the converter / GPU


class Upsamplers(nn.Module):
    """Four upsamplers, one output each: 2-D s=2 k=4, depthwise 2-D, 1-D s=4 k=8, odd grouped 2-D."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.up2d = nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1)
        self.dw2d = nn.ConvTranspose2d(8, 8, 4, stride=2, padding=1, groups=8)
        self.up1d = nn.ConvTranspose1d(8, 4, 8, stride=4, padding=2)
        self.odd = nn.ConvTranspose2d(6, 4, (3, 5), stride=(2, 3), padding=(1, 2), output_padding=(1, 2), groups=2)

    def forward(self, x, a, y):
        return self.up2d(x), self.dw2d(x), self.up1d(a), self.odd(y)


INPUTS = (torch.randn(1, 8, 9, 11) - 0.3, torch.randn(1, 8, 13), torch.randn(1, 6, 7, 5))


class _First3(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x, a):
        return self.m.up2d(x), self.m.dw2d(x), self.m.up1d(a)


def test_plain_conversion_contains_transpose_conv(tmp_path):
    info = read_model_info(export_tflite(_First3(Upsamplers()), INPUTS[:2], tmp_path / "plain.tflite"))
    # one for each dense upsampler, one per group of the depthwise one (the converter splits groups)
    assert info.op_histogram().get("TRANSPOSE_CONV", 0) == 2 + 8, info.op_histogram()


@pytest.mark.parametrize(
    "m",
    [nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1), Upsamplers().odd],
    ids=["k3s2p1op1", "unequal-stride-groups"],
)
def test_plain_conversion_fails_unless_padding_is_valid_or_same(tmp_path, m):
    """litert-torch 0.10.0 lowers ConvTranspose only with padding 0 or (k - s) / 2 (TFLite VALID / SAME);
    any other padding -- including the common k=3, s=2, p=1, output_padding=1 -- fails to convert."""
    with pytest.raises(Exception, match="legalize operation 'mhlo.convolution'"):
        export_tflite(m, (INPUTS[2],), tmp_path / "odd.tflite")


@pytest.mark.parametrize("mode", ["polyphase", "zerostuff"])
def test_rewritten_converts_without_transpose_conv_and_runs_gpu_only(gpu, tmp_path, mode):
    model = Upsamplers().eval()
    with torch.no_grad():
        refs = model(*INPUTS)
    patch_conv_transpose(model, mode=mode)
    with torch.no_grad():
        for out, ref in zip(model(*INPUTS), refs):
            assert _rel_err(out, ref) < 2e-6
    res = gpu_vs_torch(model, INPUTS, tmp_path / f"{mode}.tflite")
    hist = res.info.op_histogram()
    assert "TRANSPOSE_CONV" not in hist, hist
    assert not res.info.high_rank_tensors(), "rank > 4 tensor in the rewritten graph"
    assert res.ok, res.summary()
    assert res.run.gpu.cpu_ops in (None, 0)
    assert len(res.comparisons) == 4
    for c in res.comparisons:
        assert c.nonfinite == 0 and c.corr >= 0.999, res.summary()
    if mode == "polyphase":
        assert hist.get("DEPTHWISE_CONV_2D", 0) == 1, hist  # the depthwise upsampler stays one op


def test_depthwise_form_refuses_dense_conv():
    with pytest.raises(ValueError):
        DepthwisePolyphaseConvT2d.from_conv_transpose(nn.ConvTranspose2d(4, 8, 4, 2, 1))


def test_bench_script_quick_smoke(tmp_path, gpu):
    """scripts/bench_rewrites.py --quick: one run end to end, every form converts and runs on CPU and GPU."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [
            sys.executable,
            str(root / "scripts" / "bench_rewrites.py"),
            "--quick",
            "--repeats",
            "2",
            "--json",
            str(tmp_path / "bench.json"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "| ConvTranspose2d s=2 k=4" in out.stdout and "software Vulkan" in out.stdout
    data = json.loads((tmp_path / "bench.json").read_text())
    conv = data["cases"][0]["results"]
    for form in ("native", "zerostuff", "polyphase"):
        assert conv[form]["cpu"]["status"] == "ok" and conv[form]["gpu"]["status"] == "ok", conv[form]
    assert data["cases"][0]["macs"]["zerostuff"] == 4 * data["cases"][0]["macs"]["native"]


# ------------------------------------------------------------------ functional F.conv_transpose1d / 2d

FUNCTIONAL_SWEEP = [  # (nd, k, s, p, op, d, g, cin, cout)
    (1, 4, 2, 3, 0, 1, 1, 4, 4),  # a 1-D UNet upsampler: k=4, s=2, padding 3 (fails to convert plainly)
    (1, 3, 2, 1, 1, 1, 1, 3, 5),
    (1, 5, 3, 0, 2, 2, 2, 6, 4),
    (1, 7, 4, 3, 1, 1, 4, 4, 4),  # depthwise
    (1, 1, 3, 0, 0, 1, 1, 2, 2),
    (2, (3, 5), (2, 3), (1, 2), (1, 2), (1, 1), 2, 6, 4),
    (2, 4, 2, 1, 0, 1, 1, 3, 2),
    (2, 3, 2, 1, 1, 2, 1, 2, 3),
    (2, 2, 2, 0, 0, 1, 6, 6, 6),
    (2, (1, 3), (3, 1), 0, (2, 0), 1, 1, 4, 8),
]


@pytest.mark.parametrize("case", FUNCTIONAL_SWEEP, ids=lambda c: "-".join(map(str, c)))
def test_functional_conv_transpose_is_exact_for_any_weight(case):
    """The handler's polyphase form vs F.conv_transpose*d: bound 2e-6 of the output scale (fp32 rounding of
    the same sums); the rank-4 weight transform equals `polyphase_weight` bit for bit."""
    from litert_gpu_toolkit.rewrites.transpose_conv import conv_transpose_polyphase, polyphase_weight_rank4

    nd, k, s, p, op, d, g, cin, cout = case
    torch.manual_seed(3)
    fn = nn.functional.conv_transpose1d if nd == 1 else nn.functional.conv_transpose2d
    kernel = (k,) * nd if isinstance(k, int) else k
    w = torch.randn(cin, cout // g, *kernel)
    for bias in (None, torch.randn(cout)):
        for size in (1, 6, 9):
            x = torch.randn(2, cin, *([size] * nd)) * 2 - 0.5
            try:
                ref = fn(x, w, bias, s, p, op, g, d)
            except RuntimeError:  # torch's own kernel refuses (empty output on oneDNN)
                continue
            if ref.numel() == 0:
                assert conv_transpose_polyphase(x, w, bias, s, p, op, g, d) is NotImplemented
                continue
            out = conv_transpose_polyphase(x, w, bias, s, p, op, g, d)
            assert out.shape == ref.shape and _rel_err(out, ref) < 2e-6, (case, size)
            assert _rel_err(conv_transpose_polyphase(x[0], w, bias, s, p, op, g, d), ref[0]) < 2e-6  # unbatched
    spec = ConvTSpec(nd, cin, cout, kernel, *[(v,) * nd if isinstance(v, int) else v for v in (s, p, op, d)], g)
    from litert_gpu_toolkit.rewrites.transpose_conv import polyphase_weight

    assert torch.equal(polyphase_weight_rank4(w, spec), polyphase_weight(w, spec, "channel"))


class FunctionalUpsamplers(nn.Module):
    """F.conv_transpose with weights built in forward: a per-channel 1-D kernel laid on the diagonal of a
    [C, C, 4] weight (padding 3, stride 2), a 2-D weight computed from a second input (k3 s2 p1 op1), and a
    depthwise 2-D upsampler whose weight is a parameter times 2."""

    def __init__(self):
        super().__init__()
        self.register_buffer("taps", torch.tensor([1.0, 3.0, 3.0, 1.0]) / 4)
        self.dw = nn.Parameter(torch.randn(4, 1, 4, 4))
        self.register_buffer("eye", torch.eye(4))  # torch.eye in forward leaves STABLEHLO_IOTA (interpreter fails)

    def forward(self, a, x, z):
        w1 = self.eye[:, :, None] * self.taps
        up1 = nn.functional.conv_transpose1d(a, w1, stride=2, padding=3)
        w2 = torch.tanh(z).reshape(4, 3, 3, 3)
        up2 = torch.conv_transpose2d(x, w2, None, 2, 1, 1)
        up3 = nn.functional.conv_transpose2d(x, self.dw * 2, torch.ones(4), stride=2, padding=1, groups=4)
        return up1, up2, up3


F_INPUTS = (torch.randn(1, 4, 16), torch.randn(1, 4, 6, 7), torch.randn(1, 108))


def test_functional_conv_transpose_fails_to_convert_plainly(tmp_path):
    with pytest.raises(Exception, match="legalize operation 'mhlo.convolution'"):
        export_tflite(FunctionalUpsamplers(), F_INPUTS, tmp_path / "plain.tflite")


def test_functional_conv_transpose_handler_runs_gpu_only(gpu, tmp_path):
    from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper

    model = FunctionalUpsamplers().eval()
    wrapped = GpuRewriteWrapper(model, include=["patch_conv_transpose"])
    with torch.no_grad():
        for out, ref in zip(wrapped(*F_INPUTS), model(*F_INPUTS)):
            assert _rel_err(out, ref) < 2e-6
    assert {c.rewrite for c in wrapped.changes} == {"patch_conv_transpose"}
    res = gpu_vs_torch(wrapped, F_INPUTS, tmp_path / "functional.tflite")
    hist = res.info.op_histogram()
    assert "TRANSPOSE_CONV" not in hist and not res.info.high_rank_tensors(), hist
    assert res.ok and res.run.gpu.cpu_ops in (None, 0), res.summary()
    assert len(res.comparisons) == 3
    for c in res.comparisons:
        assert c.nonfinite == 0 and c.corr >= 0.999, res.summary()


def test_rewritten_layers_keep_the_conv_attributes():
    """Code around a layer reads its hyper-parameters (EnCodec's decoder trims by conv.kernel_size / conv.stride)."""
    from litert_gpu_toolkit.rewrites.transpose_conv import PolyphaseConvT1d, ZeroStuffConvT1d

    conv = torch.nn.ConvTranspose1d(4, 6, 7, stride=3, padding=2, output_padding=1)
    for cls in (PolyphaseConvT1d, ZeroStuffConvT1d):
        new = cls.from_conv_transpose(conv)
        for name in ("kernel_size", "stride", "padding", "output_padding", "dilation", "groups", "in_channels",
                     "out_channels", "padding_mode"):
            assert tuple(getattr(new, name)) == tuple(getattr(conv, name)) if isinstance(getattr(conv, name), tuple) \
                else getattr(new, name) == getattr(conv, name), (cls.__name__, name)
