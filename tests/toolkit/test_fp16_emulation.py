"""fp16_emulation: the first op that turns non-finite in torch with fp16 tensors, named and classified."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from litert_gpu_toolkit.diagnose.fp16_emulation import first_fp16_fault
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


class Offset(nn.Module):
    """Adds (or removes) a large constant: what rides on top of it keeps only fp16's 11 bits of the sum."""

    def __init__(self, c, upcast=False):
        super().__init__()
        self.c, self.upcast = c, upcast

    def forward(self, x):
        return (x.float() if self.upcast else x) + self.c


class Buried(nn.Module):
    """A signal of about 1 carried for one block on top of 1024 (fp16's spacing there is 1): storage keeps it to
    +-0.5, and nothing a GPU could do in its arithmetic would bring it back."""

    def __init__(self, upcast=False):
        super().__init__()
        self.blocks = nn.Sequential(nn.Linear(16, 16), Offset(1024.0, upcast), Offset(-1024.0), nn.Linear(16, 16))

    def forward(self, x):
        return self.blocks(x)


def test_fp16_storage_says_where_the_values_stop_fitting_fp16():
    from litert_gpu_toolkit.diagnose.fp16_emulation import fp16_storage

    torch.manual_seed(0)
    model, x = Buried().eval(), (torch.randn(32, 16) * 2,)
    storage = fp16_storage(model, x, ["blocks.0", "blocks.1", "blocks.2", ""])
    kept = storage.kept()
    assert kept["blocks.0"].corr > 0.9999
    # 1024 + x: stored within 2^-11 of itself (SNR > 60 dB), but its variation x only to +-0.5 (corr is centred)
    assert kept["blocks.1"].corr < 0.99 and kept["blocks.1"].snr_db > 60
    assert kept["blocks.2"].corr < 0.99 and kept[""].corr < 0.99
    # a precision plan cut after blocks.0 keeps the output; one cut after the offset cannot
    assert storage.fp16_until("blocks.0").corr > 0.9999
    assert storage.fp16_until("blocks.1").corr < 0.99
    assert storage.fp16_until("").corr == kept[""].corr                          # all fp16: the plain fp16 run
    # a value computed elsewhere (bisect passes the GPU's fp16 tap output) replaces torch16's at the cut
    exact = model.blocks[0](x[0]).detach().numpy()
    assert storage.fp16_until("blocks.1", exact + 1024).corr > 0.999999
    assert storage.fp16_until("blocks.1", exact[:3]) is None                     # not the boundary's shape
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_fp16_storage_ignores_the_models_own_upcast_as_the_gpu_does():
    from litert_gpu_toolkit.diagnose.fp16_emulation import fp16_storage

    torch.manual_seed(0)
    x = (torch.randn(32, 16) * 2,)
    kept = fp16_storage(Buried(upcast=True).eval(), x, ["blocks.2"]).kept()
    assert kept["blocks.2"].corr < 0.99         # .float() in the model would have saved it in torch, not on a GPU
