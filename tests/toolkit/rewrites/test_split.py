"""SPLIT: chunk / split as slices; amax and chunk together on the GPU."""

import torch
from torch import nn

from litert_gpu_toolkit.lowering.export import gpu_vs_torch
from litert_gpu_toolkit.rewrites.amax import patch_amax
from litert_gpu_toolkit.rewrites.split import chunk_slices, patch_chunk, split_slices
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper

from wall_checks import INF, _close, _convert, _gpu_clean, _same  # noqa: F401


def test_chunk_and_split_slices_match_torch():
    x = torch.randn(3, 7, 6)
    for chunks in (1, 2, 3, 4, 7, 9):
        want = x.chunk(chunks, 1)
        got = chunk_slices(x, chunks, 1)
        assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want)), chunks
    for spec in (2, 3, [1, 2, 4], [7]):
        assert all(torch.equal(a, b) for a, b in zip(split_slices(x, spec, 1), torch.split(x, spec, 1)))
    class M(nn.Module):
        def forward(self, x):
            a, b = x.chunk(2, dim=-1)
            c, d = torch.split(x, [3, 4], 1)
            return a * b.sigmoid(), c.sum(1), d.sum(1), *torch.chunk(x, 3, 0)
    wrapped = GpuRewriteWrapper(M(), include=["patch_chunk"])
    assert all(torch.equal(a, b) for a, b in zip(wrapped(x), M()(x)))


class ReduceSplit(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        c, d = torch.split(x, [3, 5], dim=1)
        return x - x.amax(1, keepdim=True), a * torch.sigmoid(b), c.sum(1, keepdim=True) * d


RS_ARGS = (torch.randn(1, 8, 9, 11) - 0.5,)


def test_amax_and_chunk_current_lowering_runs_on_gpu(tmp_path, gpu):
    """This toolchain has an amax layout rewriter (REDUCE_MAX, GPU-accepted) and lowers chunk / split
    to SLICE, never SPLIT: neither wall shows. Pin that, so a converter change that brings them back is seen."""
    res = gpu_vs_torch(ReduceSplit().eval(), RS_ARGS, tmp_path / "plain.tflite")
    hist = res.info.op_histogram()
    assert "REDUCE_MAX" in hist and not {"SPLIT", "SPLIT_V"} & set(hist) and "SLICE" in hist, hist
    assert res.ok, res.summary()


def test_amax_and_chunk_rewritten_is_gpu_clean(tmp_path, gpu):
    model = ReduceSplit()
    ref = model(*RS_ARGS)
    patch_amax(model)
    patch_chunk(model)
    for out, r in zip(model(*RS_ARGS), ref):
        assert torch.equal(out, r)
    res = _gpu_clean(model, RS_ARGS, tmp_path / "rewritten.tflite")
    hist = res.info.op_histogram()
    assert "MAX_POOL_2D" in hist and "REDUCE_MAX" not in hist and not {"SPLIT", "SPLIT_V"} & set(hist), hist


# ==================================================================== Linear channel attention
