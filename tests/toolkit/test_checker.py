"""check_gpu_compatibility on the GPU: one tiny converted model per verdict, plus NO_GPU, crash and hang.

Facts asserted here were measured on llvmpipe (software Vulkan), ai-edge-litert 2.3.0: GATHER_ND is
rejected; a rank-5 RESHAPE is rejected with "Tensor dimensions must be less than 5"; RMSNorm on x*300
returns all zeros in fp16 and is exact with enforce_f32; ((x*300)**2).mean(-1) is inf in fp16.
"""
import json
import re

import numpy as np
import pytest

from litert_gpu_toolkit import check_gpu_compatibility, print_report
from litert_gpu_toolkit.__main__ import main as cli_main
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.runtime.tiny_models import add_model_bytes

from test_inputs import edited_add_model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Converted once per module: {name: path}."""
    import litert_torch
    import torch

    from litert_gpu_toolkit.lowering.export import export_tflite

    torch.manual_seed(0)

    class Clean(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x):
            return torch.relu(self.conv(x))

    class IndexSelect(torch.nn.Module):  # x[:, idx] -> GATHER_ND
        def __init__(self):
            super().__init__()
            self.register_buffer("idx", torch.tensor([0, 2, 3, 5]))

        def forward(self, x):
            return x[:, self.idx] * 2.0

    class Rank5(torch.nn.Module):
        def forward(self, x):
            return (x.reshape(1, 2, 4, 4, 16) * 2.0).reshape(1, 8, 4, 16)

    class LoudRMSNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.RMSNorm(64)

        def forward(self, x):
            return self.norm(x * 300.0)

    class MeanOfSquares(torch.nn.Module):
        def forward(self, x):
            return ((x * 300.0) ** 2).mean(-1)

    class TwoOutputs(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2.0, x.sum(-1)

    class Embed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(30, 8)

        def forward(self, x, ids):
            return self.emb(ids) + x

    root = tmp_path_factory.mktemp("checker_models")
    out = {}
    for name, module, args in [
        ("clean", Clean(), (torch.randn(1, 3, 16, 16),)),
        ("gather", IndexSelect(), (torch.randn(1, 8, 16),)),
        ("rank5", Rank5(), (torch.randn(1, 8, 4, 16),)),
        ("rmsnorm", LoudRMSNorm(), (torch.randn(1, 8, 64),)),
        ("meansq", MeanOfSquares(), (torch.randn(1, 8, 64),)),
    ]:
        out[name] = export_tflite(module.eval(), args, root / f"{name}.tflite")
    multi = (
        litert_torch.signature("two_outputs", TwoOutputs().eval(), (torch.randn(1, 4, 8),))
        .signature("embed", Embed().eval(), (torch.randn(1, 6, 8), torch.randint(0, 30, (1, 6))))
        .convert()
    )
    multi.export(str(root / "multi.tflite"))
    out["multi"] = root / "multi.tflite"
    return out


def _lines(report, **kw):
    import io

    buf = io.StringIO()
    print_report(report, file=buf, **kw)
    return buf.getvalue().splitlines()


def test_clean_model_passes_with_full_residency(gpu, models):
    report = check_gpu_compatibility(models["clean"])
    n = read_model_info(models["clean"]).num_ops
    assert report.verdict == "PASS", report.summary
    assert report.residency["line"] == f"GPU residency: {n}/{n} ops, 1 partition (strict GPU)"
    assert (report.residency["gpu_ops"], report.residency["total_ops"], report.residency["partitions"]) == (n, n, 1)
    assert list(report.runs) == ["cpu", "gpu_fp16", "gpu_fp32"]  # no fallback compile when none is needed
    metrics = report.signatures["serving_default"]["output_0"]["vs_cpu"]
    assert metrics["gpu_fp16"]["corr"] > 0.999 and not metrics["gpu_fp16"]["bit_identical"]  # real fp16 drift
    assert metrics["gpu_fp32"]["within_tolerance"] and not report.unsupported_ops and not report.suggestions
    env = report.environment
    assert env["ai_edge_litert"] and env["gpu_adapter"] and env["gpu_backend"]
    if env["software_gpu"]:
        assert "software GPU" in env["gpu_note"]
    for step in ("static", "inputs", "cpu", "gpu_fp16", "gpu_fp32", "compare", "total"):
        assert report.timings[step] >= 0
    data = json.loads(json.dumps(report.to_dict()))
    assert data["verdict"] == "PASS" and data["residency"]["gpu_ops"] == n
    lines = _lines(report)
    assert len(lines) <= 20 and lines[0].startswith("PASS") and report.residency["line"] in lines[1]


def test_index_select_names_gather_nd_and_still_checks_numbers(gpu, models):
    report = check_gpu_compatibility(models["gather"])
    assert report.verdict == "FALLBACK", report.summary
    assert [(u["op"], u["reason"]) for u in report.unsupported_ops] == [("GATHER_ND", "Operation is not supported.")]
    assert re.fullmatch(r"\d+/\d+ ops on GPU, [1-9]\d* on CPU", report.residency["line"])
    assert report.residency["gpu_ops"] + report.residency["cpu_ops"] == report.residency["total_ops"]
    assert "gpu_fp16+cpu" in report.runs and "gpu_fp32" not in report.runs  # strict fp32 would fail the same way
    assert report.signatures["serving_default"]["output_0"]["vs_cpu"]["gpu_fp16+cpu"]["within_tolerance"]
    assert report.suggestions[0]["symptom"] == "gather_nd" and "patch_grid_sample" in report.suggested_rewrites
    text = "\n".join(_lines(report))
    assert "GATHER_ND" in text and "Operation is not supported." in text and "ops on GPU" in text


def test_rank5_reshape_names_the_rank_wall(gpu, models):
    report = check_gpu_compatibility(models["rank5"], precisions=("fp16",))
    assert report.verdict == "FALLBACK", report.summary
    assert all("dimensions must be less than 5" in u["reason"] for u in report.unsupported_ops)
    wall = next(s for s in report.suggestions if s["symptom"] == "rank_gt_4")
    assert any("[1, 2, 4, 4, 16]" in e for e in wall["evidence"])  # the rank-5 tensor, with its producer
    assert report.static["high_rank_tensors"][0]["producer"] == "RESHAPE"


def test_rmsnorm_on_loud_activations_is_all_zero_in_fp16(gpu, models):
    report = check_gpu_compatibility(models["rmsnorm"])
    assert report.verdict == "NUMERICS_FAIL", report.summary
    vs_cpu = report.signatures["serving_default"]["output_0"]["vs_cpu"]
    assert vs_cpu["gpu_fp16"]["symptom"] == "all_zero" and vs_cpu["gpu_fp16"]["all_zero"]
    assert vs_cpu["gpu_fp32"]["within_tolerance"]  # enforce_f32 is exact: an fp16 range problem
    assert report.residency["line"].endswith("(strict GPU)")
    assert report.suggestions[0]["symptom"] == "fp16_silent_zero"
    assert report.suggested_rewrites[0] == "patch_rmsnorm"
    assert "all-zero" in report.summary


def test_mean_of_squares_is_non_finite_in_fp16(gpu, models):
    report = check_gpu_compatibility(models["meansq"])
    assert report.verdict == "NUMERICS_FAIL", report.summary
    vs_cpu = report.signatures["serving_default"]["output_0"]["vs_cpu"]
    assert vs_cpu["gpu_fp16"]["symptom"] == "nonfinite" and vs_cpu["gpu_fp16"]["nonfinite"] > 0
    assert vs_cpu["gpu_fp32"]["within_tolerance"]
    assert "fp16_overflow" in [s["symptom"] for s in report.suggestions]
    text = "\n".join(_lines(report))
    assert "nan/inf" in text and "patch_safe_layernorm" in text


def test_multiple_signatures_outputs_and_integer_inputs(gpu, models):
    report = check_gpu_compatibility(models["multi"])
    assert report.verdict == "PASS", report.summary
    assert sorted(report.signatures["two_outputs"]) == ["output_0", "output_1"]
    assert list(report.signatures["embed"]) == ["output_0"]
    ids = next(s for s in report.inputs if s["signature"] == "embed" and s["dtype"] == "int32")
    assert ids["source"].startswith("random int in [0, 30)") and "EMBEDDING_LOOKUP" in ids["source"]
    assert "1 partition in each of 2 graphs" in report.residency["line"]


def test_reference_from_the_source_model(gpu, models, tmp_path):
    """`reference=` compares CPU and GPU with the source model's output; a wrong one is the conversion's fault."""
    first = check_gpu_compatibility(models["clean"], precisions=("fp16",))
    source_out = first.outputs["cpu"]["serving_default"]["output_0"]  # stands in for torch's output
    good = check_gpu_compatibility(models["clean"], reference={"output_0": source_out}, precisions=("fp16",))
    ref = good.signatures["serving_default"]["output_0"]["vs_reference"]
    assert good.verdict == "PASS" and set(ref) == {"cpu", "gpu_fp16"} and ref["gpu_fp16"]["corr"] > 0.999
    bad = check_gpu_compatibility(
        models["clean"], reference={"serving_default": {"output_0": -source_out}}, precisions=("fp16",)
    )
    assert bad.verdict == "NUMERICS_FAIL"
    assert any("the conversion changed the numbers" in p for p in bad.problems)
    assert bad.suggestions[0]["symptom"] == "conversion_mismatch"


def test_cli_with_npz_inputs_and_reference(gpu, models, tmp_path, capsys):
    x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "in.npz", args_0=x)
    first = check_gpu_compatibility(models["clean"], inputs={"args_0": x}, precisions=("fp16",))
    np.savez(tmp_path / "ref.npz", output_0=first.outputs["cpu"]["serving_default"]["output_0"])
    out = tmp_path / "report.json"
    code = cli_main(
        [
            "check",
            str(models["clean"]),
            "--inputs",
            str(tmp_path / "in.npz"),
            "--reference",
            str(tmp_path / "ref.npz"),
            "--json",
            str(out),
            "--fp16-only",
        ]
    )
    assert code == 0, capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["verdict"] == "PASS" and data["inputs"][0]["source"] == "caller array"
    assert data["signatures"]["serving_default"]["output_0"]["vs_reference"]["cpu"]["bit_identical"]
    assert cli_main(["check", str(models["gather"]), "--fp16-only"]) == 1


def test_dynamic_dims_resolve_to_one_or_the_callers_shape(gpu, tmp_path):
    def dynamic(m):
        for t in m.subgraphs[0].tensors:
            t.shapeSignature = [1, -1, 8, 4]

    path = tmp_path / "dyn.tflite"
    path.write_bytes(edited_add_model(dynamic))
    default = check_gpu_compatibility(path, precisions=("fp16",))
    assert default.verdict == "PASS" and default.inputs[0]["shape"] == [1, 1, 8, 4]
    assert default.signatures["serving_default"]["out"]["shape"] == [1, 1, 8, 4]
    chosen = check_gpu_compatibility(path, shapes={"x": (1, 3, 8, 4), "y": (1, 3, 8, 4)}, precisions=("fp16",))
    assert chosen.verdict == "PASS" and chosen.signatures["serving_default"]["out"]["shape"] == [1, 3, 8, 4]


def test_model_without_signatures_is_checked(gpu, tmp_path):
    def no_sigs(m):
        m.signatureDefs = []

    path = tmp_path / "nosig.tflite"
    path.write_bytes(edited_add_model(no_sigs))
    report = check_gpu_compatibility(path, precisions=("fp16",))
    assert report.verdict == "PASS" and any("no signature defs" in w for w in report.warnings)


def test_no_gpu_when_the_vulkan_driver_is_hidden(tmp_path, monkeypatch, capsys):
    """Needs no GPU: the Vulkan loader is pointed at a driver file that does not exist."""
    path = tmp_path / "add.tflite"
    path.write_bytes(add_model_bytes())
    monkeypatch.setenv("VK_ICD_FILENAMES", str(tmp_path / "no_such_icd.json"))
    report = check_gpu_compatibility(path)
    assert report.verdict == "NO_GPU", report.summary
    assert list(report.runs) == ["cpu", "gpu_fp16"]  # no pointless fallback / fp32 compiles
    assert "No adapters found" in report.log_tail or "no drivers" in report.summary.lower()
    assert cli_main(["check", str(path)]) == 3


def test_gpu_crash_is_reported_not_raised(gpu, tmp_path, monkeypatch):
    path = tmp_path / "add.tflite"
    path.write_bytes(add_model_bytes())
    monkeypatch.setenv("LITERT_GPU_TOOLKIT_TEST_FAULT", "crash@gpu")  # test double: GPU children abort
    report = check_gpu_compatibility(path, precisions=("fp16",), timeout=120)
    assert report.verdict == "COMPILE_FAIL"
    assert report.runs["cpu"]["status"] == "ok" and report.runs["gpu_fp16"]["status"] == "crash"
    assert "SIGABRT" in report.summary and "injecting a crash" in report.log_tail
    assert "Selected adapter" in report.log_tail or "WebGPU" in report.log_tail  # the native lines before it


def test_gpu_hang_is_reported_not_raised(gpu, tmp_path, monkeypatch):
    path = tmp_path / "add.tflite"
    path.write_bytes(add_model_bytes())
    monkeypatch.setenv("LITERT_GPU_TOOLKIT_TEST_FAULT", "hang@gpu")  # test double: GPU children hang
    report = check_gpu_compatibility(path, timeout=15)
    assert report.verdict == "COMPILE_FAIL"
    assert report.runs["gpu_fp16"]["status"] == "timeout" and "did not finish within 15 s" in report.summary
    assert list(report.runs) == ["cpu", "gpu_fp16"]  # a hang is not retried


def _windowed_conv_model(tmp_path):
    """A 3x3 VALID conv over an input whose height is dynamic ([1, -1, 8, 4]): at the default guess of 1 the
    output height would be negative, so LiteRT's CPU cannot prepare it (the case of openWakeWord's shipped
    melspectrogram.tflite, whose [-1, -1] waveform input needs at least one STFT window of samples)."""
    from ai_edge_litert import schema_py_generated as schema

    from litert_gpu_toolkit.runtime.tiny_models import single_op_model_bytes

    options = schema.Conv2DOptionsT()
    options.padding, options.strideH, options.strideW = schema.Padding.VALID, 1, 1
    data = single_op_model_bytes("CONV_2D", [("x", (1, 8, 8, 4), None),
                                             ("w", (2, 3, 3, 4), np.full((2, 3, 3, 4), 0.1, np.float32)),
                                             ("b", (2,), np.zeros(2, np.float32))],
                                 [("out", (1, 6, 6, 2))], options=options, options_type="Conv2DOptions")
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    model.subgraphs[0].tensors[0].shapeSignature = [1, -1, 8, 4]
    model.subgraphs[0].tensors[3].shapeSignature = [1, -1, 6, 2]
    import flatbuffers

    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path = tmp_path / "windowed.tflite"
    path.write_bytes(bytes(builder.Output()))
    return path


def test_guessed_dynamic_inputs_only_where_the_checker_chose_the_shape(tmp_path):
    """No runtime: which inputs the retry would lengthen, and to what (a leading dynamic dim stays 1)."""
    from litert_gpu_toolkit.check.checker import DYNAMIC_RETRY_DIM, _guessed_dynamic_inputs

    info = read_model_info(_windowed_conv_model(tmp_path))
    assert _guessed_dynamic_inputs(info, None, None) == {"serving_default/x": (1, DYNAMIC_RETRY_DIM, 8, 4)}
    assert _guessed_dynamic_inputs(info, None, {"x": (1, 5, 8, 4)}) == {}             # the caller chose it
    assert _guessed_dynamic_inputs(info, {"x": np.zeros((1, 5, 8, 4), np.float32)}, None) == {}
    static = read_model_info(_write_add(tmp_path))
    assert _guessed_dynamic_inputs(static, None, None) == {}


def _write_add(tmp_path):
    path = tmp_path / "add.tflite"
    path.write_bytes(add_model_bytes())
    return path


def test_dynamic_length_too_short_to_run_is_retried_longer(gpu, tmp_path):
    path = _windowed_conv_model(tmp_path)
    report = check_gpu_compatibility(path, precisions=("fp16",))
    assert report.verdict == "PASS", report.summary
    assert report.inputs[0]["shape"] == [1, 1024, 8, 4]
    assert report.warnings[0].startswith("the dynamic dimensions set to 1 could not run on the CPU")
    assert "--shape" in report.warnings[0]
    chosen = check_gpu_compatibility(path, shapes={"x": (1, 2, 8, 4)}, precisions=("fp16",))
    assert chosen.verdict == "INVALID_MODEL", "a shape the caller chose is never replaced"
    assert "--shape" not in chosen.summary
