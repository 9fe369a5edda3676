"""The `unfold` rule: sliding windows (`Tensor.unfold`) as a one-hot conv1d -- exact in torch, no GATHER_ND in the
converted graph, and strict GPU-only through the pass alone where the plain file is not. GPU: llvmpipe (software
Vulkan), ai-edge-litert 2.3.0."""
import pytest
import torch
from torch import nn

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.legalize import legalize

aten = torch.ops.aten


class Windows(nn.Module):
    """UnivNet's location-variable convolution in small: overlapping windows of a rank-3 signal, then windows of
    one sample on the rank-4 result (rank 5), reduced; and frames of a rank-4 map's last axis."""

    def forward(self, x, y):                                # x [B, C, L], y [B, C, H, W]
        w = x.unfold(2, 6, 4).unfold(3, 1, 1)               # [B, C, n, 6, 1]
        frames = y.unfold(-1, 4, 2)                         # [B, C, H, n, 4]
        return (w * 2).sum((-1, -2)), frames.mean(-1).flatten(2)


X, Y = torch.randn(2, 3, 18), torch.randn(1, 2, 5, 10)


@pytest.mark.parametrize("dim,size,step", [(2, 6, 4), (1, 2, 1), (-1, 3, 3), (0, 2, 2)])
def test_unfold_becomes_a_one_hot_conv_exactly(dim, size, step):
    m = type("One", (nn.Module,), {"forward": lambda self, x: x.unfold(dim, size, step) + 0.0})().eval()
    legal = legalize(m, (X,))
    assert aten.unfold.default not in {n.target for n in legal.module.graph.nodes}
    assert torch.equal(legal.module(X), m(X))              # bound: exact for finite values (x * 1 + exact zeros)


def test_windows_run_gpu_only_through_the_pass_alone(gpu, tmp_path):
    m = Windows().eval()
    plain = convert_for_gpu(m, (X, Y), tmp_path / "p.tflite", patches=False, fallback=False, diagnose_budget_s=0)
    assert not plain.ok, plain.summary()
    result = convert_for_gpu(m, (X, Y), tmp_path / "m.tflite", only=("legalize",), fallback=False,
                             diagnose_budget_s=0)
    assert result.ok, result.summary()                      # strict GPU-only, fp16 and fp32 match torch
    ops = read_model_info(tmp_path / "m.tflite").op_histogram()
    assert "GATHER_ND" not in ops and "GATHER" not in ops, ops
