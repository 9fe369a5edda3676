"""patch_pad_rank4: a zero PAD of a rank-3 tensor with first axis > 1 is miscomputed on the GPU (llvmpipe, software
Vulkan, ai-edge-litert 2.3.0; asserted, so the day it is right a test says so); the rank-4 form is right."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.constant_operand import _pad
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper


class Trigram(nn.Module):
    """MobileBERT's trigram embedding: the sequence shifted one step each way (zero-padded), side by side."""

    def forward(self, x):
        return torch.cat([F.pad(x[:, 1:], [0, 0, 0, 1]), x, F.pad(x[:, :-1], [0, 0, 1, 0], value=0.0)], dim=2)


class Pads(nn.Module):
    def forward(self, x, y):
        return F.pad(x, [1, 2, 0, 1, 1, 0]), F.pad(y, [2, 0], value=-1.5), F.pad(x[:1], [0, 1])


X = torch.randn(2, 15, 32, generator=torch.Generator().manual_seed(3))


def test_bit_identical_in_torch_and_other_forms_untouched():
    y = torch.randn(15, 32)
    for model, args in ((Trigram(), (X,)), (Pads(), (X, y))):
        wrapper = GpuRewriteWrapper(model, include=["patch_pad_rank4"])
        with torch.no_grad():
            got, want = wrapper(*args), model(*args)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert torch.equal(g, w)
    assert any(c.rewrite == "patch_pad_rank4" for c in wrapper.changes)
    # batch 1 at rank 3, rank 4 and non-constant modes are left as they are
    assert _pad(X[:1], [0, 1]) is NotImplemented and _pad(X[None], [0, 1]) is NotImplemented
    assert _pad(X, [1, 1], mode="reflect") is NotImplemented


@pytest.mark.gpu
def test_the_rank4_pad_is_right_on_the_gpu(gpu, tmp_path):
    plain = convert_for_gpu(Trigram(), (X,), tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "NUMERICS_FAIL", plain.summary()
    info = read_model_info(plain.path)
    assert any(op.op == "PAD" and info.tensor(op.inputs[0]).shape == (2, 14, 32) for op in info.ops)
    fixed = convert_for_gpu(Trigram(), (X,), tmp_path / "fixed.tflite", only=["patch_pad_rank4"])
    assert fixed.ok, fixed.summary()
    info = read_model_info(fixed.path)
    assert all(info.tensor(op.inputs[0]).rank == 4 for op in info.ops if op.op == "PAD")
