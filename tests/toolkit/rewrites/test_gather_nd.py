"""GATHER_ND sources: each rewrite is (1) exact in torch, (2) removes an op the plain conversion
really contains, (3) converts without it, compiles GPU-only and matches torch in fp16.

Patterns that are NOT walls on this toolchain (litert-torch 0.10.0, ai-edge-litert 2.3.0) are
proven too, in one model (`test_not_walls_*`): if one of them starts emitting GATHER_ND, that
test fails and the table in rewrites/gather_nd/ must change.
"""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("litert_torch")
import torch.nn as nn
import torch.nn.functional as F

from litert_gpu_toolkit.lowering.export import export_tflite, gpu_vs_torch
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites import PATCHES
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.rewrites.gather_nd import (
    EdgePadMaxPool,
    SliceConcatPadConv,
    grid_sample_dense,
    interpolate_separable,
    maxpool_edge_pad,
    pad_by_slices,
    patch_grid_sample,
    patch_interpolate,
    patch_maxpool_zeropad,
    patch_reflect_pad,
    resize_matrix,
)
from litert_gpu_toolkit.rewrites.rank_gt_4 import PatchMergingRank4, patch_patch_merging
from torch_helpers import Fn  # tests/torch_helpers.py

MIN_CORR = 0.999




def rel_err(got, ref, scale=None):
    scale = float(ref.abs().max()) if scale is None else scale
    return float((got.double() - ref.double()).abs().max()) / max(scale, 1e-30)


def assert_gpu_matches(module, args, path):
    """Proof step 3 on an already converted file: GPU-only compile, fp16 output vs torch."""
    result = gpu_vs_torch(module, args, path, convert=False)
    assert result.ok, result.summary() + "\n" + result.run.log_tail()
    assert not result.run.gpu.rejected
    for i, c in enumerate(result.comparisons):
        assert c.nonfinite == 0, f"output {i}: {c}"
        assert c.corr >= MIN_CORR, f"output {i}: corr {c.corr}"
    return result


@pytest.fixture(scope="module")
def outdir(tmp_path_factory):
    return tmp_path_factory.mktemp("gather")


def convert(module, args, path):
    export_tflite(module, args, path)
    return read_model_info(path)


# ---------------------------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------------------------

def test_patches_registered_with_their_wall():
    for name in ("patch_grid_sample", "patch_maxpool_zeropad", "patch_interpolate", "patch_reflect_pad"):
        assert PATCHES[name].wall == "gather_nd" and PATCHES[name].exact
    assert PATCHES["patch_patch_merging"].wall == "rank_gt_4"


# ---------------------------------------------------------------------------------------------
# (1) exactness in torch
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 7), (3, 2)), ((1, 3, 7, 5), (1, 2, 3, 0)), ((3, 6, 5), (2, 2, 2, 2)),
                                       ((2, 3, 4, 6), (0, 0, 3, 1)), ((1, 1, 2, 9), (1, 1, 1, 1))])
def test_pad_by_slices_bit_exact(mode, shape, pad):
    x = torch.randn(*shape) * 5 - 2
    assert torch.equal(pad_by_slices(x, pad, mode), F.pad(x, pad, mode=mode))


@pytest.mark.parametrize("cls,size", [(nn.Conv1d, (2, 3, 11)), (nn.Conv2d, (2, 3, 7, 6))])
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("padding", [0, 1, 2, "same"])
def test_patch_reflect_pad_conv_bit_exact(cls, size, mode, padding):
    torch.manual_seed(0)
    model = nn.Sequential(cls(3, 4, 5 if padding == 2 else 3, padding=padding, padding_mode=mode))
    x = torch.randn(*size) - 0.5
    with torch.no_grad():
        ref = model(x)
        changes = patch_reflect_pad(model)
        got = model(x)
    assert [c.path for c in changes] == ["0"] and isinstance(model[0], SliceConcatPadConv)
    assert model[0].conv.weight is not None and model[0].conv.padding_mode == "zeros"
    assert torch.equal(got, ref)


