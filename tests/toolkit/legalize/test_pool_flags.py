"""The `pool` rule's flag case: an average pool with ceil_mode=True / count_include_pad=False that change nothing
at its shape (timm NextViT's patch embedding) is lowered by the converter to STABLEHLO_REDUCE_WINDOW pairs when its
input is computed in the graph; written with the default flags it is one AVERAGE_POOL_2D. Bound: bit-exact.
GPU: llvmpipe (software Vulkan), ai-edge-litert 2.3.0."""
import torch
from torch import nn

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.legalize import legalize

aten = torch.ops.aten


class PatchEmbed(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 1, 1)
        self.pool = nn.AvgPool2d(2, stride=2, ceil_mode=True, count_include_pad=False)
        self.proj = nn.Conv2d(16, 32, 1)

    def forward(self, x):
        return self.proj(self.pool(self.stem(x)))


def _pools(legal) -> list:
    return [n.args[1:] for n in legal.module.graph.nodes if n.target is aten.avg_pool2d.default]


def test_inert_pool_flags_are_dropped_bit_exact_and_a_real_overhang_is_kept():
    torch.manual_seed(0)
    m = PatchEmbed().eval()
    x = torch.randn(1, 3, 16, 16)
    legal = legalize(m, (x,))
    assert _pools(legal) == [([2, 2], [2, 2], [0, 0], False, True)], _pools(legal)
    assert torch.equal(legal.module(x), m(x))                    # bound: bit-exact (same windows, same divisor)
    odd = torch.randn(1, 3, 15, 15)                               # ceil mode makes a partial last window here
    assert _pools(legalize(m, (odd,))) == [([2, 2], [2, 2], [0, 0], True, False)]


def test_inert_pool_flags_fall_back_plain_and_run_on_the_gpu_legalized(gpu, tmp_path):
    torch.manual_seed(0)
    m, x = PatchEmbed().eval(), torch.randn(1, 3, 16, 16)
    plain = convert_for_gpu(m, (x,), tmp_path / "p.tflite", exclude=("legalize",), fallback=False,
                            diagnose_budget_s=0)
    assert plain.verdict == "FALLBACK", plain.summary()
    assert "STABLEHLO_REDUCE_WINDOW" in read_model_info(tmp_path / "p.tflite").op_histogram()
    result = convert_for_gpu(m, (x,), tmp_path / "m.tflite", only=("legalize",), fallback=False, diagnose_budget_s=0)
    assert result.ok, result.summary()
    hist = read_model_info(tmp_path / "m.tflite").op_histogram()
    assert "STABLEHLO_REDUCE_WINDOW" not in hist and hist.get("AVERAGE_POOL_2D") == 1, hist
