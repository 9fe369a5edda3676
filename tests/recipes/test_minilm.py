"""The all-MiniLM-L6-v2 recipe end to end, as a user runs it: export -> dump -> verify, full size (seq 128).

The three scripts run as subprocesses with the offline weights, on the GPU accelerator (the software
GPU in CI), writing into a temp folder (the committed results.json is not touched).
"""
import json
from pathlib import Path

import numpy as np
import pytest

from native_compare import compare_native_with_python, random_inputs  # tests/native_compare.py
import script_runner  # tests/script_runner.py: the one way the tests run a recipe script

RECIPE = Path(__file__).resolve().parents[2] / "models" / "text" / "all_minilm_l6_v2" / "converted"
pytestmark = [pytest.mark.slow, pytest.mark.gpu]


def _run(script, *args, cwd):
    proc = script_runner.run_script(RECIPE / script, *args, cwd=cwd, check=False)
    return proc, proc.seconds


@pytest.fixture(scope="module")
def recipe(gpu, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("minilm")
    model, ref = tmp / "encoder.tflite", tmp / "encoder_ref.npz"
    steps = {}
    for name, script, args in (("export", "export_encoder.py", ["--model", model]),
                               ("dump", "dump_encoder_ref.py", ["--ref", ref]),
                               ("verify", "verify_encoder.py", ["--model", model, "--ref", ref, "--results-dir", tmp])):
        proc, wall = _run(script, *args, cwd=tmp)
        steps[name] = (proc, wall)
        print(f"{name}: exit {proc.returncode} in {wall:.0f} s")
        if proc.returncode != 0:
            break
    return {"tmp": tmp, "model": model, "ref": ref, "steps": steps}


def test_each_step_exits_zero(recipe):
    for name in ("export", "dump", "verify"):
        assert name in recipe["steps"], f"{name} did not run (an earlier step failed)"
        proc, _ = recipe["steps"][name]
        assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def test_graph_native_matches_python(recipe):
    """The phone's runner (LiteRT C API) built for this machine gives the Python path's outputs and residency."""
    compare_native_with_python(recipe["model"], random_inputs(recipe["model"]))


def test_graph_signature(recipe):
    from litert_gpu_toolkit.core.model_info import read_model_info

    sig = read_model_info(recipe["model"]).signatures[0]
    assert {n: (t.shape, t.dtype) for n, t in sig.inputs.items()} == {
        "input_ids": ((1, 128), "int32"), "attention_mask": ((1, 128), "int32")}
    assert {n: (t.shape, t.dtype) for n, t in sig.outputs.items()} == {"embedding": ((1, 384), "float32")}


def test_reference_dump(recipe):
    with np.load(recipe["ref"]) as ref:
        n = len(ref["sentences"])
        assert n >= 32
        assert ref["input_ids"].shape == ref["attention_mask"].shape == (n, 128)
        assert ref["embeddings"].shape == (n, 384)
        np.testing.assert_allclose(np.linalg.norm(ref["embeddings"], axis=1), 1.0, atol=1e-5)


def test_results_file_and_gates(recipe):
    proc, _ = recipe["steps"]["verify"]
    results = json.loads((recipe["tmp"] / "results.json").read_text())
    record = results["encoder@host-gpu"]
    assert record["passed"] and all(record["gates"].values()), record["gates"]
    assert set(record["gates"]) == {"strict GPU residency N/N", "min cosine >= 0.999",
                                    "nearest-neighbour agreement 100%"}
    ops = record["ops"]
    assert record["residency"].startswith(f"GPU residency: {ops}/{ops} ops"), record["residency"]
    assert record["residency"] in proc.stdout
    m = record["metrics"]
    assert m["min_cosine"] >= 0.999 and m["nn_agreement"] == 1.0 and m["nonfinite"] == 0
    assert m["max_abs_error"] > 0, "bit-identical to the fp32 reference: did this really run on the fp16 GPU?"
    assert m["sentences"] >= 32 and proc.stdout.count("\n") > m["sentences"]  # one line per sentence


def test_verify_fails_below_the_gates(recipe):
    # a reference whose embeddings belong to other sentences must fail both numeric gates (cpu: fast)
    with np.load(recipe["ref"]) as ref:
        data = {k: ref[k] for k in ref.files}
    data["embeddings"] = np.roll(data["embeddings"], 1, axis=0)  # breaks the paraphrase pairs
    bad = recipe["tmp"] / "bad_ref.npz"
    np.savez(bad, **data)
    proc, _ = _run("verify_encoder.py", "--model", recipe["model"], "--ref", bad, "--device", "cpu",
                   "--results-dir", recipe["tmp"], cwd=recipe["tmp"])
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "[FAIL] min cosine >= 0.999" in proc.stdout and "[FAIL] nearest-neighbour agreement 100%" in proc.stdout


def test_unknown_device_is_a_clear_error(recipe):
    proc, _ = _run("verify_encoder.py", "--model", recipe["model"], "--ref", recipe["ref"], "--device", "toaster",
                   "--results-dir", recipe["tmp"], cwd=recipe["tmp"])
    assert proc.returncode == 2
    assert "unknown device 'toaster'" in proc.stderr


def test_int8_weights_pass_the_recipes_own_gates(recipe):
    """Real weights, as users ship them: `export_encoder.py --quantize int8`, then the same verify and gates."""
    from litert_gpu_toolkit.core.model_info import read_model_info

    tmp, ref = recipe["tmp"], recipe["ref"]
    proc, _ = _run("export_encoder.py", "--model", recipe["model"], "--quantize", "int8", cwd=tmp)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    quantized = tmp / "encoder_int8.tflite"
    assert "weights int8: 37 of 37 weight tensors" in proc.stdout, proc.stdout[-3000:]
    info = read_model_info(quantized)
    assert not info.has_op("DEQUANTIZE")
    assert {info.tensor(op.inputs[1]).dtype for op in info.ops if op.op == "FULLY_CONNECTED"} == {"int8"}
    assert quantized.stat().st_size < 0.3 * recipe["model"].stat().st_size
    proc, _ = _run("verify_encoder.py", "--model", quantized, "--ref", ref, "--results-dir", tmp, cwd=tmp)
    assert proc.returncode == 0, proc.stdout[-3000:]
    record = json.loads((tmp / "results.json").read_text())["encoder_int8@host-gpu"]
    assert record["passed"] and record["metrics"]["nn_agreement"] == 1.0
