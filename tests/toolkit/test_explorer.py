"""Model Explorer overlays (`explorer.py`, `check --explorer`): the JSON is Model Explorer's own node-data form
(rebuilt with its classes it serialises to the same thing), its node ids are the ops Model Explorer's .tflite
adapter shows, and its Python API loads the graph with the overlay."""
import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np

import pytest
from model_explorer import config as explorer_config
from model_explorer.builtin_tflite_flatbuffer_adapter import BuiltinTfliteFlatbufferAdapter
from model_explorer.node_data_builder import GraphNodeData, ModelNodeData, NodeDataResult

from litert_gpu_toolkit.check.explorer import (CPU_REJECTED, GPU, NOT_RUN, UNRESOLVED, block_overlay, explorer_command,
                                         module_path, residency_overlay, write_overlay)
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.runtime.tiny_models import single_op_model_bytes


@pytest.fixture
def one_op_model(tmp_path):
    """A real one-op .tflite (ADD); the fake reports below set its residency."""
    path = tmp_path / "m.tflite"
    path.write_bytes(single_op_model_bytes("ADD", [("x", (1, 4), None), ("y", (1, 4), None)], [("z", (1, 4))]))
    return path


def _report(verdict, rejected=(), gpu_ops=None, cpu_ops=None):
    return SimpleNamespace(verdict=verdict, unsupported_ops=[{"op": op, "reason": why} for op, why in rejected],
                           residency={"gpu_ops": gpu_ops, "cpu_ops": cpu_ops} if gpu_ops is not None else None)


def _as_model_explorer_objects(data: dict) -> ModelNodeData:
    graphs = {}
    for gid, g in data.items():
        fields = {k: v for k, v in g.items() if k != "results"}
        graphs[gid] = GraphNodeData(results={k: NodeDataResult(**r) for k, r in g["results"].items()}, **fields)
    return ModelNodeData(graphsData=graphs)


def _adapter_op_ids(path) -> dict[str, set[str]]:
    collection = BuiltinTfliteFlatbufferAdapter().convert(str(path), {})["graphCollections"][0]
    return {g["id"]: {n["id"] for n in g["nodes"] if n["label"] not in ("pseudo_const", "GraphInputs",
                                                                         "GraphOutputs")}
            for g in collection.graphs}


@pytest.mark.parametrize("report, colour, text", [
    (_report("PASS", gpu_ops=1, cpu_ops=0), GPU, "GPU"),
    (_report("FALLBACK", rejected=[("ADD", "Operation is not supported.")], gpu_ops=0, cpu_ops=1), CPU_REJECTED,
     "ADD: CPU: rejected by the GPU (Operation is not supported.)"),
    (_report("NO_GPU"), NOT_RUN, "not run on the GPU (NO_GPU)"),
])
def test_overlay_is_model_explorer_node_data_on_the_adapters_nodes(one_op_model, tmp_path, report, colour, text):
    data = residency_overlay(one_op_model, report)
    # Model Explorer's own classes take every field and serialise to the same JSON
    rebuilt = json.loads(_as_model_explorer_objects(data).to_json_string())
    assert rebuilt.keys() == data.keys()
    for gid, graph in data.items():
        assert {k: rebuilt[gid][k] for k in graph} == graph
        assert not any(v for k, v in rebuilt[gid].items() if k not in graph)    # the rest: the class's defaults
    # every key is an op node of the graph Model Explorer's .tflite adapter builds, and every op has a value
    assert {g: set(r["results"]) for g, r in data.items()} == _adapter_op_ids(one_op_model)
    (result,) = data["serving_default"]["results"].values()
    assert result == {"value": text, "bgColor": colour}
    # and its Python API loads the graph plus the overlay file
    path = write_overlay(tmp_path / "ex", "m.residency", data)
    cfg = explorer_config().add_model_from_path(str(one_op_model)).add_node_data_from_path(str(path))
    assert cfg.model_sources[0]["url"].endswith("m.tflite") and cfg.node_data_sources == [str(path.resolve())]
    assert f"--node_data_paths={path}" in explorer_command(one_op_model, [path])


def test_fallback_with_unnamed_cpu_ops_says_it_cannot_place_them(one_op_model):
    info = read_model_info(one_op_model)
    data = residency_overlay(info, _report("FALLBACK", rejected=[("GATHER_ND", "no")], gpu_ops=0, cpu_ops=1))
    expected = {"value": "GPU or CPU: not resolved per op", "bgColor": UNRESOLVED}
    assert data["serving_default"]["results"]["0"] == expected


