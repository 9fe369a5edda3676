"""convert_for_gpu never raises on a model that runs in torch: weight_norm / parametrize models are copied and
folded (fold_parametrizations, exact), odd outputs and inputs convert, and any unexpected error is a result."""
import threading
import warnings
from dataclasses import dataclass

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrizations, parametrize

from litert_gpu_toolkit.convert import pipeline as convert_module
from litert_gpu_toolkit.convert.pipeline import ConvertResult, convert_for_gpu
from litert_gpu_toolkit.core.model_copy import copy_model
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.parametrized_weights import fold_parametrizations

NORM_OPS = {"SQRT", "RSQRT", "SUM", "DIV", "POW", "SQUARE", "MEAN", "REDUCE_MAX", "ABS"}


def _old_weight_norm(module):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)         # torch deprecates the hook version
        return nn.utils.weight_norm(module)


def weight_norm_stack() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(_old_weight_norm(nn.Conv1d(4, 8, 3, padding=1)), nn.ReLU(),
                         _old_weight_norm(nn.Conv1d(8, 8, 3, padding=1)), nn.ReLU(),
                         _old_weight_norm(nn.Conv1d(8, 4, 1)))


class _Symmetric(nn.Module):
    def forward(self, w):
        return (w + w.transpose(0, 1)) / 2


def every_parametrization() -> nn.Module:
    torch.manual_seed(1)
    lin = nn.Linear(8, 8)
    parametrize.register_parametrization(lin, "weight", _Symmetric())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        old_sn = nn.utils.spectral_norm(nn.Conv1d(8, 8, 1))
    return nn.Sequential(_old_weight_norm(nn.Conv1d(4, 8, 3)), parametrizations.weight_norm(nn.Conv1d(8, 8, 3)),
                         old_sn, parametrizations.spectral_norm(nn.Conv1d(8, 8, 1)),
                         parametrizations.orthogonal(nn.Conv1d(8, 8, 1)), nn.Flatten(1, -1), nn.LazyLinear(8), lin)


X = torch.randn(1, 4, 16)


def test_fold_is_exact_in_torch_and_leaves_the_original_alone():
    """Bound: bit-identical (the folded weight is the eval forward's own fp32 weight, computed once)."""
    model = every_parametrization().eval()
    with torch.no_grad():
        ref = model(X)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    folded = copy_model(model)                     # the hook weight_norm alone makes plain deepcopy refuse
    changes = fold_parametrizations(folded)
    assert len(changes) == 6 and all(c.exact and c.rewrite == "fold_parametrizations" for c in changes), changes
    assert {"weight_norm hook", "parametrization WeightNorm", "spectral_norm hook", "parametrization SpectralNorm",
            "parametrization Orthogonal", "parametrization Symmetric"} == {c.what.split(" on ")[0] for c in changes}
    assert not any(parametrize.is_parametrized(m) or m._forward_pre_hooks for m in folded.modules())
    assert all(isinstance(p, nn.Parameter) for p in dict(folded.named_parameters()).values())
    with torch.no_grad():
        assert torch.equal(folded(X), ref)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())     # the original is untouched
    assert hasattr(model[0], "weight_g") and parametrize.is_parametrized(model[1])
    with torch.no_grad():           # and still runs: a copy shares the injected Parametrized* class (EnCodec broke)
        assert torch.equal(model(X), ref)


def test_weight_norm_stack_passes_on_the_gpu_with_no_norm_op_left(tmp_path, gpu):
    model = weight_norm_stack()
    result = convert_for_gpu(model, (X,), tmp_path / "wn.tflite")
    assert isinstance(result, ConvertResult) and result.verdict == "PASS", result.summary()
    folds = [c for c in result.changes if c.rewrite == "fold_parametrizations"]
    assert len(folds) == 3 and all(c.exact for c in folds), result.summary()
    ops = read_model_info(result.path).op_histogram()
    assert not NORM_OPS & set(ops), ops
    assert hasattr(model[0], "weight_g") and hasattr(model[0], "weight_v")          # the user's model unchanged


def test_new_weight_norm_spectral_norm_and_orthogonal_pass(tmp_path, gpu):
    """Plain conversion fails on orthogonal's Householder product (no lowering); folded, the file PASSes."""
    def model():
        torch.manual_seed(2)
        return nn.Sequential(parametrizations.weight_norm(nn.Conv1d(4, 8, 3)), nn.ReLU(),
                             parametrizations.spectral_norm(nn.Conv1d(8, 4, 1)),
                             parametrizations.orthogonal(nn.Conv1d(4, 4, 1)))
    plain = convert_for_gpu(model(), (X,), tmp_path / "plain.tflite", patches=False, check=False)
    assert plain.verdict == "CONVERT_FAIL" and "householder_product" in plain.error_line, plain.summary()
    assert "fold_parametrizations" in plain.suggestions
    user_model = model()
    result = convert_for_gpu(user_model, (X,), tmp_path / "pn.tflite")
    assert result.verdict == "PASS", result.summary()
    assert sum(c.rewrite == "fold_parametrizations" for c in result.changes) == 3
    ops = read_model_info(result.path).op_histogram()
    assert not NORM_OPS & set(ops) and set(ops) <= {"CONV_2D", "RESHAPE", "TRANSPOSE", "RELU"}, ops
    assert parametrize.is_parametrized(user_model[0])


@dataclass
class Out:
    y: torch.Tensor
    z: torch.Tensor


