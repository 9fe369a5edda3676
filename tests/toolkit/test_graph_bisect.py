"""The graph bisect: a .tflite cut op by op, each prefix strictly on the GPU against LiteRT's CPU, names the first
op the GPU gets wrong and its class (fp16 precision vs GPU miscompute). GPU tests: llvmpipe (software Vulkan),
ai-edge-litert 2.3.0."""
import numpy as np
import pytest
import torch
import torch.nn as nn

from litert_gpu_toolkit.diagnose.graph_bisect import ONE, GraphBisectError, cut, first_wrong_op, live_after, _load
from litert_gpu_toolkit.lowering.export import export_tflite

torch.manual_seed(0)


class ExpOverflow(nn.Module):
    """exp(12 relu(a x)) passes 65504 for a x > 0.92: inf in fp16, right in fp32."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 8)

    def forward(self, x):
        return self.b(torch.exp(torch.relu(self.a(x)) * 12.0) * 1e-6)


class ReturnedFc(nn.Module):
    """A FULLY_CONNECTED result returned and also fed to a MUL by a constant: wrong on the GPU in fp16 and fp32 alike
    (the runtime-walls suite's `returned_fc`, every version measured)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x.reshape(1, 64, 4))
        return y, y * 2.0


class Right(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 8)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("graph_bisect")
    out = {}
    for model, x in ((ExpOverflow(), torch.randn(1, 8, 16)), (ReturnedFc(), torch.randn(1, 8, 8, 4)),
                     (Right(), torch.randn(1, 8, 16))):
        path = folder / f"{type(model).__name__}.tflite"
        export_tflite(model.eval(), (x,), path)
        out[type(model).__name__] = (path, model.eval(), x)
    return out


def test_a_cut_is_the_prefix_with_its_live_values_as_outputs(files):
    """Cut after each op: the prefix model runs on LiteRT's CPU and its outputs are exactly the torch values live
    across the cut (here: the cut after the FULLY_CONNECTED returns y, the cut after the MUL returns y and 2y)."""
    from ai_edge_litert.interpreter import Interpreter

    path, model, x = files["ReturnedFc"]
    data = path.read_bytes()
    _, parsed = _load(data)
    ops = parsed.subgraphs[0].operators
    with torch.no_grad():
        y, y2 = model(x)
    values = {"reshaped input": x.reshape(1, 64, 4), "y": y, "2y": y2}
    seen = []
    for k in range(len(ops)):
        body, live = cut(data, k)
        assert live == live_after(parsed, k) and live
        interp = Interpreter(model_content=body)
        runner = interp.get_signature_runner()
        names = interp.get_signature_list()["serving_default"]["inputs"]
        assert names[-1] == ONE                       # the runtime 1.0 every cut value is multiplied by
        outs = runner(**{names[0]: x.numpy(), ONE: np.ones([1], np.float32)})
        assert len(outs) == len(live)
        names = {n for value in outs.values() for n, ref in values.items()
                 if np.allclose(value.reshape(ref.shape), ref.numpy(), atol=1e-5)}
        assert len(names) == len(outs), (k, names)
        seen.append(names)
    assert seen[-1] == {"y", "2y"} and "y" in seen[-2]


def test_a_file_without_one_subgraph_is_refused_with_a_reason(tmp_path):
    path = tmp_path / "empty.tflite"
    path.write_bytes(_empty_model())
    with pytest.raises(ValueError, match="no subgraphs"):       # InvalidModelError, from the model reader
        first_wrong_op(path, {})
    with pytest.raises(GraphBisectError, match="0 subgraphs"):
        cut(_empty_model(), 0)


def _empty_model() -> bytes:
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT()
    model.version, model.subgraphs, model.buffers, model.operatorCodes = 3, [], [schema.BufferT()], []
    b = flatbuffers.Builder(64)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


@pytest.mark.gpu
def test_graph_bisect_names_the_fp16_overflow_op(gpu, files):
    path, _, x = files["ExpOverflow"]
    fault = first_wrong_op(path, {"args_0": x.numpy()})
    print(f"\n[llvmpipe] {fault.line()}")
    assert fault is not None and fault.op == "EXP" and fault.kind == "fp16 precision", fault
    assert not fault.returned_and_read
    assert "non-finite" in fault.fp16 and fault.fp32.startswith("corr 1.0")


@pytest.mark.gpu
def test_graph_bisect_names_the_miscomputed_value_and_says_gpu_miscompute(gpu, files):
    path, _, x = files["ReturnedFc"]
    fault = first_wrong_op(path, {"args_0": x.numpy()}, plain_gpu_ops=set())
    print(f"\n[llvmpipe] {fault.line()}")
    # wrong as the file is, right once every output is returned through an op of its own: the returned FC
    assert fault.kind == "GPU miscompute" and fault.op == "FULLY_CONNECTED", fault
    assert fault.wrong_tensor == fault.tensor and len(fault.probes) == 2
    assert fault.moved_by_rewrites is True and "moved it onto the GPU" in fault.line()
    assert fault.returned_and_read and "output-aliasing wall" in fault.line()


@pytest.mark.gpu
def test_graph_bisect_of_a_right_file_finds_nothing(gpu, files):
    path, _, x = files["Right"]
    assert first_wrong_op(path, {"args_0": x.numpy()}) is None


@pytest.mark.gpu
def test_convert_for_gpu_names_the_op_and_respells_it_when_the_block_bisect_cannot(gpu, tmp_path):
    """With the legalize pass off (its `returned_fc` rule is the fix), the file is wrong at full residency and the
    block bisect has no block to name: the graph bisect names the returned FULLY_CONNECTED (GPU miscompute, output
    aliasing), and the exact respelling of the file (the output returned as NEG(NEG(y))) is kept because the GPU
    then agrees with torch."""
    from litert_gpu_toolkit import convert_for_gpu

    x = torch.randn(1, 8, 8, 4)
    res = convert_for_gpu(ReturnedFc().eval(), (x,), tmp_path / "returned_fc.tflite", exclude=("legalize",))
    text = res.summary()
    print("\n" + text)
    assert res.graph_fault is not None, (res.graph_fault_error, text)
    assert res.graph_fault.kind == "GPU miscompute" and res.graph_fault.op == "FULLY_CONNECTED"
    assert res.graph_fault.returned_and_read
    assert res.ok and res.repaired == ["respell:returned_negated_twice"], text
    assert "respell:returned_negated_twice" in res.kept and res.path == tmp_path / "returned_fc.tflite"
    assert "graph bisect (the file, op by op, GPU vs CPU): GPU miscompute at op" in text


@pytest.mark.gpu
def test_a_rank_changing_constant_add_is_respelled_at_equal_rank(gpu, tmp_path):
    """XGLM's attention form with the legalize pass off: scores [4, 12, 12] + a [1, 1, 12, 12] constant mask is
    wrong on the GPU; the graph bisect names it and the `equal_rank` respelling (a RESHAPE of the runtime side to
    rank 4) is kept: PASS."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "legalize"))
    from test_legalize import ScoresPlusConstantMask, _qk
    from litert_gpu_toolkit import convert_for_gpu

    res = convert_for_gpu(ScoresPlusConstantMask().eval(), _qk(), tmp_path / "scores.tflite", exclude=("legalize",))
    print("\n" + res.summary())
    assert res.graph_fault is not None and res.graph_fault.kind == "GPU miscompute", res.summary()
    assert res.ok and res.repaired == ["respell:equal_rank"], res.summary()


def _cli(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "litert_gpu_toolkit", "bisect", *map(str, args)],
                          capture_output=True, text=True, timeout=600)


def test_bisect_cli_refuses_bad_files_and_inputs_in_one_line(tmp_path, files):
    (tmp_path / "d.tflite").mkdir()
    (tmp_path / "g.tflite").write_text("not a model")
    path = files["Right"][0]
    for args, message in (((tmp_path / "none.tflite",), "no such file"), ((tmp_path / "d.tflite",), "is not a file"),
                          ((tmp_path / "g.tflite",), "not a flatbuffer"),
                          ((path, "--inputs", tmp_path / "no.npz"), "--inputs: no such file"),
                          ((path, "--budget", "0"), "--budget must be > 0")):
        out = _cli(*args)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)


@pytest.mark.gpu
def test_bisect_cli_on_a_tflite_names_the_op_and_exits_1(gpu, files, tmp_path):
    path, _, x = files["ReturnedFc"]
    np.savez(tmp_path / "in.npz", args_0=x.numpy())
    out = _cli(path, "--inputs", tmp_path / "in.npz", "--json", tmp_path / "fault.json")
    assert out.returncode == 1, out.stderr
    assert "GPU miscompute at op 1 FULLY_CONNECTED" in out.stdout and "the file as it is: wrong" in out.stderr
    import json

    assert json.loads((tmp_path / "fault.json").read_text())["fault"]["op"] == "FULLY_CONNECTED"
    assert _cli(files["Right"][0]).returncode == 0


class TwoMaskedScores(nn.Module):
    """Two attention-score ADDs of the rank-changing form (a [H, S, S] runtime tensor viewed [1, H, S, S] plus a
    rank-4 constant): the respelling can lift one or both."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.triu(torch.full((1, 1, 12, 12), -1e4), 1))

    def forward(self, q, k):
        s = torch.bmm(q, k.transpose(1, 2))
        a = torch.softmax(s.view(1, 4, 12, 12) + self.mask, -1)
        b = torch.softmax((s * 0.5).view(1, 4, 12, 12) + self.mask, -1)
        return a + b


def test_the_named_op_is_respelled_alone_before_every_op_of_its_form(tmp_path):
    """`candidates` with a fault at one ADD: first a file where only that ADD reads its runtime side through a
    RESHAPE, then the file with every such ADD lifted; both give LiteRT's CPU the original's outputs bit for bit."""
    from litert_gpu_toolkit.core.model_info import read_model_info
    from litert_gpu_toolkit.diagnose.graph_bisect import GraphFault
    from litert_gpu_toolkit.diagnose.respell import candidates
    from ai_edge_litert.interpreter import Interpreter

    def run(data):
        return Interpreter(model_content=data).get_signature_runner()(args_0=q.numpy(), args_1=k.numpy())

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(4, 12, 16, generator=g), torch.randn(4, 12, 16, generator=g)
    path = export_tflite(TwoMaskedScores().eval(), (q, k), tmp_path / "two.tflite")
    info = read_model_info(path)
    adds = [i for i, op in enumerate(info.ops) if op.op == "ADD"
            and {info.tensor(t, op.subgraph).rank for t in op.inputs} == {3, 4}]
    assert len(adds) == 2, [op.op for op in info.ops]
    fault = GraphFault(op_index=adds[1], op="ADD", kind="GPU miscompute", tensor="t", fp16="corr 0.7", fp32="corr 0.7")
    found = [r for r in candidates(path.read_bytes(), fault) if r.name == "equal_rank"]
    assert [r.what.split(":")[0] for r in found] == [f"op {adds[1]}", "2 elementwise op(s) read their lower-rank "
                                                     "runtime operand through a RESHAPE to the other operand's rank "
                                                     "(bit-exact)"], [r.what for r in found]
    want = run(path.read_bytes())
    for i, r in enumerate(found):
        (tmp_path / f"r{i}.tflite").write_bytes(r.data)
        assert read_model_info(tmp_path / f"r{i}.tflite").op_histogram()["RESHAPE"] == \
            info.op_histogram().get("RESHAPE", 0) + (1 if i == 0 else 2)
        got = run(r.data)
        assert all(np.array_equal(want[n], got[n]) for n in want), r.what
