"""Checker without the GPU: bad model files -> INVALID_MODEL reports, input generation, CLI exit codes,
and a silent CPU fallback caught through a test double of the runtime."""
import json
import subprocess
import sys
from pathlib import Path

import flatbuffers
import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema

from litert_gpu_toolkit import Report, check_gpu_compatibility, print_report
from litert_gpu_toolkit.check import steps as checker_mod  # where the checker calls the runtime
from litert_gpu_toolkit.__main__ import main as cli_main
from litert_gpu_toolkit.core.inputs import (PLACEHOLDER_SIGNATURE, InputError, integer_bound, make_inputs,
                                       parse_int_range_args, parse_shape_args, split_by_signature)
from litert_gpu_toolkit.core.model_info import ModelInfo, OpInfo, SignatureInfo, TensorInfo, read_model_info
from litert_gpu_toolkit.runtime.compiled import compile_and_run, parse_gpu_log
from litert_gpu_toolkit.runtime.tiny_models import add_model_bytes

REPO = Path(__file__).resolve().parents[2]


def edited_add_model(edit) -> bytes:
    """The one-op probe model (out = x + y, [1, 8, 8, 4]) after `edit(ModelT)`."""
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(add_model_bytes(), 0))
    edit(model)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _write(tmp_path, name, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


# --- bad files: each is a clear INVALID_MODEL report, with no runtime child started -------------------

ONNX_HEAD = b"\x08\x08\x12\x07pytorch\x1a\x052.1.0:\x8f\x01\n\x1c"  # ModelProto: ir_version 8, producer "pytorch"


@pytest.mark.parametrize("name, data, message", [
    ("empty.tflite", b"", "empty file"),
    ("model.onnx", ONNX_HEAD + bytes(200), "ONNX"),
    ("notes.tflite", b"this is a README, not a model\n" * 4, "text file"),
    ("zeros.tflite", bytes(4096), "all 4096 bytes are zero"),
    ("lfs.tflite", b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n", "Git LFS pointer"),
    ("truncated.tflite", add_model_bytes()[:300], "truncated or corrupt flatbuffer"),
])
def test_bad_file_is_invalid_model(tmp_path, name, data, message):
    report = check_gpu_compatibility(_write(tmp_path, name, data))
    assert report.verdict == "INVALID_MODEL"
    assert message in report.summary
    assert report.runs == {}  # no child process for a file that cannot be read
    json.dumps(report.to_dict())


def test_missing_file_and_directory(tmp_path):
    assert "no such file" in check_gpu_compatibility(tmp_path / "nope.tflite").summary
    report = check_gpu_compatibility(tmp_path)
    assert report.verdict == "INVALID_MODEL" and "directory" in report.summary


def test_model_without_ops(tmp_path):
    def no_ops(m):
        m.subgraphs[0].operators = []
    report = check_gpu_compatibility(_write(tmp_path, "noops.tflite", edited_add_model(no_ops)))
    assert report.verdict == "INVALID_MODEL" and "no operators" in report.summary


@pytest.mark.parametrize("edit, message, runs", [
    ("bad_index", "names input tensor(s) [7]", []),  # caught by the static read's bounds checks
    ("bad_opcode", "builtin_code out of range", ["cpu"]),
    ("bad_shape", "Failed to allocate tensors", ["cpu"]),
])
def test_parseable_but_broken_model_fails_on_cpu(tmp_path, edit, message, runs):
    """Files that read statically but that LiteRT cannot load: INVALID_MODEL with the runtime's own words
    (or, where the static read can tell, before any runtime child starts)."""
    def bad_index(m):
        m.subgraphs[0].operators[0].inputs = [0, 7]

    def bad_opcode(m):
        m.operatorCodes[0].builtinCode, m.operatorCodes[0].deprecatedBuiltinCode = 250, 127

    def bad_shape(m):
        m.subgraphs[0].tensors[1].shape = [1, 3]
    path = _write(tmp_path, f"{edit}.tflite", edited_add_model(locals()[edit]))
    report = check_gpu_compatibility(path, timeout=120)
    assert report.verdict == "INVALID_MODEL", report.summary
    assert message in report.summary
    assert list(report.runs) == runs  # stops before any GPU work


def test_cpu_crash_is_reported_not_raised(tmp_path, monkeypatch):
    monkeypatch.setenv("LITERT_GPU_TOOLKIT_TEST_FAULT", "crash@cpu")  # test double: the CPU child aborts
    report = check_gpu_compatibility(_write(tmp_path, "add.tflite", add_model_bytes()), timeout=120)
    assert report.verdict == "INVALID_MODEL"
    assert report.runs["cpu"]["status"] == "crash"
    assert "SIGABRT" in report.summary and "during run of signature serving_default" in report.summary
    assert "injecting a crash" in report.log_tail


# --- inputs -----------------------------------------------------------------------------------------

def _t(i, name, shape, dtype="float32", const=False, sig=None):
    return TensorInfo(i, name, tuple(shape), dtype, const, 64 if const else 0, sig)


def _gather_info() -> ModelInfo:
    """Hand-made graph: ids [1, 3] int32 -RESHAPE-> indices of a GATHER on axis 1 of a [5, 7] table; an int mask
    that only feeds an ADD; x with a dynamic dim; a bool flag."""
    tensors = [_t(0, "ids", (1, 3), "int32"), _t(1, "ids2", (3,), "int32"), _t(2, "table", (5, 7), const=True),
               _t(3, "rows", (5, 3)), _t(4, "mask", (1, 3), "int32"), _t(5, "out", (5, 3)),
               _t(6, "x", (1, 4, 8), sig=(1, -1, 8)), _t(7, "flag", (1,), "bool")]
    ops = [OpInfo(0, "RESHAPE", [0], [1]), OpInfo(1, "GATHER", [2, 1], [3], options={"axis": 1}),
           OpInfo(2, "ADD", [3, 4], [5])]
    sig = SignatureInfo("serving_default", 0, {"ids": tensors[0], "mask": tensors[4], "x": tensors[6],
                                               "flag": tensors[7]}, {"out": tensors[5]})
    return ModelInfo(None, 0, ops, [tensors], [sig], [[0, 4, 6, 7]], [[5]])


def test_integer_inputs_stay_in_the_range_of_the_table_they_index():
    info = _gather_info()
    assert integer_bound(info, 0) == (7, "axis 1 of the GATHER #1 input")  # through the RESHAPE
    assert integer_bound(info, 4) is None
    arrays, specs, warnings = make_inputs(info, seed=3)
    ids, mask = arrays["serving_default"]["ids"], arrays["serving_default"]["mask"]
    assert ids.dtype == np.int32 and ids.min() >= 0 and ids.max() < 7
    assert set(np.unique(mask)) <= {0, 1}
    by_name = {s.name: s for s in specs}
    assert "GATHER #1" in by_name["ids"].source and "indexes no table" in by_name["mask"].source
    assert arrays["serving_default"]["x"].shape == (1, 1, 8)  # dynamic dim resolved to 1 ...
    assert any("x: dynamic dimension(s) [1] set to 1" in w for w in warnings)  # ... and said so
    assert arrays["serving_default"]["flag"].dtype == np.bool_


def test_inputs_are_seeded_and_user_settings_apply():
    info = _gather_info()
    a, _, _ = make_inputs(info, seed=0)
    b, _, _ = make_inputs(info, seed=0)
    c, _, _ = make_inputs(info, seed=1)
    np.testing.assert_array_equal(a["serving_default"]["x"], b["serving_default"]["x"])
    assert not np.array_equal(a["serving_default"]["x"], c["serving_default"]["x"])
    got, specs, warnings = make_inputs(info, shapes={"x": (1, 5, 8)}, int_ranges={"serving_default/mask": (3, 4)})
    assert got["serving_default"]["x"].shape == (1, 5, 8) and not warnings
    assert (got["serving_default"]["mask"] == 3).all()
    mine = np.arange(3, dtype=np.int32).reshape(1, 3)
    got, specs, _ = make_inputs(info, {"ids": mine})
    assert got["serving_default"]["ids"] is mine or np.array_equal(got["serving_default"]["ids"], mine)
    assert [s.source for s in specs if s.name == "ids"] == ["caller array"]


@pytest.mark.parametrize("kwargs, message", [
    ({"given": {"nope": np.zeros(3)}}, "no input named 'nope'"),
    ({"given": {"ids": np.zeros((1, 4), np.int32)}}, "does not fit the model's [1, 3]"),
    ({"given": {"ids": np.zeros((1, 3), np.float32)}}, "wants int32"),
    ({"given": {"ids": np.zeros((1, 3), np.int64)}}, "arrays are never cast"),    # int64 ids: refused, not cast
    ({"given": {"x": np.zeros((1, 4, 8), np.float64)}}, "the model wants float32, the array is float64"),
    ({"given": {"x": np.full((1, 4, 8), np.nan, np.float32)}}, "32 of 32 values are NaN"),
    ({"shapes": {"x": (1, 5, 9)}}, "does not fit the model's [1, -1, 8]"),
    ({"shapes": {"zzz": (1,)}}, "not an input of the model"),
    ({"int_ranges": {"ids": (5, 5)}}, "empty integer range"),
])
def test_caller_mistakes_are_input_errors(kwargs, message):
    given = kwargs.pop("given", None)
    with pytest.raises(InputError) as err:
        make_inputs(_gather_info(), given, **kwargs)
    assert message in str(err.value)


def test_array_forms_and_npz(tmp_path):
    names = {"a": ["x", "y"], "b": ["x"]}
    x, y = np.ones(2), np.zeros(2)
    assert set(split_by_signature({"x": x}, names)) == {"a", "b"}  # a shared name feeds every signature
    assert list(split_by_signature({"b/x": x}, names)) == ["b"]
    assert list(split_by_signature({"a": {"y": y}}, names)["a"]) == ["y"]
    np.savez(tmp_path / "in.npz", **{"a/y": y, "x": x})
    got = split_by_signature(str(tmp_path / "in.npz"), names)
    assert sorted(got["a"]) == ["x", "y"] and list(got["b"]) == ["x"]
    with pytest.raises(InputError, match="no such .npz"):
        split_by_signature(tmp_path / "missing.npz", names)
    assert parse_shape_args(["x=1,128"]) == {"x": (1, 128)}
    assert parse_int_range_args(["ids=0:30522"]) == {"ids": (0, 30522)}
    with pytest.raises(InputError):
        parse_int_range_args(["ids=30522"])


def test_model_without_signatures_gets_the_runtime_placeholder(tmp_path):
    def no_sigs(m):
        m.signatureDefs = []
    info = read_model_info(edited_add_model(no_sigs))
    arrays, _, _ = make_inputs(info)
    assert list(arrays) == [PLACEHOLDER_SIGNATURE] and sorted(arrays[PLACEHOLDER_SIGNATURE]) == ["x", "y"]


# --- delegate log: one split line per graph -----------------------------------------------------------

def test_split_lines_are_summed_over_graphs():
    log = ("ERROR: Following operations are not supported by GPU delegate:\nGATHER_ND: Operation is not supported.\n"
           "3 operations will run on the GPU, and the remaining 2 operations will run on the CPU.\n") * 2
    info = parse_gpu_log(log)
    assert info.splits == [(3, 2), (3, 2)] and (info.gpu_ops, info.cpu_ops) == (6, 4)


# --- silent CPU fallback, through a test double of the runtime ---------------------------------------

def test_gpu_output_identical_to_cpu_is_flagged(tmp_path, monkeypatch):
    """TEST DOUBLE: the 'GPU' fp16 compile silently runs on the CPU, as a delegate that falls back would."""
    def sneaky(model, inputs=None, *, accelerator="gpu", enforce_f32=False, **kw):
        if accelerator == "gpu" and not enforce_f32:
            result = compile_and_run(model, inputs, accelerator="cpu", **kw)
            result.accelerator = "gpu"
            return result
        return compile_and_run(model, inputs, accelerator=accelerator, enforce_f32=enforce_f32, **kw)
    monkeypatch.setattr(checker_mod, "compile_and_run", sneaky)
    report = check_gpu_compatibility(_write(tmp_path, "add.tflite", add_model_bytes()), precisions=("fp16",),
                                     timeout=120)
    entry = report.signatures["serving_default"]["out"]["vs_cpu"]["gpu_fp16"]
    assert entry["bit_identical"] and entry["suspected_cpu_fallback"]
    assert any("suspected silent CPU fallback" in w for w in report.warnings)


# --- CLI ---------------------------------------------------------------------------------------------

def test_cli_invalid_model_exit_code_and_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert cli_main(["check", str(tmp_path / "missing.tflite"), "--json", str(out)]) == 2
    data = json.loads(out.read_text())
    assert data["verdict"] == "INVALID_MODEL" and "no such file" in data["summary"]
    for key in ("unsupported_ops", "residency", "signatures", "suggestions", "environment", "timings"):
        assert key in data
    assert "INVALID_MODEL" in capsys.readouterr().out


def test_reference_of_the_wrong_shape_is_refused_before_any_run(tmp_path):
    with pytest.raises(InputError, match=r"reference for serving_default/out has shape \[5\]"):
        check_gpu_compatibility(_write(tmp_path, "add.tflite", add_model_bytes()), reference={"out": np.zeros(5)})
    with pytest.raises(InputError, match="no output named 'nope'"):
        check_gpu_compatibility(_write(tmp_path, "add.tflite", add_model_bytes()), reference={"nope": np.zeros(5)})


def test_cli_bad_inputs_argument_exit_2(tmp_path, capsys):
    model = _write(tmp_path, "add.tflite", add_model_bytes())
    assert cli_main(["check", str(model), "--inputs", str(tmp_path / "none.npz")]) == 2
    assert "no such .npz" in capsys.readouterr().err


def test_cli_help_documents_flags_and_exit_status():
    env_path = str(REPO / "utilities")
    proc = subprocess.run([sys.executable, "-m", "litert_gpu_toolkit", "check", "--help"], capture_output=True,
                          text=True, env={"PYTHONPATH": env_path, "PATH": ""}, timeout=120)
    assert proc.returncode == 0
    for flag in ("--json", "--inputs", "--reference", "--rtol", "--atol", "--min-corr", "--shape", "--int-range"):
        assert flag in proc.stdout
    assert "Exit status" in proc.stdout and "0 PASS" in proc.stdout


def test_print_report_of_an_invalid_model(tmp_path, capsys):
    report = check_gpu_compatibility(_write(tmp_path, "empty.tflite", b""))
    assert isinstance(report, Report)
    print_report(report)
    out = capsys.readouterr().out
    assert out.startswith("INVALID_MODEL") and "empty file" in out
