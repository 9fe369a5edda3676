"""Quantized weights (`litert_gpu_toolkit.quantize`): the forms LiteRT's quantizer writes, the bit-exact `fc_rank2`
rewrite, the per-type / per-layer fallback, `convert_for_gpu(weights=...)` and the `quantize` command.

GPU tests ran on llvmpipe (software Vulkan), ai-edge-litert 2.3.0: each wall is shown failing as the quantizer
writes it, then passing through `quantize_for_gpu`."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from litert_gpu_toolkit import ConvertOptions, convert_for_gpu
from litert_gpu_toolkit.check.checker import check_gpu_compatibility
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.lint.mobile import lint_for_mobile
from litert_gpu_toolkit.quantize import QuantizeResult, WeightOp, quantize_for_gpu, quantize_tflite, weight_ops
from litert_gpu_toolkit.quantize.fc_rank2 import fc_rank2

ROOT = Path(__file__).resolve().parents[3]


class Residual(nn.Module):
    """An embedding and two transformer-style residual Linears on [1, S, C]: the shape of every encoder."""

    def __init__(self):
        super().__init__()
        self.emb, self.a, self.b = nn.Embedding(256, 64), nn.Linear(64, 64), nn.Linear(64, 64)

    def forward(self, ids):
        x = self.emb(ids)
        x = x + torch.relu(self.a(x))
        return x + self.b(x)


class Outlier(nn.Module):
    """Two Linears at rank 2; `b` has one huge weight per output channel on an input feature that is always 0, so
    per-channel int8 rounds every other weight of `b` to zero (the output is then garbage) while `a` is fine."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(64, 64), nn.Linear(64, 64)
        with torch.no_grad():
            self.b.weight[:, 0] = 1000.0

    def forward(self, x):
        h = torch.relu(self.a(x))
        h = torch.cat([torch.zeros_like(h[:, :1]), h[:, 1:]], dim=1)   # feature 0 is always 0
        return self.b(h)


def _convert(model, inputs, path: Path) -> Path:
    import litert_torch

    litert_torch.convert(model.eval(), inputs).export(str(path))
    return path


def _cpu(data: bytes, **feeds) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_content=data).get_signature_runner()
    return next(iter(runner(**feeds).values()))


@pytest.fixture(scope="module")
def residual(tmp_path_factory):
    torch.manual_seed(0)
    model = Residual().eval()
    ids = torch.randint(0, 256, (1, 8), dtype=torch.int32)
    path = _convert(model, (ids,), tmp_path_factory.mktemp("q") / "residual.tflite")
    with torch.no_grad():
        ref = model(ids).numpy()
    return model, ids, path, ref


def test_fc_rank2_is_bit_exact_and_moves_every_rank3_fc(residual):
    _, ids, path, _ = residual
    data = path.read_bytes()
    out, count = fc_rank2(data)
    info = read_model_info(out)
    fcs = [op for op in info.ops if op.op == "FULLY_CONNECTED"]
    assert count == len(fcs) == 2
    assert all(info.tensor(op.inputs[0]).rank == 2 for op in fcs)
    feeds = {"args_0": ids.numpy()}
    assert np.array_equal(_cpu(out, **feeds), _cpu(data, **feeds))   # bound: bit-exact (same arithmetic)
    assert fc_rank2(out) == (out, 0)                                 # nothing left to move


def test_forms_write_what_they_say(residual):
    _, _, path, _ = residual
    int8 = read_model_info(quantize_tflite(path, {"FULLY_CONNECTED": "int8", "EMBEDDING_LOOKUP": "int8"}))
    assert {int8.tensor(op.inputs[1]).dtype for op in int8.ops if op.op in ("FULLY_CONNECTED", "EMBEDDING_LOOKUP")} \
        == {"int8"} and not int8.has_op("DEQUANTIZE")
    fp16 = read_model_info(quantize_tflite(path, {"FULLY_CONNECTED": "fp16"}))
    assert fp16.has_op("DEQUANTIZE") and {t.dtype for t in fp16.tensors[0] if t.is_constant} >= {"float16"}
    int4 = read_model_info(quantize_tflite(path, {"FULLY_CONNECTED": "int4"}))
    assert {int4.tensor(op.inputs[1]).dtype for op in int4.ops if op.op == "FULLY_CONNECTED"} == {"int4"}
    with pytest.raises(ValueError, match="unknown weight form"):
        quantize_tflite(path, {"FULLY_CONNECTED": "int3"})


