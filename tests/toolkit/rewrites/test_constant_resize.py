"""`patch_identity_resize`: a constant position table resized to its own grid (DPT-style) becomes the
table itself. Exact in torch; RESIZE_BILINEAR gone; strict GPU-only with numerics matching torch
(software GPU: llvmpipe, ai-edge-litert 2.3.0)."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from litert_gpu_toolkit.convert.pipeline import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.rewrites.constant_resize import is_identity_resize
from litert_gpu_toolkit.core.symptoms import for_op, suggestions


class PosResize(nn.Module):
    """The DPT `_resize_pos_embed` shape: [1, 1 + g*g, D] table -> grid -> resized to the patch grid."""

    def __init__(self, grid=4, dim=16):
        super().__init__()
        torch.manual_seed(0)
        self.grid = grid
        self.pos = nn.Parameter(torch.randn(1, 1 + grid * grid, dim))
        self.proj = nn.Linear(dim, dim)

    def forward(self, tokens):
        cls, table = self.pos[:, :1], self.pos[:, 1:]
        g = self.grid
        table = table.reshape(1, g, g, -1).permute(0, 3, 1, 2)
        table = F.interpolate(table, size=(g, g), mode="bilinear")
        table = table.permute(0, 2, 3, 1).reshape(1, g * g, -1)
        return self.proj(tokens + torch.cat([cls, table], dim=1))


X = torch.randn(1, 17, 16)


@pytest.mark.parametrize("mode,align", [("bilinear", False), ("bilinear", True), ("bicubic", False),
                                        ("nearest", None), ("area", None), ("bicubic", True)])
def test_identity_resize_is_exact(mode, align):
    x = torch.randn(2, 3, 6, 5)
    kw = {} if align is None else {"align_corners": align}
    assert is_identity_resize(x, (6, 5), None, mode, align)
    assert is_identity_resize(x, None, 1.0, mode, align)
    assert torch.equal(F.interpolate(x, size=(6, 5), mode=mode, **kw), x)
    assert not is_identity_resize(x, (6, 6), None, mode, align)
    assert not is_identity_resize(x, None, 2.0, mode, align)


def test_wrapper_is_exact_and_other_resizes_untouched():
    model = PosResize().eval()
    wrapped = GpuRewriteWrapper(model, include=["patch_identity_resize"])
    with torch.no_grad():
        assert torch.equal(wrapped(X), model(X))
    assert [c.rewrite for c in wrapped.changes] == ["patch_identity_resize"]
    up = GpuRewriteWrapper(nn.Upsample(scale_factor=2, mode="bilinear"), include=["patch_identity_resize"])
    x = torch.randn(1, 2, 3, 3)
    assert torch.equal(up(x), F.interpolate(x, scale_factor=2, mode="bilinear")) and not up.changes


def test_symptom_suggests_it_for_a_rejected_resize():
    assert suggestions(for_op("RESIZE_BILINEAR"))[0] == "patch_identity_resize"


@pytest.mark.gpu
def test_resize_gone_and_gpu_only(gpu, tmp_path):
    plain = convert_for_gpu(PosResize(), (X,), tmp_path / "plain.tflite", patches=False)
    assert "RESIZE_BILINEAR" in read_model_info(plain.path).op_histogram()
    assert plain.verdict != "PASS", plain.summary()
    fixed = convert_for_gpu(PosResize(), (X,), tmp_path / "fixed.tflite", only=["patch_identity_resize"],
                            fallback=False)
    assert "RESIZE_BILINEAR" not in read_model_info(fixed.path).op_histogram()
    assert fixed.ok, fixed.summary()
    print("\n[llvmpipe fp16]", fixed.report.summary)
