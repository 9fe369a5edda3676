"""The `large_weight` rule: a linear layer whose weight is over the GPU's 128 MiB buffer binding returns all zeros at
full residency (found by the third held-out set: torchvision's VGG-11, whose 25088 x 4096 classifier layer is 392
MiB); computed in row blocks it is right. Bound: fp32 rounding (each output the same dot product; a CPU BLAS
orders its sum by the matrix's shape). GPU: llvmpipe
(software Vulkan), ai-edge-litert 2.3.0."""
import pytest
import torch

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.legalize import legalize
from litert_gpu_toolkit.legalize.large_weight import LIMIT_BYTES

aten = torch.ops.aten
K, N = 8192, 4100                       # 128.1 MiB of fp32 weight: just over the binding limit


class Head(torch.nn.Module):
    def __init__(self, k=K, n=N):
        super().__init__()
        self.fc = torch.nn.Linear(k, n)

    def forward(self, x):
        return torch.relu(self.fc(x))


def _x(k=K):
    return torch.randn(2, k, generator=torch.Generator().manual_seed(0))


def test_an_oversized_linear_is_computed_in_row_blocks_bit_exact():
    torch.manual_seed(0)
    m, x = Head().eval(), _x()
    legal = legalize(m, (x,))
    linears = [n for n in legal.module.graph.nodes if n.op == "call_function" and n.target is aten.linear.default]
    assert len(linears) == 2 and any("row blocks" in d for d in legal.done), legal.done
    with torch.no_grad():
        got, want = legal.module(x), m(x)
    # bound: fp32 rounding -- the same dot products, but a CPU BLAS orders each sum by the matrix's shape
    assert (got - want).abs().max() <= 1e-6 * want.abs().max(), (got - want).abs().max()
    small = legalize(Head(8192, 4090).eval(), (_x(),))      # 127.8 MiB: under the limit, left alone
    assert not any("row blocks" in d for d in small.done)


@pytest.mark.gpu
def test_an_oversized_linear_is_zero_on_the_gpu_and_right_in_blocks(gpu, tmp_path):
    torch.manual_seed(0)
    m, x = Head().eval(), _x()
    wall = convert_for_gpu(m, (x,), tmp_path / "wall.tflite", exclude=("legalize",), fallback=False,
                           diagnose_budget_s=0)
    assert wall.verdict == "NUMERICS_FAIL" and "all-zero" in wall.report.summary, wall.summary()
    fixed = convert_for_gpu(m, (x,), tmp_path / "blocks.tflite", fallback=False, diagnose_budget_s=0)
    assert fixed.ok, fixed.summary()
    info = read_model_info(fixed.path)
    weights = [info.tensor(op.inputs[1], op.subgraph) for op in info.ops if op.op == "FULLY_CONNECTED"]
    assert len(weights) == 2 and all(4 * t.shape[0] * t.shape[1] <= LIMIT_BYTES for t in weights), \
        [t.shape for t in weights]
    print(f"\n[llvmpipe] {K}x{N} linear: without the rule {wall.report.summary}; in blocks {fixed.report.summary}")


class Table(torch.nn.Module):
    """A vocabulary-sized embedding: 160000 x 256 fp32 is 156 MiB."""

    def __init__(self, n=160000, d=256):
        super().__init__()
        self.emb = torch.nn.Embedding(n, d)

    def forward(self, ids):
        return self.emb(ids) * 2.0


def _ids(n=160000):
    return torch.tensor([[0, 5, n // 2, n - 1, 77, n - 2, 1234, n // 3]])


def test_an_oversized_embedding_is_looked_up_in_column_blocks_bit_exact():
    torch.manual_seed(0)
    m, ids = Table().eval(), _ids()
    legal = legalize(m, (ids,))
    lookups = [n for n in legal.module.graph.nodes if n.op == "call_function" and n.target is aten.embedding.default]
    assert len(lookups) == 2 and any("column blocks" in d for d in legal.done), legal.done
    with torch.no_grad():
        assert torch.equal(legal.module(ids), m(ids))          # bound: bit-exact (copies of the same values)
    small = legalize(Table(120000).eval(), (_ids(120000),))    # 117 MiB: under the limit, left alone
    assert not any("column blocks" in d for d in small.done)


@pytest.mark.gpu
def test_an_oversized_embedding_is_zero_on_the_gpu_and_right_in_blocks(gpu, tmp_path):
    torch.manual_seed(0)
    m, ids = Table().eval(), _ids()
    wall = convert_for_gpu(m, (ids,), tmp_path / "wall.tflite", exclude=("legalize",), fallback=False,
                           diagnose_budget_s=0)
    assert wall.verdict == "NUMERICS_FAIL" and "all-zero" in wall.report.summary, wall.summary()
    fixed = convert_for_gpu(m, (ids,), tmp_path / "blocks.tflite", fallback=False, diagnose_budget_s=0)
    assert fixed.ok, fixed.summary()
    assert read_model_info(fixed.path).op_histogram().get("EMBEDDING_LOOKUP", 0) >= 2
