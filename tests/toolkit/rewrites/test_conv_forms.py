"""Conv forms the converter refuses or the GPU miscomputes (rewrite `patch_conv_forms`, rewrites/conv_forms.py).

What was tried (litert-torch 0.10.0, llvmpipe software Vulkan, ai-edge-litert 2.3.0, plain conversion +
strict GPU-only compile, one tiny model each):

  fails -> fixed here
    Conv1d(4, 8, 4, padding='same')             CONVERT_FAIL: aten::convolution() Expected 'List[int]' for
    Conv1d(4, 4, 4, padding='same', dilation=3)   'padding' (the aten.conv1d.padding overload)
    F.conv1d(x, w_from_input, groups=2), 3 ch/g  GPU runs, corr 0.11 (grouped CONV_2D, channels per group
                                                   not multiples of 4; the module patch cannot see it)
    Conv3d(2, 4, 3, padding=1), Conv3d stride (1,2,2) on [1, 2, 4..5, 6..7, 6..7]
                                                 rejected: 'Tensor dimensions must be less than 5'
  fails -> already fixed elsewhere
    Conv1d padding_mode='reflect'                GATHER_ND (+ ABS of a constant): patch_reflect_pad
    Conv2d padding_mode='replicate'              MIRROR_PAD rejected: patch_reflect_pad
  converts and runs GPU-only, corr >= 0.99999 (no rewrite needed)
    Conv2d(4, 8, (2, 4), padding='same'); Conv2d padding_mode='circular'; Conv2d / Conv1d dilation 2 with
    stride 2; F.conv2d / F.conv1d with a weight computed from an input (groups 1); Conv1d k=65 and k=251;
    depthwise Conv1d dilation 4; Conv1d stride 5 > kernel 2; unbatched Conv1d input.

Bounds: string padding and group splitting compute the same conv on the same input (<= 1e-6 relative,
fp32 rounding); conv3d sums the depth taps in another order (<= 2e-6 of the output scale).
"""
import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from litert_gpu_toolkit.lowering.export import export_tflite, gpu_vs_torch
from litert_gpu_toolkit.rewrites.conv_forms import conv3d_as_conv2d, conv_rewritten
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


@pytest.mark.parametrize("k,d", [(1, 1), (2, 1), (4, 1), (5, 2), (4, 3), (6, 2)])
def test_string_padding_is_the_same_conv(k, d):
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 3, 17), torch.randn(5, 3, k), torch.randn(5)
    for padding in ("same", "valid"):
        ref = F.conv1d(x, w, b, 1, padding, d)
        out = conv_rewritten(1, x, w, b, 1, padding, d)
        assert out.shape == ref.shape and _rel(out, ref) <= 1e-6
        assert _rel(conv_rewritten(1, x[0], w, b, 1, padding, d), ref[0]) <= 1e-6
    assert conv_rewritten(1, x, w, b, 1, 2, d) is NotImplemented          # integer padding: left alone
    assert conv_rewritten(2, x[:, :, None], w[:, :, None], b, 1, "same", d) is NotImplemented  # converts


def test_misaligned_groups_split_exactly_and_aligned_ones_are_left():
    torch.manual_seed(1)
    for nd, (cin, cout, g) in itertools.product((1, 2), [(6, 4, 2), (6, 9, 3), (8, 6, 2)]):
        x = torch.randn(1, cin, *([9] * nd))
        w, b = torch.randn(cout, cin // g, *([3] * nd)), torch.randn(cout)
        fn = F.conv1d if nd == 1 else F.conv2d
        for stride, padding, dilation in ((1, 1, 1), (2, 0, 2), (1, "same", 2)):
            ref = fn(x, w, b, stride, padding, dilation, g)
            out = conv_rewritten(nd, x, w, b, stride, padding, dilation, g)
            assert _rel(out, ref) <= 1e-6
    w = torch.randn(8, 4, 3)
    assert conv_rewritten(1, torch.randn(1, 8, 9), w, None, 1, 1, 1, 2) is NotImplemented   # 4-aligned


@pytest.mark.parametrize("k,s,p,d,g", [(3, 1, 1, 1, 1), ((3, 2, 3), (1, 2, 2), 0, 1, 1), ((2, 3, 3), (2, 1, 1),
                                       (1, 1, 0), (2, 1, 1), 2), (1, 1, 0, 1, 1), ((3, 1, 1), (3, 1, 1), 2, 1, 4)])
def test_conv3d_as_conv2d_matches(k, s, p, d, g):
    torch.manual_seed(2)
    m = nn.Conv3d(4, 8, k, stride=s, padding=p, dilation=d, groups=g)
    for shape in ((2, 4, 5, 7, 6), (4, 7, 6, 5)):
        x = torch.randn(*shape)
        ref = m(x)
        out = conv3d_as_conv2d(x, m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups)
        assert out.shape == ref.shape and _rel(out, ref) <= 2e-6


class Forms(nn.Module):
    """The three failing forms: Conv1d 'same' with an even kernel, a grouped F.conv1d whose weight comes from
    an input, and a Conv3d on a video tensor built from (and returned to) a 4-D layout."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.same = nn.Conv1d(4, 8, 4, padding="same")
        self.c3 = nn.Conv3d(2, 4, 3, padding=1)

    def forward(self, a, z, v):
        w = torch.tanh(z).reshape(8, 3, 3)
        g = F.conv1d(torch.cat([a[:, :3], a[:, 1:]], 1), w, None, 1, 1, 1, 2)
        y = self.c3(v.reshape(1, 2, 4, 6, 6))
        return self.same(a), g, y.reshape(1, 4 * 4, 6, 6)


FORM_INPUTS = (torch.randn(1, 4, 20), torch.randn(1, 72), torch.randn(1, 8, 6, 6))


def test_forms_fail_plainly(tmp_path):
    with pytest.raises(Exception, match="argument 'padding'"):
        export_tflite(Forms(), FORM_INPUTS, tmp_path / "plain.tflite")


def test_forms_rewritten_run_gpu_only(gpu, tmp_path):
    model = Forms().eval()
    wrapped = GpuRewriteWrapper(model, include=["patch_conv_forms"])
    with torch.no_grad():
        for out, ref in zip(wrapped(*FORM_INPUTS), model(*FORM_INPUTS)):
            assert _rel(out, ref) <= 2e-6
    res = gpu_vs_torch(wrapped, FORM_INPUTS, tmp_path / "forms.tflite")
    assert not res.info.high_rank_tensors(), "rank > 4 tensor left"
    assert res.ok and res.run.gpu.cpu_ops in (None, 0), res.summary()
    assert len(res.comparisons) == 3
    for c in res.comparisons:
        assert c.nonfinite == 0 and c.corr >= 0.999, res.summary()
