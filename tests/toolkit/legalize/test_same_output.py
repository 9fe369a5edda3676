"""The `same_output` rule: one value returned in two output slots comes back all zero from the GPU (both slots);
-(-y) in the later slot gives each its own tensor. Bound: bit-exact (negation). GPU: llvmpipe (software Vulkan),
ai-edge-litert 2.3.0."""
import pytest
import torch
from torch import nn

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.legalize import legalize

aten = torch.ops.aten


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, 1, 1)

    def forward(self, x):
        y = self.conv(x)
        return y, y


class IdentityPool(nn.Module):
    """TextNet's outputs: the last stage, and an adaptive pool of it to its own 2 x 2 size."""

    def __init__(self):
        super().__init__()
        self.conv, self.pool = nn.Conv2d(8, 16, 3, 2, 1), nn.AdaptiveAvgPool2d((2, 2))

    def forward(self, x):
        y = self.conv(x)
        return y, self.pool(y)


class RealPool(IdentityPool):
    def forward(self, x):                                    # a pool that is not the identity: nothing to do
        y = self.conv(x)
        return y, self.pool(y[..., :1])


CASES = [(Twice, (1, 8, 8, 8)), (IdentityPool, (1, 8, 4, 4))]


def _negs(legal) -> int:
    return sum(n.target is aten.neg.default for n in legal.module.graph.nodes)


@pytest.mark.parametrize("model, size", CASES, ids=["twice", "identity_pool"])
def test_a_value_returned_twice_gets_its_own_tensor_bit_exact(model, size):
    x = torch.randn(*size, generator=torch.Generator().manual_seed(0))
    m = model().eval()
    legal = legalize(m, (x,))
    assert _negs(legal) == 2 and any("two output slots" in d for d in legal.done), legal.done
    for g, w in zip(legal.module(x), m(x)):
        assert torch.equal(g, w)                                 # bound: bit-exact


def test_different_outputs_are_left_alone():
    legal = legalize(RealPool().eval(), (torch.randn(1, 8, 4, 4),))
    assert _negs(legal) == 0 and not any("two output slots" in d for d in legal.done), legal.done


@pytest.mark.parametrize("model, size", CASES, ids=["twice", "identity_pool"])
def test_a_value_returned_twice_is_zero_on_the_gpu_and_right_with_the_rule(model, size, gpu, tmp_path):
    x = torch.randn(*size, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    wall = convert_for_gpu(model().eval(), (x,), tmp_path / "wall.tflite", patches=False, fallback=False,
                           diagnose_budget_s=0)
    assert wall.verdict == "NUMERICS_FAIL" and "all-zero" in wall.report.summary, wall.summary()
    torch.manual_seed(0)
    fixed = convert_for_gpu(model().eval(), (x,), tmp_path / "own.tflite", only=("legalize",), fallback=False,
                            diagnose_budget_s=0)
    assert fixed.ok, fixed.summary()
