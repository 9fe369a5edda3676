"""Tensor.unfold framing and F.unfold im2col at rank <= 4 (rewrite `patch_unfold`, rewrites/unfold.py).

Plain conversion, measured (litert-torch 0.10.0; strict GPU-only compile on llvmpipe, software Vulkan,
ai-edge-litert 2.3.0):
  x.unfold(-1, 64, 16) on [1, 512]                   GATHER_ND rejected
  x.unfold(-1, 50, 16) * 2 on [1, 2, 300]             rank-5 ADD, BROADCAST_TO, GATHER_ND rejected
  x.unfold(2, 4, 4).unfold(3, 4, 4) on [1, 3, 16, 16]  CONVERT_FAIL ('tfl.pad' op ... at most 5-D): rank 6;
                                                      rewritten when a reshape / view to rank <= 4 follows
  F.unfold(x, 3, padding=1, stride=2)                 BROADCAST_TO, GATHER_ND rejected
  F.fold(cols, (9, 10), 3, padding=1, stride=2)      STABLEHLO_SCATTER: LiteRT's CPU cannot prepare it
                                                      ('Only update, Add, Multiply, Maximum and Minimum ...')
Bounds: the block form (step divides size) is bit-exact for any values; the one-hot conv forms (other
steps, F.unfold) are bit-exact in fp32 for finite inputs (x * 1.0 plus zeros); F.fold's planes are added in
torch's tap order (fp32 rounding of <= kh * kw terms; bit-exact on these shapes); all checked with torch.equal.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from litert_gpu_toolkit.lowering.export import export_tflite, gpu_vs_torch
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.rewrites.unfold import _tensor_unfold_handler, col2im, im2col

INF = float("inf")


@pytest.mark.parametrize("shape", [(50,), (2, 50), (2, 3, 50), (3, 20, 17)])
def test_tensor_unfold_is_bit_exact(shape):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    for dim in range(-len(shape), len(shape)):
        for size in (1, 2, 3, 4, 6, 8):
            for step in (1, 2, 3, 5):
                if size > x.shape[dim]:
                    continue
                out = _tensor_unfold_handler(x, dim, size, step)
                if size == 1 and step == 1:
                    assert out is NotImplemented
                    continue
                assert torch.equal(out, x.unfold(dim, size, step)), (shape, dim, size, step)


def test_block_form_keeps_non_finite_values_in_place_and_other_rank_5_is_refused():
    x = torch.randn(2, 40)
    x[0, 7] = INF
    x[1, 20] = float("nan")
    out, ref = _tensor_unfold_handler(x, -1, 8, 4), x.unfold(-1, 8, 4)
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(out), nan) and torch.equal(out[~nan], ref[~nan])
    assert _tensor_unfold_handler(torch.randn(1, 3, 8, 8), 3, 4, 4) is NotImplemented       # rank 5 output
    assert _tensor_unfold_handler(torch.randn(3, 8, 8, 2), 1, 4, 4) is NotImplemented


@pytest.mark.parametrize("k,d,p,s", [(3, 1, 0, 1), ((2, 3), 1, 1, 2), (3, 2, 2, 1), ((1, 4), (1, 2), (0, 3), (2, 1))])
def test_im2col_is_bit_exact(k, d, p, s):
    torch.manual_seed(1)
    x = torch.randn(2, 5, 9, 11)
    assert torch.equal(im2col(x, k, d, p, s), F.unfold(x, k, d, p, s))
    assert torch.equal(im2col(x[0], k, d, p, s), F.unfold(x[0], k, d, p, s))
    unf = nn.Unfold(k, d, p, s)
    assert torch.equal(GpuRewriteWrapper(unf, include=["patch_unfold"])(x), unf(x))


@pytest.mark.parametrize("k,d,p,s", [(3, 1, 1, 2), ((2, 3), (1, 2), (1, 0), (2, 1)), (3, 2, 2, 3), (4, 1, 0, 4),
                                     (1, 1, 0, 1)])
def test_col2im_is_bit_exact(k, d, p, s):
    torch.manual_seed(2)
    cols = F.unfold(torch.randn(2, 3, 9, 10), k, d, p, s)
    cols = torch.randn_like(cols)                      # overlapping taps get different values
    assert torch.equal(col2im(cols, (9, 10), k, d, p, s), F.fold(cols, (9, 10), k, d, p, s))
    assert torch.equal(col2im(cols[0], (9, 10), k, d, p, s), F.fold(cols[0], (9, 10), k, d, p, s))
    fold = nn.Fold((9, 10), k, d, p, s)
    assert torch.equal(GpuRewriteWrapper(fold, include=["patch_unfold"])(cols), fold(cols))
    assert col2im(cols, (19, 23), k, d, p, s) is NotImplemented     # block count mismatch: torch raises its own


class Outlook(nn.Module):
    """VOLO's outlook attention core: 3x3 neighbourhoods of a stride-2 grid (unfold), weighted, folded back."""

    def forward(self, x, w):
        cols = F.unfold(x, 3, padding=1, stride=2)                                  # [1, C*9, 25]
        return F.fold(cols * w, (9, 10), 3, padding=1, stride=2)


