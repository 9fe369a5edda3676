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