def test_maxpool_edge_pad_bit_exact_for_any_input():
    torch.manual_seed(0)
    checked = 0
    for n in (5, 6, 7, 10, 11):
        for k in (2, 3, 5):
            for s in (1, 2, 3):
                for p in range(0, k // 2 + 1):
                    for ceil in (False, True):
                        x = torch.randn(2, 3, n, n + 1) * 4 - 6          # mostly negative
                        assert torch.equal(maxpool_edge_pad(x, k, s, p, ceil), F.max_pool2d(x, k, s, p, ceil_mode=ceil))
                        x1 = x[:, :, 0]
                        want = F.max_pool1d(x1, k, s, p, ceil_mode=ceil)
                        assert torch.equal(maxpool_edge_pad(x1, k, s, p, ceil), want)
                        checked += 1
    assert checked == 5 * 3 * 7 * 2  # 7 (kernel, padding <= kernel/2) pairs per size and stride
    # non-finite values behave like torch's max pool too
    x = torch.randn(1, 2, 7, 7)
    x[0, 0, 0, 0], x[0, 0, 3, 6], x[0, 1, 6, 2] = -math.inf, math.inf, math.nan
    ref, got = F.max_pool2d(x, 3, 2, 1, ceil_mode=True), maxpool_edge_pad(x, 3, 2, 1, True)
    assert torch.equal(torch.isnan(ref), torch.isnan(got))
    assert torch.equal(torch.nan_to_num(ref), torch.nan_to_num(got))


def test_patch_maxpool_zeropad_modules_mtcnn_style():
    pnet_like = nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.PReLU(4),
        nn.MaxPool2d(2, 2, ceil_mode=True),
        nn.MaxPool2d(3, 2, ceil_mode=True),
        nn.MaxPool2d(3, 2, 1),
        nn.MaxPool2d(2, 2),
        nn.MaxPool2d(3, 1, 1, dilation=2),
    )
    x = torch.randn(1, 3, 61, 54)
    with torch.no_grad():
        ref = pnet_like(x)
        changes = patch_maxpool_zeropad(pnet_like)
        got = pnet_like(x)
    assert [c.path for c in changes] == ["2", "3", "4"]  # unpadded and dilated pools are left alone
    assert all(isinstance(pnet_like[i], EdgePadMaxPool) for i in (2, 3, 4))
    assert torch.equal(got, ref)


def test_resize_matrix_rows_sum_to_one():
    for mode, ac in (("bicubic", False), ("bicubic", True), ("bilinear", True)):
        m = resize_matrix(7, 12, mode, ac)
        assert m.shape == (12, 7)
        np.testing.assert_allclose(m.sum(1), 1.0, atol=1e-12)


INTERP_CASES = [
    dict(scale_factor=2),
    dict(scale_factor=1.5),
    dict(scale_factor=(0.5, 3)),
    dict(size=(11, 3)),
    dict(size=(4, 13)),
    dict(scale_factor=1.7, recompute_scale_factor=True),
    dict(size=(1, 1)),
]


@pytest.mark.parametrize("mode,align", [("bicubic", False), ("bicubic", True), ("bilinear", True)])
@pytest.mark.parametrize("hw", [(5, 7), (6, 6), (9, 4), (16, 16)])
def test_interpolate_separable_exact(mode, align, hw):
    """Bound: <= 5e-7 * max|x| from the float64 result; torch's own fp32 kernel is up to ~1.4e-6
    away from it (its weights are rounded to fp32), so against torch fp32 the bound is 3e-6."""
    torch.manual_seed(1)
    for kwargs in INTERP_CASES:
        x = torch.randn(2, 3, *hw) * 3
        got = interpolate_separable(x, mode=mode, align_corners=align, **kwargs)
        ref = F.interpolate(x, mode=mode, align_corners=align, **kwargs)
        ref64 = F.interpolate(x.double(), mode=mode, align_corners=align, **kwargs)
        scale = float(x.abs().max())
        assert got.shape == ref.shape
        assert rel_err(got, ref64, scale) <= 5e-7, kwargs
        assert rel_err(got, ref, scale) <= 3e-6, kwargs


def test_interpolate_never_switches_align_corners():
    x = torch.randn(1, 2, 5, 6)
    a = interpolate_separable(x, scale_factor=2, mode="bilinear", align_corners=True)
    b = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
    assert rel_err(a, b) > 1e-2  # the two conventions really differ here
    model = nn.Sequential(
        nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
        nn.Upsample(scale_factor=2, mode="bicubic"),
        nn.Upsample(scale_factor=2, mode="bilinear"),
    )
    assert [c.path for c in patch_interpolate(model)] == ["1"]  # bilinear+align_corners is opt-in
    model = nn.Sequential(
        nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
        nn.Upsample(scale_factor=2, mode="bicubic"),
        nn.Upsample(scale_factor=2, mode="bilinear"),
    )
    with torch.no_grad():
        ref = model(x)
        assert [c.path for c in patch_interpolate(model, bilinear_align_corners=True)] == ["0", "1"]
        assert rel_err(model(x), ref) <= 3e-6


