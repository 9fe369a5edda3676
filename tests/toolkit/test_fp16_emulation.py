"""fp16_emulation: the first op that turns non-finite in torch with fp16 tensors, named and classified."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from litert_gpu_toolkit.fp16_emulation import first_fp16_fault
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper


class PaddedCosine(nn.Module):
    """Cosine scores against keys whose last tokens are padding (all zero)."""

    def __init__(self):
        super().__init__()
        self.key = nn.Linear(16, 16, bias=False)

    def forward(self, q, x):
        k = self.key(x) * (torch.arange(8) < 5).to(x.dtype)[:, None]
        return (F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).T).softmax(-1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(16, 16), PaddedCosine()])

    def forward(self, q, x):
        return self.blocks[1](self.blocks[0](q), x)


class Squares(nn.Module):
    def forward(self, x):
        return (x * x).sum(-1) / 1000


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, 16, generator=g), torch.randn(8, 16, generator=g)


def test_a_zero_vector_normalised_is_an_underflow_in_its_module():
    model = Net().eval()
    fault = first_fp16_fault(model, _inputs())
    assert (fault.op, fault.module, fault.kind) == ("normalize", "blocks.1", "underflow")
    assert 0 < fault.fp32_peak <= 1          # the same call in fp32: unit vectors and zeros, all finite
    assert fault.rewrite == "l2_normalize" and "rounds to zero" in fault.describe()
    assert all(p.dtype == torch.float32 for p in model.parameters())        # a copy was cast, not the model


def test_the_rewritten_forward_is_watched_with_the_models_names():
    model = Net().eval()
    assert first_fp16_fault(model, _inputs(), forward=GpuRewriteWrapper(model, include=["l2_normalize"])) is None


def test_a_result_past_65504_is_an_overflow():
    fault = first_fp16_fault(Squares(), (torch.randn(4, 64) * 300,))
    assert (fault.op, fault.module, fault.kind) == ("mul", "", "overflow"), fault
    assert fault.fp32_peak > 65504
    assert first_fp16_fault(Squares(), (torch.randn(4, 64),)) is None


class UpcastAttention(nn.Module):
    """ReLU linear attention computed in fp32 on purpose (EfficientViT's LiteMLA): k^T v over many tokens."""

    def forward(self, q, k, v):
        q, k, v = torch.relu(q).float(), torch.relu(k).to(torch.float32), v.float()
        kv = k.transpose(-1, -2) @ v
        return (q @ kv) / 1e4


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = UpcastAttention()

    def forward(self, q, k, v):
        return self.attn(q, k, v)


def test_the_models_own_fp32_casts_are_ignored_as_the_gpu_ignores_them():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.rand(1, 256, 8, generator=g) * 30 for _ in range(3))
    fault = first_fp16_fault(Outer().eval(), (q, k, v))
    assert (fault.op, fault.module, fault.kind) == ("matmul", "attn", "overflow"), fault
    assert fault.upcast_in == ["attn"] and "casts to fp32 in attn" in fault.describe()
    with torch.no_grad():                              # the model itself, in fp32, is finite
        assert bool(torch.isfinite(Outer()(q, k, v)).all())
