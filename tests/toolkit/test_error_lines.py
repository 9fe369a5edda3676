"""A conversion error names its telling line (what failed, where in the user's code), never the converter's
generic trailer; suggestions come only from rules of the failing stage that can apply to the model.

The texts below are real errors (litert-torch 0.10.0, torch 2.13), shortened to the lines that matter."""
import torch
import torch.nn.functional as F
from torch import nn

from litert_gpu_toolkit.convert.pipeline import ConvertResult, convert_for_gpu
from litert_gpu_toolkit.core.error_lines import source_of, telling, telling_line
from litert_gpu_toolkit.core.symptoms import applicable, for_log, suggestions

TRAILERS = ("Use tlparse", "TORCH_LOGS", "draft_export", "TORCHDYNAMO", "For more debugging help")

STFT = """RuntimeError: Unsupported ir element type: complex<f32>

While executing %permute : [num_users=1] = call_function[target=torch.ops.aten.permute.default](args = (%_fft_r2c, [0, 2, 1]), kwargs = {})
Original traceback:
File "/home/user/proj/utilities/litert_gpu_toolkit/rewrites/functional.py", line 76, in forward
    out = self.model(*args, **kwargs)
  File "/tmp/errs/repro.py", line 7, in forward
    s = torch.stft(x, 64, hop_length=16, window=torch.hann_window(64), return_complex=True)
Use tlparse to see full graph. (https://github.com/pytorch/tlparse?tab=readme-ov-file#tlparse-parse-structured-pt2-logs)"""  # noqa: E501

GUARD = """GuardOnDataDependentSymNode: Could not guard on data-dependent expression Eq(u0, 1) (unhinted: Eq(u0, 1)).  (Size-like symbols: none)

consider using data-dependent friendly APIs such as guard_or_false, guard_or_true and statically_known_true.
Caused by: (_export/non_strict_utils.py:1205 in __torch_function__)
For more information, run with TORCH_LOGS="dynamic"
For extended logs when we create symbols, also add TORCHDYNAMO_EXTENDED_DEBUG_CREATE_SYMBOL="u0"
If you suspect the guard was triggered from C++, add TORCHDYNAMO_EXTENDED_DEBUG_CPP=1
For more debugging help, see https://docs.google.com/document/d/1HSuTTVvYH1pTew89Rtpeu84Ht3nQEFTYhAX3Ypa_xJs/edit?usp=sharing

For C++ stack trace, run with TORCHDYNAMO_EXTENDED_DEBUG_CPP=1

The following call raised this error:
  File "/tmp/errs/repro.py", line 20, in forward
    if torch.min(y) < -1:


The error above occurred when calling torch.export.export. If you would like to view some more information about this error, and get a list of all other errors that may occur in your export call, you can replace your `export()` call with `draft_export()`."""  # noqa: E501

LEGALIZE = """ValueError: Failed to run converter passes: /home/user/proj/.venv/lib/python3.11/site-packages/torch/nn/modules/conv.py:1198:0: error: failed to legalize operation 'mhlo.convolution' that was explicitly marked illegal: %14 = "mhlo.convolution"(%9, %13) <{batch_group_count = 1 : i64, feature_group_count = 1 : i64, lhs_dilation = dense<2> : tensor<2xi64>, padding = dense<1> : tensor<2x2xi64>}> : (tensor<1x5x5x2xf32>, tensor<2x3x3x2xf32>) -> tensor<1x9x9x2xf32>"""  # noqa: E501

LOWERING = """RuntimeError: Lowering not found: aten.linalg_matrix_exp.default

While executing %linalg_matrix_exp : [num_users=1] = call_function[target=torch.ops.aten.linalg_matrix_exp.default](args = (%sub_1,), kwargs = {})
Original traceback:
File "/home/user/proj/.venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", line 134, in forward
    return F.linear(input, self.weight, self.bias)
  File "/home/user/proj/.venv/lib/python3.11/site-packages/torch/nn/utils/parametrizations.py", line 91, in forward
    Q = torch.matrix_exp(A)
Use tlparse to see full graph. (https://github.com/pytorch/tlparse?tab=readme-ov-file#tlparse-parse-structured-pt2-logs)"""  # noqa: E501


def test_each_kind_of_failure_names_its_line_and_source():
    t = telling(STFT)
    assert t.kind == "unsupported_type" and "complex<f32>" in t.line and "_fft_r2c" in t.line
    assert t.source == "/tmp/errs/repro.py:7 in forward: s = torch.stft(x, 64, hop_length=16, " \
                       "window=torch.hann_window(64), return_complex=True)"
    t = telling(GUARD)
    assert t.kind == "data_dependent_guard" and "Eq(u0, 1)" in t.line
    assert t.source == "/tmp/errs/repro.py:20 in forward: if torch.min(y) < -1:"
    t = telling(LEGALIZE)
    assert t.kind == "not_legalized" and t.op == "mhlo.convolution" and "transposed" in t.line
    assert t.source.endswith("torch/nn/modules/conv.py:1198")
    t = telling(LOWERING)
    assert t.kind == "missing_lowering" and t.op == "aten.linalg_matrix_exp.default"
    assert "Q = torch.matrix_exp(A)" in t.source      # no user frame: the deepest frame
    assert telling("NotImplementedError: aten.foo is not supported on this backend\nUse tlparse").kind == "refused_op"
    for text in (STFT, GUARD, LEGALIZE, LOWERING):
        assert not any(tr in telling_line(text) for tr in TRAILERS), telling_line(text)