GRID_VARIANTS = [(m, p, a) for m in ("bilinear", "nearest") for p in ("zeros", "border") for a in (False, True)]


@pytest.mark.parametrize("mode,padding,align", GRID_VARIANTS)
@pytest.mark.parametrize("h,w,hg,wg", [(5, 7, 4, 3), (8, 8, 5, 5), (9, 4, 1, 6)])
def test_grid_sample_dense_exact(mode, padding, align, h, w, hg, wg):
    """Bound: <= 1e-6 * max|x| against torch, with grid points outside [-1, 1] and exactly on
    pixel centres and borders."""
    torch.manual_seed(2)
    x = torch.randn(2, 3, h, w) - 0.3
    grid = torch.rand(2, hg, wg, 2) * 2.6 - 1.3
    grid[0, 0, 0] = torch.tensor([1.0, -1.0])
    grid[1, 0, -1] = torch.tensor([0.0, 0.0])
    ref = F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)
    got = grid_sample_dense(x, grid, mode, padding, align)
    assert got.shape == ref.shape
    assert rel_err(got, ref, float(x.abs().max())) <= 1e-6


def test_patch_grid_sample_has_no_module_form():
    model = nn.Sequential(nn.Conv2d(3, 3, 1))
    assert patch_grid_sample(model) == []


class ModelWithFunctionalCalls(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 3, 3, padding=1, padding_mode="reflect")
        self.pool = nn.MaxPool2d(3, 2, 1, ceil_mode=True)

    def forward(self, x, grid, sig):
        a = F.grid_sample(x, grid, align_corners=False)
        b = F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False)
        c = F.pad(x, (2, 1, 1, 1), mode="reflect")
        return a, b, c, self.pool(x), self.conv(sig), F.pad(sig, (3, 0), mode="replicate")


def test_functional_handlers_exact_and_scoped():
    torch.manual_seed(3)
    model = ModelWithFunctionalCalls()
    args = (torch.randn(1, 3, 7, 6), torch.rand(1, 4, 5, 2) * 2 - 1, torch.randn(1, 3, 13))
    wrapper = GpuRewriteWrapper(model)
    with torch.no_grad():
        refs, gots = model(*args), wrapper(*args)
    for got, ref in zip(gots, refs):
        assert rel_err(got, ref) <= 3e-6
    names = {c.rewrite for c in wrapper.changes}
    assert {"patch_grid_sample", "patch_interpolate", "patch_reflect_pad", "patch_maxpool_zeropad"} <= names
    # nothing outlives the wrapper's forward: no torch-function mode is left active
    assert torch._C._len_torch_function_stack() == 0


# Swin patch merging: the original (microsoft) form and the timm forms -------------------------


class SwinPatchMerging(nn.Module):
    """Original Swin v1: (B, H*W, C) input, strided slices, norm then reduction."""

    def __init__(self, input_resolution, dim):
        super().__init__()
        self.input_resolution = input_resolution
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(4 * dim)

    def forward(self, x):
        h, w = self.input_resolution
        b, _, c = x.shape
        x = x.view(b, h, w, c)
        x = torch.cat([x[:, 0::2, 0::2, :], x[:, 1::2, 0::2, :], x[:, 0::2, 1::2, :], x[:, 1::2, 1::2, :]], -1)
        return self.reduction(self.norm(x.view(b, -1, 4 * c)))