class Outputs(nn.Module):
    """Returns `kind`-shaped outputs; holds a registered buffer."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 16))
        self.conv = nn.Conv1d(4, 4, 1)

    def forward(self, x):
        y = self.conv(x) * self.scale
        z = torch.relu(x) + 1.0
        if self.kind == "dict":
            return {"y": y, "z": z}
        if self.kind == "tuple":
            return y, z
        if self.kind == "nested":
            return y, (z, (y * 2.0,))
        if self.kind == "dataclass":
            return Out(y, z)
        return y


class KeywordOnly(nn.Module):
    def forward(self, x, *, gain):
        return x * gain + 1.0


@pytest.mark.parametrize("kind", ["buffer", "dict", "tuple", "nested", "dataclass"])
def test_outputs_of_every_shape_return_a_result(tmp_path, gpu, kind):
    torch.manual_seed(3)
    result = convert_for_gpu(Outputs(kind), (X,), tmp_path / f"{kind}.tflite")
    assert isinstance(result, ConvertResult)
    assert result.verdict == "PASS", result.summary()


def test_keyword_only_inputs(tmp_path, gpu):
    result = convert_for_gpu(KeywordOnly(), (X,), tmp_path / "kw.tflite", kwargs={"gain": torch.full((1, 4, 1), 2.0)})
    assert result.verdict == "PASS", result.summary()
    assert result.signatures["serving_default"]["inputs"] == ["args_0", "gain"]


class Locked(nn.Module):
    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()          # deepcopy cannot copy a lock

    def forward(self, x):
        return x + 1.0


class Broken(nn.Module):
    def forward(self, x):
        return x @ torch.ones(3, 3)           # the example input does not fit


def test_a_model_that_cannot_be_copied_is_a_result(tmp_path):
    result = convert_for_gpu(Locked(), (X,), tmp_path / "locked.tflite", check=False)
    assert result.error and result.stage == "copy" and result.verdict == "ERROR", result.summary()
    assert "lock" in result.error_line and "inplace=True" in result.error
    assert "copying the model" in result.summary()


def test_a_model_that_does_not_run_is_a_result(tmp_path):
    result = convert_for_gpu(Broken(), (X,), tmp_path / "broken.tflite")
    assert result.stage == "run" and not result.ok
    assert "running the model in torch" in result.summary() and "mat1 and mat2" in result.error_line


class ReturnsInt(nn.Module):
    def forward(self, x):
        return x.shape[-1]


class ReturnsTensorAndInt(nn.Module):
    def forward(self, x):
        return {"y": x * 2, "n": 3}


def test_a_model_returning_no_tensor_names_what_it_returns(tmp_path):
    """Before: INVALID_MODEL, "the model has no operators", twice (rewritten and plain), naming nothing."""
    result = convert_for_gpu(ReturnsInt(), (X,), tmp_path / "int.tflite")
    assert result.stage == "outputs" and result.verdict == "ERROR", result.summary()
    assert "returns no tensor (output: int " in result.error_line and "torch.tensor" in result.error_line
    assert not (tmp_path / "int.tflite").exists()


def test_a_value_beside_the_tensors_is_named_in_a_warning(tmp_path):
    with pytest.warns(UserWarning, match=r"not in the \.tflite: output\['n'\]: int 3"):
        result = convert_for_gpu(ReturnsTensorAndInt(), (X,), tmp_path / "mixed.tflite", check=False)
    assert result.error is None, result.summary()


def test_an_error_in_the_checker_is_a_result(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("checker exploded")
    monkeypatch.setattr(convert_module, "_check", boom)
    result = convert_for_gpu(KeywordOnly(), (X,), tmp_path / "c.tflite", kwargs={"gain": torch.ones(1, 4, 1)},
                             fallback=False)
    assert result.stage == "check" and result.verdict == "ERROR" and "checker exploded" in result.error_line
    with pytest.raises(ValueError, match="unknown rewrite"):   # bad arguments still raise
        convert_for_gpu(KeywordOnly(), (X,), tmp_path / "c.tflite", exclude=["fold_parametrization"])
    assert convert_for_gpu(KeywordOnly(), (X,), tmp_path / "d.tflite", kwargs={"gain": torch.ones(1, 4, 1)},
                           check=False, exclude=["fold_parametrizations"]).verdict == "UNCHECKED"


class SpareWeightNorm(nn.Module):
    """A weight-normed layer forward never calls keeps its non-leaf weight from weight_norm() itself."""

    def __init__(self):
        super().__init__()
        self.used = nn.Conv1d(4, 4, 1)
        self.spare = _old_weight_norm(nn.Conv1d(4, 4, 1))

    def forward(self, x):
        return self.used(x)


def test_a_non_leaf_hook_weight_is_copied_and_the_original_kept():
    import copy

    model = SpareWeightNorm()
    weight = model.spare.weight
    assert weight.grad_fn is not None
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(model)
    clone = copy_model(model)
    assert model.spare.weight is weight                              # nothing set aside or replaced
    assert torch.equal(clone.spare.weight, weight.detach()) and clone.spare.weight.grad_fn is None


def test_convert_for_gpu_copies_a_model_plain_deepcopy_refuses(tmp_path):
    result = convert_for_gpu(SpareWeightNorm(), (X,), tmp_path / "spare.tflite", check=False)
    assert result.verdict == "UNCHECKED" and result.path.exists(), result.summary()
    assert [c.path for c in result.changes if c.rewrite == "fold_parametrizations"] == ["spare"]


class ListInput(nn.Module):
    def forward(self, xs):
        return xs[0] + 2.0 * xs[1]


def test_a_list_input_is_checked_with_the_example_values(tmp_path, gpu):
    """The converted file names a list input args_0_0, args_0_1: the check feeds the example's tensors under those
    names (before, it fed random ones and reported corr 0.35 NUMERICS_FAIL)."""
    result = convert_for_gpu(ListInput(), ([X, X * 3.0],), tmp_path / "list.tflite")
    assert result.verdict == "PASS", result.summary()
    assert result.signatures["serving_default"]["inputs"] == ["args_0_0", "args_0_1"]