def test_keep_float_leaves_the_named_layer_float(residual):
    _, _, path, _ = residual
    ops = weight_ops(read_model_info(path))
    fcs = [w for w in ops if w.op == "FULLY_CONNECTED"]
    info = read_model_info(quantize_tflite(path, {"FULLY_CONNECTED": "int8"}, keep_float=(fcs[1].name,)))
    dtypes = [info.tensor(op.inputs[1]).dtype for op in info.ops if op.op == "FULLY_CONNECTED"]
    assert sorted(dtypes) == ["float32", "int8"]


def test_weight_ops_and_modes(residual):
    _, _, path, _ = residual
    ops = weight_ops(read_model_info(path))
    assert sorted(w.op for w in ops) == ["EMBEDDING_LOOKUP", "FULLY_CONNECTED", "FULLY_CONNECTED"]
    with pytest.raises(ValueError, match="weights must be one of"):
        ConvertOptions(weights="int3")
    with pytest.raises(ValueError, match="weights_min_corr"):
        ConvertOptions(weights="int8", weights_min_corr=1.5)


def test_the_result_line_names_what_stayed_float_and_why():
    ops = [WeightOp("FULLY_CONNECTED", "q_out", "M/torch.nn.modules.linear.Linear_encoder.0.q;3", 10, 1),
           WeightOp("FULLY_CONNECTED", "output_0", "M/torch.nn.modules.linear.Linear_encoder.0.k;4", 10, 2)]
    r = QuantizeResult("int8", None, True, forms={ops[0].name: "int8"}, kept_float={ops[1].name: "corr 0.5"},
                       ops=ops, left={"lookup": "the table is a wall"},
                       weights={"lookup": "M/torch.nn.modules.sparse.Embedding_emb;1"})
    assert r.line() == ("int8: 1 of 3 weight tensors (1 int8 per channel on the op (dynamic-range)); kept float: "
                        "encoder.0.k (corr 0.5); emb (the table is a wall)")
    failed = QuantizeResult("int4", None, False, ops=ops, why="NUMERICS_FAIL: ...")
    assert failed.line().startswith("int4: not applied, the float file is written")


def test_lint_names_the_rank3_integer_fc(residual):
    _, _, path, _ = residual
    raw = quantize_tflite(path, {"FULLY_CONNECTED": "int8"})
    found = [f for f in lint_for_mobile(raw) if f.symptom == "quantized_fc_rank3"]
    assert len(found) == 2 and found[0].rewrites == ["fc_rank2"] and "9277" in found[0].upstream
    assert not [f for f in lint_for_mobile(quantize_tflite(fc_rank2(path.read_bytes())[0],
                                                           {"FULLY_CONNECTED": "int8"}))
                if f.symptom == "quantized_fc_rank3"]