@pytest.mark.gpu
def test_check_explorer_writes_the_overlay_and_prints_the_command(one_op_model, tmp_path, capsys, gpu):
    from litert_gpu_toolkit.cli.main import main

    status = main(["check", str(one_op_model), "--fp16-only", "--explorer", str(tmp_path / "ex")])
    out = capsys.readouterr().out
    assert status == 0, out
    data = json.loads((tmp_path / "ex" / "m.residency.json").read_text())
    assert data["serving_default"]["results"]["0"] == {"value": "GPU", "bgColor": GPU}
    assert "model-explorer" in out and "--node_data_paths=" in out


def test_module_path_reads_litert_torch_scopes():
    name = ("litert_gpu_toolkit.rewrites.functional.GpuRewriteWrapper/mod.named_outputs.<locals>.Outputs_model/"
            "transformers.models.bert.modeling_bert.BertEncoder_encoder/transformers.BertLayer_0/"
            "torch.nn.modules.sparse.Embedding_word_embeddings;3")
    assert module_path(name) == ["model", "encoder", "0", "word_embeddings"]
    assert module_path("arith.constant9") == []


def test_block_overlay_gives_each_op_its_blocks_fp16_error():
    from litert_gpu_toolkit.diagnose.report import BoundaryResult
    from litert_gpu_toolkit.core.metrics import compare
    from litert_gpu_toolkit.core.model_info import ModelInfo, OpInfo, SignatureInfo, TensorInfo

    tensors = [TensorInfo(0, "x", (4,), "float32", False, 0),
               TensorInfo(1, "M/torch.nn.Linear_layers/torch.nn.Linear_0;1", (4,), "float32", False, 0),
               TensorInfo(2, "M/torch.nn.Linear_layers/torch.nn.ReLU_1;", (4,), "float32", False, 0),
               TensorInfo(3, "M/torch.nn.Linear_head;", (4,), "float32", False, 0)]
    ops = [OpInfo(0, "FULLY_CONNECTED", [0], [1]), OpInfo(1, "RELU", [1], [2]), OpInfo(2, "FULLY_CONNECTED", [2], [3])]
    info = ModelInfo(None, 0, ops, [tensors], [SignatureInfo("sig", 0, {"x": tensors[0]}, {"y": tensors[3]})],
                     [[0]], [[3]], subgraph_names=["main"])
    ref = np.linspace(-1, 1, 64, dtype=np.float32)
    noisy = ref + 0.05 * np.cos(np.arange(64, dtype=np.float32))
    rows = [BoundaryResult("layers.0", compare(ref, ref), None, "ok"),
            BoundaryResult("layers.1", compare(noisy, ref), None, "ok"),
            BoundaryResult("", compare(ref, ref), None, "ok")]
    data = block_overlay(info, SimpleNamespace(boundaries=rows))
    results = data["main"]["results"]
    assert results["0"]["value"] == round(1 - rows[0].fp16.corr, 9)
    assert results["1"]["value"] == round(1 - rows[1].fp16.corr, 9) > 0
    assert "2" not in results                     # the head is in no measured block: no value, not a made-up one
    rebuilt = json.loads(_as_model_explorer_objects(data).to_json_string())
    assert rebuilt["main"]["gradient"] == data["main"]["gradient"]


@pytest.mark.slow
def test_bisect_explorer_writes_the_graph_and_the_overlay(gpu, tmp_path):
    script = tmp_path / "build.py"
    script.write_text(textwrap.dedent("""
        import torch, torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
            def forward(self, x):
                return self.layers(x)
        def build():
            torch.manual_seed(0)
            return M(), (torch.randn(1, 4, 8),)
    """))
    ex, report_json = tmp_path / "ex", tmp_path / "b.json"
    out = subprocess.run([sys.executable, "-m", "litert_gpu_toolkit", "bisect", f"{script}:build", "--no-fp32",
                          "--no-cpu", "--json", str(report_json), "--explorer", str(ex)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "--node_data_paths=" in out.stdout
    data = json.loads((ex / "build.bisect.json").read_text())
    corr = {b["name"]: b["fp16"]["corr"] for b in json.loads(report_json.read_text())["boundaries"]}
    (gid,) = data
    assert set(data[gid]["results"]) <= _adapter_op_ids(ex / "build.tflite")[gid]
    values = sorted({r["value"] for r in data[gid]["results"].values()})
    assert all(any(v == round(1 - c, 9) for c in corr.values()) for v in values)
    assert len(data[gid]["results"]) >= 2           # the Linear / ReLU ops of the measured blocks carry a value