O_INPUTS = (torch.randn(1, 4, 9, 10), torch.randn(1, 36, 25))


def test_fold_is_refused_plainly_and_runs_gpu_only_rewritten(gpu, tmp_path):
    plain = gpu_vs_torch(Outlook(), O_INPUTS, tmp_path / "plain.tflite")
    assert not plain.ok and "STABLEHLO_SCATTER" in plain.info.op_histogram(), plain.summary()
    wrapped = GpuRewriteWrapper(Outlook(), include=["patch_unfold"])
    assert torch.equal(wrapped(*O_INPUTS), Outlook()(*O_INPUTS))
    res = gpu_vs_torch(wrapped, O_INPUTS, tmp_path / "fold.tflite")
    hist = res.info.op_histogram()
    assert not any("SCATTER" in op for op in hist) and not res.info.high_rank_tensors(), hist
    assert res.ok and res.run.gpu.cpu_ops in (None, 0), res.summary()
    assert res.comparisons[0].nonfinite == 0 and res.comparisons[0].corr >= 0.999, res.summary()


class Unfolds(nn.Module):
    """STFT framing with hop | frame (block form), framing with hop not dividing the frame on a
    [B, C, T] signal (one-hot conv), and im2col patches."""

    def forward(self, a, b, x):
        return a.unfold(-1, 64, 16), b.unfold(-1, 50, 16) * 2, F.unfold(x, 3, padding=1, stride=2)


U_INPUTS = (torch.randn(1, 512), torch.randn(1, 2, 300), torch.randn(1, 3, 9, 10))


def test_plain_unfolds_are_rejected(tmp_path, gpu):
    res = gpu_vs_torch(Unfolds(), U_INPUTS, tmp_path / "plain.tflite")
    assert not res.ok and "GATHER_ND" in res.info.op_histogram()


def test_unfolds_rewritten_run_gpu_only(gpu, tmp_path):
    wrapped = GpuRewriteWrapper(Unfolds(), include=["patch_unfold"])
    for out, ref in zip(wrapped(*U_INPUTS), Unfolds()(*U_INPUTS)):
        assert torch.equal(out, ref)
    res = gpu_vs_torch(wrapped, U_INPUTS, tmp_path / "unfold.tflite")
    hist = res.info.op_histogram()
    assert "GATHER_ND" not in hist and "BROADCAST_TO" not in hist and not res.info.high_rank_tensors(), hist
    assert res.ok and res.run.gpu.cpu_ops in (None, 0), res.summary()
    assert len(res.comparisons) == 3
    for c in res.comparisons:
        assert c.nonfinite == 0 and c.corr >= 0.999, res.summary()


class Patchify(nn.Module):
    """Image patches by chained unfolds: a ViT-style patchify (permute + reshape) and a plain view."""

    def forward(self, x):
        p = x.unfold(2, 4, 4).unfold(3, 4, 4)
        return p.permute(0, 2, 3, 1, 4, 5).reshape(1, 16, 48), p.contiguous().view(1, 3, 16, 16)