def test_summary_shows_the_telling_line_not_the_trailer():
    for text in (STFT, GUARD, LOWERING):
        result = ConvertResult(None, [], error=text)
        assert result.error_line in result.summary()
        assert not any(tr in result.summary() for tr in TRAILERS), result.summary()


def test_a_user_frame_beats_the_toolkit_wrapper_frame():
    text = STFT.replace('  File "/tmp/errs/repro.py", line 7, in forward\n    s = torch.stft(', '    s = torch.stft(')
    assert "functional.py" in source_of(text)           # only the toolkit's frame left: the deepest one
    assert source_of(text + '\n(in your code) File "/m.py", line 3, in forward\n    y = f(x)') == \
        "/m.py:3 in forward: y = f(x)"


def test_suggestions_match_the_stage_and_the_model():
    assert [s.id for s in for_log(STFT, stage="convert")] == ["fft"]
    assert not for_log("GATHER_ND: Operation is not supported.", stage="convert")
    assert [s.id for s in for_log("GATHER_ND: Operation is not supported.", stage="gpu")] == ["gather_nd"]
    legal = for_log(LEGALIZE, stage="convert")
    assert "PolyphaseConvT2d" in suggestions(legal)
    assert suggestions(legal, {"Sequential", "Conv2d"}) == ["patch_conv_transpose"]
    assert "PolyphaseConvT2d" in suggestions(legal, {"ConvTranspose2d"})
    assert "PolyphaseConvT1d" not in suggestions(legal, {"ConvTranspose2d"})
    assert applicable(["bisect", "ZeroStuffConvT1d"], {"Linear"}) == ["bisect"]


class FunctionalConvT(nn.Module):
    """F.conv_transpose2d with a weight computed at run time and a padding litert-torch cannot legalize."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(2, 2, 3, 3))

    def forward(self, x):
        return F.conv_transpose2d(x, self.w * 2.0, stride=2, padding=1, output_padding=1)


def test_a_functional_conv_error_suggests_no_module_class(tmp_path):
    result = convert_for_gpu(FunctionalConvT(), (torch.randn(1, 2, 5, 5),), tmp_path / "f.tflite", patches=False)
    assert result.verdict == "CONVERT_FAIL", result.summary()
    assert "failed to legalize operation 'mhlo.convolution'" in result.error_line
    assert result.suggestions == ["patch_conv_transpose"], result.suggestions
    assert not any(tr in result.summary() for tr in TRAILERS), result.summary()


class Stft(nn.Module):
    def forward(self, x):
        return torch.stft(x, 32, hop_length=8, window=torch.hann_window(32), return_complex=True).abs()


def test_a_real_stft_failure_names_the_users_line(tmp_path):
    result = convert_for_gpu(Stft(), (torch.randn(1, 256),), tmp_path / "s.tflite", check=False, patches=False)
    assert result.verdict == "CONVERT_FAIL"
    assert "test_error_lines.py" in result.error_line and "torch.stft(" in result.error_line, result.error_line
    assert "ConvSTFT" in result.suggestions and "Use tlparse" not in result.summary()


def test_numeric_suggestions_name_only_norms_the_model_has():
    from litert_gpu_toolkit.core.symptoms import for_numeric

    degraded = suggestions(for_numeric("degraded"), {"Module", "Sequential", "Conv1d", "ReLU"})
    assert "bisect" in degraded and not {"patch_safe_layernorm", "patch_instance_norm", "patch_group_norm"} & set(
        degraded)
    assert "patch_instance_norm" in suggestions(for_numeric("degraded"), {"InstanceNorm2d", "_InstanceNorm"})


def test_a_refused_op_and_a_log_that_says_more():
    from litert_gpu_toolkit.core.error_lines import with_log

    t = telling("ValueError: Failed to run converter passes: loc(x): error: 'tf.RFFT' op is neither a custom op nor a "
                "flex op\nUse tlparse to see full graph.")
    assert t.kind == "refused_op" and t.op == "tf.RFFT"
    generic = "RuntimeError: conversion failed\nFor more information, run with TORCH_LOGS=\"+dynamo\""
    assert telling_line(generic) == "RuntimeError: conversion failed"
    assert with_log(generic, LOWERING).endswith("no lowering for aten.linalg_matrix_exp.default (Lowering not found) "
                                                "(at /home/user/proj/.venv/lib/python3.11/site-packages/torch/nn/utils/"
                                                "parametrizations.py:91 in forward: Q = torch.matrix_exp(A))")
    assert with_log(LOWERING, STFT) == LOWERING                 # a specific error keeps its own line
    assert "no lowering for aten.linalg_matrix_exp" in telling_line(with_log(generic, LOWERING))
