"""Data-dependent Python branches in forward: specialised on the example input (with a warning naming each
line) when torch.export cannot trace them, and named precisely when specialising cannot help."""
import warnings

import pytest
import torch
from torch import nn

from litert_gpu_toolkit.convert.pipeline import convert_for_gpu
from litert_gpu_toolkit.lowering.specialise import Specialised, is_data_dependent_error, record


class Branchy(nn.Module):
    """The onnx2torch shapes: a min check, an any() check, an item()-driven factor, a shape assert."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        assert x.shape[1] == 3
        y = self.conv(x)
        if torch.min(y) < -1:
            y = y.clamp(-1)
        if (y > 0).any():
            y = y * 0.5
        scale = float(y.abs().max().item())
        return y / (scale + 1.0)


X = torch.randn(1, 3, 8, 8) * 3


def test_record_and_replay_is_exact_on_the_example_input():
    """Bound: bit-identical on the example input (the same ops run; the branches take the recorded path)."""
    model = Branchy().eval()
    with torch.no_grad():
        ref = model(X)
        special = Specialised(model, record(model, (X,), {}))
        assert torch.equal(special(X), ref)
    lines = special.lines()
    assert len(lines) == 3 and all("test_guards.py" in ln for ln in lines), lines
    assert any("if torch.min(y) < -1: -> True" in ln for ln in lines), lines
    assert any("scale = float(y.abs().max().item())" in ln for ln in lines), lines


def test_a_model_with_data_dependent_branches_converts_after_specialisation(tmp_path, gpu):
    with pytest.warns(UserWarning, match="specialised data-dependent branches"):
        plain = convert_for_gpu(Branchy(), (X,), tmp_path / "p.tflite", check=False, patches=False)
    assert plain.specialised and plain.error is None        # plain conversion specialises too
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = convert_for_gpu(Branchy(), (X,), tmp_path / "b.tflite")
    assert result.verdict == "PASS", result.summary()
    text = result.summary()
    assert "WARNING: data-dependent branches specialised on the example input" in text
    for code in ("if torch.min(y) < -1:", "if (y > 0).any():", "scale = float(y.abs().max().item())"):
        assert code in text, text
    assert any("specialised data-dependent branches" in str(w.message) and "if torch.min(y) < -1" in str(w.message)
               for w in seen), [str(w.message) for w in seen]


class DataDependentSize(nn.Module):
    def forward(self, x):
        idx = torch.nonzero(x > 0)
        if idx.shape[0] > 2:          # a guard on a data-dependent size: no tensor-to-Python call to replay
            return x * 2.0
        return x


def test_a_guard_that_cannot_be_specialised_is_named_with_its_line(tmp_path):
    result = convert_for_gpu(DataDependentSize(), (torch.randn(1, 8),), tmp_path / "d.tflite", check=False)
    assert result.verdict == "CONVERT_FAIL" and is_data_dependent_error(result.error)
    line = result.error_line
    assert "data-dependent branch on u0 > 2" in line, line
    assert "test_guards.py" in line and "if idx.shape[0] > 2:" in line, line
    assert "that failed too" in result.error and "TORCH_LOGS" not in result.summary()


class MaskedAdapters(nn.Module):
    """XMOD's language adapters: each token row goes through the adapter its language id picks, by bool-mask
    indexing (`h[mask]`, `out[mask] = ...`), which makes a size torch.export cannot know. The ids come from a
    constant, as XMOD's default language does; two adapters, so each mask picks part of the batch."""

    def __init__(self):
        super().__init__()
        self.adapters = nn.ModuleList(nn.Sequential(nn.Linear(16, 8), nn.GELU(), nn.Linear(8, 16)) for _ in "ab")
        self.register_buffer("lang", torch.tensor([0, 1, 1]))

    def forward(self, h):                                   # h [3, 5, 16]
        out = torch.zeros_like(h)
        for i, adapter in enumerate(self.adapters):
            mask = self.lang == i
            out[mask] = adapter(h[mask])
        return out + h


H = torch.randn(3, 5, 16)


def test_mask_indexing_is_specialised_to_the_example_positions():
    """Bound: bit-identical on the example input (the same rows, read and written at integer positions)."""
    torch.manual_seed(0)
    model = MaskedAdapters().eval()
    with torch.no_grad():
        ref = model(H)
        special = Specialised(model, record(model, (H,), {}))
        assert torch.equal(special(H), ref)
    assert any("a mask selecting 1 positions" in ln and "a mask selecting 2 positions" in ln
               for ln in special.lines()), special.lines()


def test_mask_indexed_adapters_run_gpu_only_after_specialisation(tmp_path, gpu):
    torch.manual_seed(0)
    model = MaskedAdapters().eval()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = convert_for_gpu(model, (H,), tmp_path / "a.tflite", diagnose_budget_s=0)
    assert result.verdict == "PASS", result.summary()           # strict GPU-only, fp16 and fp32 match torch
    assert any("a mask selecting" in ln for ln in result.specialised), result.specialised
    assert any("specialised data-dependent branches" in str(w.message) for w in seen)
    from litert_gpu_toolkit.core.model_info import read_model_info

    ops = read_model_info(tmp_path / "a.tflite").op_histogram()
    assert not {"GATHER_ND", "SCATTER_ND", "WHERE", "GATHER"} & set(ops), ops
