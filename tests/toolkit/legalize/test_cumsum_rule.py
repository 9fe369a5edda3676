"""The `cumsum` rule: a runtime running sum as a matmul with a constant triangular matrix -- exact in torch (integer
sums; floats to fp32 rounding), no CUMSUM in the converted graph, and RoBERTa's position ids strict GPU-only
through the pass alone. GPU: llvmpipe (software Vulkan), ai-edge-litert 2.3.0."""
import torch
from torch import nn

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.legalize import legalize

aten = torch.ops.aten


class PositionIds(nn.Module):
    """RoBERTa's position ids from the input ids (padding gets the pad index), then a position-table lookup."""

    def __init__(self, pad=1):
        super().__init__()
        self.pad, self.table = pad, nn.Embedding(40, 8)

    def forward(self, ids, x):                              # ids [B, S] int, x [B, S, 8]
        mask = ids.ne(self.pad).int()
        positions = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + self.pad
        return x + self.table(positions)


IDS = torch.tensor([[5, 6, 7, 8, 1, 1], [9, 3, 1, 1, 1, 1]])
X = torch.randn(2, 6, 8)


def test_an_integer_cumsum_is_exact_and_gone():
    torch.manual_seed(0)
    m = PositionIds().eval()
    legal = legalize(m, (IDS, X))
    assert aten.cumsum.default not in {n.target for n in legal.module.graph.nodes}
    assert torch.equal(legal.module(IDS, X), m(IDS, X))    # bound: exact (integer sums far below 2^24)


def test_a_float_cumsum_on_any_axis_is_equal_to_fp32_rounding():
    m = type("C", (nn.Module,), {"forward": lambda self, x: torch.cumsum(x, 1) * 2})().eval()
    x = torch.randn(2, 7, 5)
    legal = legalize(m, (x,))
    want, got = m(x), legal.module(x)
    assert (want - got).abs().max() <= 1e-5 * want.abs().max()      # bound: fp32 rounding (summation order)


def test_roberta_position_ids_run_gpu_only_through_the_pass_alone(gpu, tmp_path):
    torch.manual_seed(0)
    m = PositionIds().eval()
    plain = convert_for_gpu(m, (IDS, X), tmp_path / "p.tflite", patches=False, fallback=False, diagnose_budget_s=0)
    assert not plain.ok and "CUMSUM" in read_model_info(tmp_path / "p.tflite").op_histogram(), plain.summary()
    result = convert_for_gpu(m, (IDS, X), tmp_path / "m.tflite", only=("legalize",), fallback=False,
                             diagnose_budget_s=0)
    assert result.ok, result.summary()
    assert "CUMSUM" not in read_model_info(tmp_path / "m.tflite").op_histogram()
