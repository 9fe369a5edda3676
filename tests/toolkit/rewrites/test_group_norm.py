"""patch_group_norm on GroupNorm subclasses with a forward of their own (llvmpipe, software Vulkan, ai-edge-litert
2.3.0): Hugging Face BiT's norm applies its activation after F.group_norm -- replaced by SafeGroupNorm the
activation was lost (held-out row held_bit: corr 0.45 at full residency) -- and timm's GroupNorm1NoBias has
no bias. Such modules stay; their F.group_norm call goes through the functional handler (exact to fp32
rounding: the bound of `norms`, 2e-5 on unit-scale outputs)."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.fp16_overflow import SafeGroupNorm, patch_group_norm
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper


class NormActivation(nn.GroupNorm):
    """BiT's BitGroupNormActivation: group norm, then ReLU, in one module."""

    def forward(self, x):
        return torch.relu(F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps))


class NoBias(nn.GroupNorm):
    """timm's GroupNorm1NoBias: one group, affine, bias None, its own forward."""

    def __init__(self, channels):
        super().__init__(1, channels)
        self.bias = None

    def forward(self, x):
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(4)
        self.stock, self.act, self.nobias = nn.GroupNorm(8, 32), NormActivation(8, 32), NoBias(32)
        with torch.no_grad():
            for norm in (self.stock, self.act, self.nobias):
                norm.weight.copy_(torch.rand(32, generator=g) + 0.5)
            self.stock.bias.copy_(torch.randn(32, generator=g))
            self.act.bias.copy_(torch.randn(32, generator=g))

    def forward(self, x):
        return self.nobias(self.act(self.stock(x)))


X = torch.randn(1, 32, 24, 24, generator=torch.Generator().manual_seed(5)) * 30


def test_only_the_stock_forward_is_replaced_and_the_handler_matches_torch():
    model = Net().eval()
    changes = patch_group_norm(model)
    assert [c.path for c in changes] == ["stock"] and isinstance(model.stock, SafeGroupNorm)
    assert type(model.act) is NormActivation and type(model.nobias) is NoBias
    ref = Net().eval()
    with torch.no_grad():
        want = ref(X)
        got = GpuRewriteWrapper(model, include=["patch_group_norm"])(X)
    assert (got - want).abs().max().item() <= 2e-5 * max(1.0, float(want.abs().max()) / 10)
    model.act = SafeGroupNorm(model.act)                      # the old replacement: the ReLU is lost
    with torch.no_grad():
        assert (model(X) - want).abs().max().item() > 0.1


@pytest.mark.gpu
def test_subclassed_group_norms_run_on_the_gpu(gpu, tmp_path):
    alone = NormActivation(8, 32).eval()                  # a norm on the graph input keeps the stock BROADCAST_TO
    plain = convert_for_gpu(alone, (X,), tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "FALLBACK" and "BROADCAST_TO" in plain.summary(), plain.summary()
    for name, model in (("alone", alone), ("net", Net().eval())):
        fixed = convert_for_gpu(model, (X,), tmp_path / f"{name}.tflite", only=["patch_group_norm"])
        assert fixed.ok, fixed.summary()
        assert "BROADCAST_TO" not in read_model_info(fixed.path).op_histogram()


class InstanceNormActivation(nn.InstanceNorm2d):
    def forward(self, x):
        return torch.relu(super().forward(x))


def test_an_instance_norm_with_a_forward_of_its_own_is_left_alone():
    from litert_gpu_toolkit.rewrites.fp16_overflow import patch_instance_norm

    model = nn.Sequential(nn.InstanceNorm2d(4), InstanceNormActivation(4))
    assert [c.path for c in patch_instance_norm(model)] == ["0"] and type(model[1]) is InstanceNormActivation