def test_cli_refuses_writing_its_input(residual, tmp_path):
    _, _, path, _ = residual
    cmd = [sys.executable, "-m", "litert_gpu_toolkit", "quantize", str(path), "-o", str(path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 2 and "an input of this command" in out.stderr
    out = subprocess.run(cmd[:5] + ["-o", str(tmp_path / "x.tflite"), "--weights", "int3"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 2 and "invalid choice" in out.stderr


# --------------------------------------------------------------------------------------------------------- GPU

def test_rank3_integer_fc_is_wrong_on_the_gpu_and_fc_rank2_fixes_it(residual, gpu, tmp_path):
    model, ids, path, ref = residual
    feeds = {"args_0": ids.numpy()}
    raw = tmp_path / "raw.tflite"
    raw.write_bytes(quantize_tflite(path, {"FULLY_CONNECTED": "int8"}))
    assert check_gpu_compatibility(raw, inputs=feeds, precisions=("fp16",)).verdict == "NUMERICS_FAIL"
    result = quantize_for_gpu(path, tmp_path / "int8.tflite", "int8", inputs=feeds,
                              reference={"output_0": ref})
    assert result.ok and result.rank2 == 2 and len(result.forms) == 3 and not result.kept_float, result.summary()
    assert result.report.residency["line"].startswith("GPU residency: 9/9 ops")
    assert min(result.fidelity.values()) > 0.999                   # GPU fp16 vs torch
    assert result.size < 0.4 * result.size_float


def test_fp16_leaves_the_embedding_table_float(residual, gpu, tmp_path):
    _, ids, path, ref = residual
    feeds = {"args_0": ids.numpy()}
    wall = tmp_path / "emb16.tflite"
    wall.write_bytes(quantize_tflite(path, {"EMBEDDING_LOOKUP": "fp16"}))
    assert check_gpu_compatibility(wall, inputs=feeds, precisions=("fp16",)).verdict == "FALLBACK"
    result = quantize_for_gpu(path, tmp_path / "fp16.tflite", "fp16", inputs=feeds, reference={"output_0": ref})
    assert result.ok and len(result.forms) == 2 and "Embedding" in "".join(result.left), result.summary()
    assert "emb (an fp16 table" in result.line()


@pytest.fixture()
def outlier(tmp_path):
    """(converted file, input, torch output) of `Outlier`."""
    torch.manual_seed(0)
    model, x = Outlier().eval(), torch.randn(16, 64)
    path = _convert(model, (x,), tmp_path / "outlier.tflite")
    with torch.no_grad():
        return path, x, model(x).numpy()


def test_a_layer_that_breaks_accuracy_stays_float(gpu, outlier, tmp_path):
    path, x, ref = outlier
    result = quantize_for_gpu(path, tmp_path / "int8.tflite", "int8", inputs={"args_0": x.numpy()},
                              reference={"output_0": ref})
    assert result.ok, result.summary()
    assert len(result.forms) == 1 and len(result.kept_float) == 1, result.summary()
    assert "corr" in next(iter(result.kept_float.values()))
    assert "kept float: b (" in result.line()


def test_never_worse_than_the_float_file(gpu, outlier, tmp_path):
    path, x, ref = outlier
    out = tmp_path / "int8.tflite"
    result = quantize_for_gpu(path, out, "int8", inputs={"args_0": x.numpy()}, reference={"output_0": ref},
                              min_corr=0.9999999)                # a floor no int8 weight can keep
    assert not result.ok and out.read_bytes() == path.read_bytes() and "GPU vs source corr" in result.why


def test_convert_for_gpu_weights_int8(gpu, tmp_path):
    torch.manual_seed(0)
    model = Residual().eval()
    ids = torch.randint(0, 256, (1, 8))
    result = convert_for_gpu(model, (ids,), tmp_path / "m.tflite", weights="int8")
    assert result.ok and result.quantized is not None and result.quantized.ok, result.summary()
    assert "weights int8: 3 of 3 weight tensors" in result.summary()
    info = read_model_info(tmp_path / "m.tflite")
    assert {info.tensor(op.inputs[1]).dtype for op in info.ops if op.op == "FULLY_CONNECTED"} == {"int8"}


def test_cli_quantize_writes_the_file_and_json(residual, gpu, tmp_path):
    _, _, path, _ = residual
    out, js = tmp_path / "q.tflite", tmp_path / "q.json"
    proc = subprocess.run([sys.executable, "-m", "litert_gpu_toolkit", "quantize", str(path), "-o", str(out),
                           "--weights", "int8", "--json", str(js)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(js.read_text())
    assert record["ok"] and record["line"].startswith("int8: 3 of 3") and out.stat().st_size == record["size"]


def test_lint_names_a_dequantized_weight_but_not_fp16_into_an_fc(residual):
    _, _, path, _ = residual
    found = [f for f in lint_for_mobile(quantize_tflite(path, {"FULLY_CONNECTED": "int8-deq"}))
             if f.symptom == "dequantized_weight"]
    assert len(found) == 2 and found[0].rewrites == ["quantize_for_gpu"] and "9523" in found[0].upstream
    table = [f for f in lint_for_mobile(quantize_tflite(path, {"EMBEDDING_LOOKUP": "fp16", "FULLY_CONNECTED": "fp16"}))
             if f.symptom == "dequantized_weight"]
    assert len(table) == 1 and "EMBEDDING_LOOKUP" in table[0].why     # the fp16 FC weights are fine


def test_a_recipes_quantized_file_is_named_for_its_mode():
    from argparse import Namespace

    from litert_gpu_toolkit.recipe.scripts import quantized_path

    assert quantized_path(Path("a/encoder.tflite"), Namespace(quantize="int8")) == Path("a/encoder_int8.tflite")
    assert quantized_path(Path("a/encoder.tflite"), Namespace(quantize="fp32")) == Path("a/encoder.tflite")
    assert quantized_path(Path("a/m_int8_embedder.tflite"), Namespace(quantize="int8")) == \
        Path("a/m_int8_embedder.tflite")
    assert quantized_path(Path("a/m_int4.tflite"), Namespace(quantize="int8")) == Path("a/m_int4_int8.tflite")


def test_agreement_judges_a_scalar_output_by_its_relative_error():
    from litert_gpu_toolkit.quantize.gpu import agreement

    assert agreement(np.array([0.901]), np.array([0.9])) == pytest.approx(1 - 0.001 / 0.9)
    assert agreement(np.array([0.9]), np.array([0.9])) == 1.0
    assert agreement(np.array([np.nan]), np.array([0.9])) != agreement(np.array([np.nan]), np.array([0.9]))   # nan
    x = np.linspace(0, 1, 64)
    assert agreement(2 * x + 1, x) == pytest.approx(1.0)             # many values: Pearson's r


def test_the_per_layer_search_judges_each_chunk_as_the_final_check_does():
    """A layer set grown on fp16 runs alone can fail the final fp16 + fp32 check, which then keeps nothing of the
    type (timm FasterNet-T0's int8 row). Stub search: any set with layer `c` quantized passes fp16 and fails fp32."""
    from litert_gpu_toolkit.quantize.gpu import Outcome, _grow

    class Search:
        out_of_time = False

        def attempt(self, plan, keep=frozenset(), final=False):
            quantized = {"a", "b", "c"} - set(keep)
            return Outcome(not ("c" in quantized and final), "GPU vs source corr 0.98 < 0.99 (gpu_fp32)")

    layers = [WeightOp("CONV_2D", n, f"{n}.w", 64 - i, i) for i, n in enumerate("abc")]
    why: dict = {}
    assert sorted(_grow(Search(), "CONV_2D", "int8", layers, why)) == ["a", "b"]
    assert "gpu_fp32" in why["c"]


def test_a_kept_float_layer_is_named_by_its_module_path():
    """A tensor name's scopes give the module path ('3' alone names no layer); the wrappers' 'model' is dropped."""
    from litert_gpu_toolkit.quantize.gpu import short_name

    name = ("litert_gpu_toolkit.rewrites.functional.GpuRewriteWrapper/m.ZooWrapper_model/timm.models.x.Net_model/"
            "torch.nn.modules.container.Sequential_stages/timm.models.x.Block_1/torch.nn.modules.container."
            "Sequential_mlp/torch.nn.modules.conv.Conv2d_3;other")
    assert short_name(name) == "stages.1.mlp.3"
    assert short_name("x/torch.nn.modules.linear.Linear_encoder.layer.0.query;y") == "encoder.layer.0.query"
    assert short_name("arith.constant1") == "arith.constant1"