def test_chained_patch_unfolds_match_torch_and_fall_back_for_other_consumers():
    x = torch.randn(1, 3, 16, 16)
    wrapped = GpuRewriteWrapper(Patchify(), include=["patch_unfold"])
    for out, ref in zip(wrapped(x), Patchify()(x)):
        assert torch.equal(out, ref)
    x = torch.randn(2, 3, 11, 13)
    for f in (lambda t: t.unfold(2, 3, 2).unfold(3, 5, 3).contiguous().view(2, 3, -1, 15),
              lambda t: t.unfold(2, 3, 2).unfold(3, 5, 3).permute(0, 1, 4, 2, 5, 3).reshape(2, 3, 15, 15),
              lambda t: t.unfold(2, 3, 2).unfold(3, 5, 3).flatten(4),             # rank 5: the original op
              lambda t: t.unfold(2, 3, 2).unfold(3, 5, 3).sum(-1)):               # not followed: the original op
        class F_(nn.Module):
            def forward(self, t, f=f):
                return f(t)
        assert torch.equal(GpuRewriteWrapper(F_(), include=["patch_unfold"])(x), f(x))


def test_chained_patch_unfold_fails_plainly_and_runs_gpu_only_rewritten(gpu, tmp_path):
    x = (torch.randn(1, 3, 16, 16),)
    with pytest.raises(Exception, match="5-D"):
        export_tflite(Patchify(), x, tmp_path / "plain.tflite")
    res = gpu_vs_torch(GpuRewriteWrapper(Patchify()), x, tmp_path / "patches.tflite")
    hist = res.info.op_histogram()
    assert "GATHER_ND" not in hist and not res.info.high_rank_tensors(), hist
    assert res.ok and res.run.gpu.cpu_ops in (None, 0), res.summary()
    for c in res.comparisons:
        assert c.nonfinite == 0 and c.corr >= 0.999, res.summary()


class CellsToChannels(nn.Module):
    """XFeat's `_unfold2d`: 8x8 cells of a [B, C, H, W] map to C*64 channels at 1/8 resolution, spelled with a
    rank-5 reshape (merging the two window axes) before the permute."""

    def forward(self, x, ws=8):
        b, c, h, w = x.shape
        x = x.unfold(2, ws, ws).unfold(3, ws, ws).reshape(b, c, h // ws, w // ws, ws ** 2)
        return x.permute(0, 1, 4, 2, 3).reshape(b, -1, h // ws, w // ws)


def test_rank5_merging_reshape_stays_lazy_and_is_bit_exact():
    x = torch.randn(2, 3, 16, 24)
    assert torch.equal(GpuRewriteWrapper(CellsToChannels(), include=["patch_unfold"])(x), CellsToChannels()(x))
    for f in (lambda t: t.unfold(2, 4, 4).unfold(3, 4, 4).reshape(2, 3, 4, 6, 16).permute(0, 4, 1, 2, 3)
              .reshape(2, 48, 4, 6),                                          # merged axis moved, then flat
              lambda t: t.unfold(2, 4, 4).unfold(3, 4, 4).reshape(2, 3, 24, 4, 4).sum(2),   # consumed as is
              lambda t: t.unfold(2, 4, 4).unfold(3, 4, 4).reshape(2, 3, 4, 4, 6, 4).sum(0)):  # not a merge
        class F_(nn.Module):
            def forward(self, t, f=f):
                return f(t)
        assert torch.equal(GpuRewriteWrapper(F_(), include=["patch_unfold"])(x), f(x))


def test_rank5_merging_reshape_runs_gpu_only(gpu, tmp_path):
    x = (torch.randn(1, 1, 32, 48),)
    with pytest.raises(Exception, match="5-D"):
        export_tflite(CellsToChannels(), x, tmp_path / "plain.tflite")
    res = gpu_vs_torch(GpuRewriteWrapper(CellsToChannels(), include=["patch_unfold"]), x, tmp_path / "cells.tflite")
    hist = res.info.op_histogram()
    assert "GATHER_ND" not in hist and not res.info.high_rank_tensors(), hist
    assert res.ok and res.run.gpu.cpu_ops in (None, 0), res.summary()
    (c,) = res.comparisons
    assert c.nonfinite == 0 and c.max_abs <= 4e-3 * float(x[0].abs().max()), res.summary()   # fp16 rounding only