class TimmPatchMerging(nn.Module):
    """timm form: (B, H, W, C) input, rank-6 reshape + permute; v2 puts the norm after."""

    def __init__(self, dim, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(4 * dim if norm_first else 2 * dim)

    def forward(self, x):
        b, h, w, c = x.shape
        x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
        _, h, w, _ = x.shape
        x = x.reshape(b, h // 2, 2, w // 2, 2, c).permute(0, 1, 3, 4, 2, 5).flatten(3)
        return self.reduction(self.norm(x)) if self.norm_first else self.norm(self.reduction(x))


def merging_models(dim=4):
    torch.manual_seed(4)
    return nn.ModuleDict(
        {
            "swin": SwinPatchMerging((6, 8), dim),
            "timm": TimmPatchMerging(dim),
            "timm_v2": TimmPatchMerging(dim, norm_first=False),
        }
    )


@pytest.mark.parametrize("hw", [(6, 8), (5, 7), (2, 2)])
def test_patch_merging_bit_exact(hw):
    models = merging_models()
    x_flat, x_hw = torch.randn(2, 48, 4) - 0.2, torch.randn(2, *hw, 4) - 0.2
    with torch.no_grad():
        refs = {k: m(x_flat if k == "swin" else x_hw) for k, m in models.items()}
        changes = patch_patch_merging(models)
        gots = {k: m(x_flat if k == "swin" else x_hw) for k, m in models.items()}
    assert sorted(c.path for c in changes) == ["swin", "timm", "timm_v2"]
    assert all(isinstance(m, PatchMergingRank4) for m in models.values())
    for k in refs:
        assert torch.equal(gots[k], refs[k]), k


# ---------------------------------------------------------------------------------------------
# (2) + (3): conversions
# ---------------------------------------------------------------------------------------------


def not_walls(even, x, x3):
    """Patterns the spec lists as GATHER_ND sources that this converter handles without a gather."""
    focus = torch.cat([even[..., ::2, ::2], even[..., 1::2, ::2], even[..., ::2, 1::2], even[..., 1::2, 1::2]], 1)
    return (
        x[:, ::2],
        x[..., 1::2],
        x[:, :, ::3],
        focus,
        x3[:, ::2],
        F.interpolate(x, size=(9, 13), mode="bilinear", align_corners=True),
        F.max_pool2d(x - 3, 3, 2, 1),
        F.max_pool2d(x - 3, 3, 2, 0, ceil_mode=True),
        F.pad(x, (2, 1, 1, 2), mode="reflect"),
    )


@pytest.fixture(scope="module")
def not_walls_converted(outdir):
    torch.manual_seed(5)
    model = Fn(not_walls)
    args = (torch.randn(1, 3, 8, 10), torch.randn(1, 5, 7, 11), torch.randn(1, 9, 5))
    path = outdir / "not_walls.tflite"
    return model, args, path, convert(model, args, path)


def test_not_walls_convert_without_gather(not_walls_converted):
    *_, info = not_walls_converted
    assert not info.has_op("GATHER_ND") and not info.has_op("GATHER"), info.op_histogram()
    for op in ("STRIDED_SLICE", "RESIZE_BILINEAR", "MAX_POOL_2D", "MIRROR_PAD"):
        assert info.has_op(op), (op, info.op_histogram())
    assert not info.high_rank_tensors()


def test_not_walls_run_on_gpu_and_match(not_walls_converted, gpu):
    model, args, path, _ = not_walls_converted
    assert_gpu_matches(model, args, path)


def test_original_swin_patch_merging_is_not_a_wall_but_timm_form_is(outdir):
    models = merging_models()
    swin = convert(models["swin"], (torch.randn(1, 48, 4),), outdir / "merge_swin.tflite")
    assert swin.has_op("STRIDED_SLICE") and not swin.has_op("GATHER_ND") and not swin.high_rank_tensors()
    timm = convert(models["timm"], (torch.randn(1, 6, 8, 4),), outdir / "merge_timm.tflite")
    assert max(t.rank for t, _ in timm.high_rank_tensors()) == 6


def test_flip_runs_on_gpu_but_is_wrong_so_pads_are_built_from_slices(outdir, gpu):
    """Why pad_by_slices never uses torch.flip: its REVERSE_V2 compiles GPU-only on llvmpipe and
    returns wrong values (no error). If this starts passing, flip became usable."""
    x = torch.arange(2 * 6 * 4 * 5, dtype=torch.float32).reshape(2, 6, 4, 5) / 8
    model = Fn(lambda t: t.flip(-1))
    path = outdir / "flip.tflite"
    assert convert(model, (x,), path).has_op("REVERSE_V2")
    result = gpu_vs_torch(model, (x,), path, convert=False)
    assert result.ok, result.summary()
    assert result.comparisons[0].corr < 0.9, result.summary()


# each wall: the plain conversion contains it ------------------------------------------------


def wall_originals():
    def grid(x, g):
        return F.grid_sample(x, g, mode="bilinear", padding_mode="zeros", align_corners=False)

    def bicubic(x):
        return F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False)

    def pads(x1, x2):
        # (a replicate pad of exactly 1 equals a symmetric mirror pad and converts to MIRROR_PAD)
        return F.pad(x1, (2, 1), mode="reflect"), F.pad(x2, (2, 2, 1, 1), mode="replicate")

    return {
        "grid": (Fn(grid), (torch.randn(1, 3, 6, 7), torch.rand(1, 4, 5, 2) * 2 - 1)),
        "bicubic": (Fn(bicubic), (torch.randn(1, 3, 5, 6),)),
        "pads": (Fn(pads), (torch.randn(1, 3, 12), torch.randn(1, 3, 6, 7))),
        "conv1d_reflect_p0": (
            nn.Sequential(nn.Conv1d(3, 4, 3, padding=0, padding_mode="reflect")),
            (torch.randn(1, 3, 12),),
        ),
    }


@pytest.mark.parametrize("name,gathers", [("grid", 1), ("bicubic", 1), ("pads", 3), ("conv1d_reflect_p0", 1)])
def test_original_contains_gather_nd(name, gathers, outdir):
    module, args = wall_originals()[name]
    info = convert(module, args, outdir / f"orig_{name}.tflite")
    assert len(info.ops_named("GATHER_ND")) >= gathers, info.op_histogram()


# each rewrite: converts without it, GPU-only, matches ------------------------------------------


def rewritten_grid(x, g):
    return tuple(F.grid_sample(x, g, mode=m, padding_mode=p, align_corners=a) for m, p, a in GRID_VARIANTS)


def rewritten_resize(x):
    return (
        F.interpolate(x, scale_factor=2, mode="bicubic"),
        F.interpolate(x, size=(7, 10), mode="bicubic", align_corners=True),
    )


def rewritten_pads(x1, x2):
    return (
        F.pad(x1, (3, 2), mode="reflect"),
        F.pad(x1, (1, 2), mode="replicate"),
        F.pad(x2, (2, 1, 1, 2), mode="reflect"),
        F.pad(x2, (1, 1, 2, 0), mode="circular"),
    )


def rewritten_pools(x):
    return (
        F.max_pool2d(x, 3, 2, 1),
        F.max_pool2d(x, 3, 2, 0, ceil_mode=True),
        F.max_pool2d(x, 2, 2, ceil_mode=True),
        F.max_pool2d(x, 5, 1, 2),
    )


class ConvPads(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(3, 4, 3, padding=0, padding_mode="reflect")
        self.c2 = nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)

    def forward(self, sig, img):
        return self.c1(sig), self.up(self.c2(img))


def rewritten_cases():
    torch.manual_seed(6)
    conv_pads = ConvPads()
    patch_reflect_pad(conv_pads)
    patch_interpolate(conv_pads, bilinear_align_corners=True)
    merges = merging_models()
    patch_patch_merging(merges)
    return {
        "grid": (GpuRewriteWrapper(Fn(rewritten_grid)), (torch.randn(1, 3, 7, 9), torch.rand(1, 5, 6, 2) * 2.4 - 1.2)),
        "resize": (GpuRewriteWrapper(Fn(rewritten_resize)), (torch.randn(1, 3, 5, 6),)),
        "pads": (GpuRewriteWrapper(Fn(rewritten_pads)), (torch.randn(1, 3, 12), torch.randn(1, 3, 6, 7))),
        "pools": (GpuRewriteWrapper(Fn(rewritten_pools)), (torch.randn(1, 4, 11, 10) - 2,)),
        "conv_modules": (conv_pads, (torch.randn(1, 3, 16), torch.randn(1, 3, 6, 5))),
        "merging": (merges["timm"], (torch.randn(1, 6, 8, 4),)),
    }


@pytest.fixture(scope="module")
def rewritten_converted(outdir):
    out = {}
    for name, (module, args) in rewritten_cases().items():
        path = outdir / f"rewritten_{name}.tflite"
        out[name] = (module, args, path, convert(module, args, path))
    return out


REWRITTEN = ["grid", "resize", "pads", "pools", "conv_modules", "merging"]


@pytest.mark.parametrize("name", REWRITTEN)
def test_rewritten_converts_without_gather_or_high_rank(name, rewritten_converted):
    *_, info = rewritten_converted[name]
    assert not info.has_op("GATHER_ND") and not info.has_op("GATHER"), info.op_histogram()
    assert not info.high_rank_tensors(), [t.shape for t, _ in info.high_rank_tensors()]
    if name == "pools":
        assert not info.has_op("PADV2") and not info.has_op("PAD"), info.op_histogram()
    if name in ("pads", "conv_modules"):
        assert not info.has_op("MIRROR_PAD"), info.op_histogram()


@pytest.mark.parametrize("name", REWRITTEN)
def test_rewritten_runs_gpu_only_and_matches(name, rewritten_converted, gpu):
    module, args, path, _ = rewritten_converted[name]
    assert_gpu_matches(module, args, path)
