"""The SmolLM2-135M recipe end to end, as a user runs it, at full size (30 blocks, real weights).

export_llm --graph prefill, export_llm --graph decode (through convert_for_gpu), dump_llm_ref and verify_llm
as subprocesses on the GPU
accelerator (the software GPU in CI), in a temp folder (the committed results.json is not touched). CI's subset: the
first prompt, prefill + 4 decode steps (the full 10 prompts x 32 steps is one command in the README).
"""
import json
import os
from pathlib import Path

import numpy as np
import pytest

from native_compare import compare_native_with_python, random_inputs  # tests/native_compare.py
import script_runner  # tests/script_runner.py: the one way the tests run a recipe script

RECIPE = Path(__file__).resolve().parents[2] / "models" / "llm" / "smollm2_135m" / "converted"
PROMPTS, STEPS = 1, 4
pytestmark = [pytest.mark.slow, pytest.mark.gpu]


def _run(script, *args, cwd):
    proc = script_runner.run_script(RECIPE / script, *args, cwd=cwd, env=dict(os.environ, LITERT_RESULTS_DIR=str(cwd)),
                                    timeout=1200, check=False)
    return proc, proc.seconds


@pytest.fixture(scope="module")
def recipe(gpu, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("smollm2")
    prefill, decode, ref = tmp / "prefill.tflite", tmp / "decode.tflite", tmp / "llm_ref.npz"
    steps = {}
    for name, script, args in (
            ("export_prefill", "export_llm.py", ["--graph", "prefill", "--model", tmp]),
            ("export_decode", "export_llm.py", ["--graph", "decode", "--model", tmp]),
            ("dump", "dump_llm_ref.py", ["--ref", ref, "--prompts", PROMPTS, "--steps", STEPS]),
            ("verify", "verify_llm.py", ["--prefill", prefill, "--decode", decode, "--ref", ref,
                                         "--results-dir", tmp])):
        proc, wall = _run(script, *args, cwd=tmp)
        steps[name] = (proc, wall)
        print(f"{name}: exit {proc.returncode} in {wall:.0f} s")
        if proc.returncode != 0:
            break
    return {"tmp": tmp, "prefill": prefill, "decode": decode, "ref": ref, "steps": steps}


def test_each_step_exits_zero(recipe):
    for name in ("export_prefill", "export_decode", "dump", "verify"):
        assert name in recipe["steps"], f"{name} did not run (an earlier step failed)"
        proc, _ = recipe["steps"][name]
        assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def test_prefill_native_matches_python(recipe):
    """The phone's runner (LiteRT C API) built for this machine gives the Python path's outputs and residency on the
    prefill graph (the decode loop feeds outputs back in, which a runner job cannot)."""
    compare_native_with_python(recipe["prefill"], random_inputs(recipe["prefill"]),
                               settings=(("cpu", False), ("gpu", False)))


def test_rewrites_match_hf_in_torch(recipe):
    for name in ("export_prefill", "export_decode"):
        line = next(ln for ln in recipe["steps"][name][0].stdout.splitlines() if "max |graph - HF|" in ln)
        assert float(line.split("=")[1].split()[0]) < 1e-3, line


def test_graph_signatures(recipe):
    from litert_gpu_toolkit.core.model_info import read_model_info

    pre = read_model_info(recipe["prefill"]).signatures[0]
    dec = read_model_info(recipe["decode"]).signatures[0]
    cache = {f"{kv}_{i}": ((1, 3, 256, 64), "float32") for i in range(30) for kv in "kv"}
    assert {n: (t.shape, t.dtype) for n, t in pre.inputs.items()} == {
        "tokens": ((1, 64), "int32"), "cos": ((1, 1, 64, 64), "float32"), "sin": ((1, 1, 64, 64), "float32"),
        "mask": ((1, 9, 64, 64), "float32"), "last": ((1, 1, 64), "float32")}
    assert {n: (t.shape, t.dtype) for n, t in pre.outputs.items()} == {"logits": ((1, 1, 49152), "float32"), **cache}
    assert {n: (t.shape, t.dtype) for n, t in dec.inputs.items()} == {
        "token": ((1, 1), "int32"), "cos": ((1, 1, 1, 64), "float32"), "sin": ((1, 1, 1, 64), "float32"),
        "mask": ((1, 9, 1, 256), "float32"), "write": ((1, 1, 256, 1), "float32"), "one": ((1,), "float32"), **cache}
    assert {n: (t.shape, t.dtype) for n, t in dec.outputs.items()} == {"logits": ((1, 1, 49152), "float32"), **cache}


def test_walls_are_gone_from_the_graphs(recipe):
    """No op the GPU rejects, no rank > 4, and every cache output is guarded by the runtime `one` (LiteRT#8599)."""
    from litert_gpu_toolkit.core.model_info import read_model_info
    from litert_gpu_toolkit.rewrites.output_aliasing import find_aliased_outputs, outputs_guarded_by_runtime_one

    for path in (recipe["prefill"], recipe["decode"]):
        info = read_model_info(path)
        for op in ("BROADCAST_TO", "GATHER_ND", "SELECT", "SELECT_V2", "SCATTER_ND", "DYNAMIC_UPDATE_SLICE"):
            assert not info.has_op(op), f"{path.name}: {op}"
        assert not info.high_rank_tensors(), path.name
    dec = read_model_info(recipe["decode"])
    assert not find_aliased_outputs(dec)
    guarded = {k: v for k, v in outputs_guarded_by_runtime_one(dec).items() if "logits" not in k}
    assert len(guarded) == 60 and all(guarded.values()), guarded


def test_reference_dump(recipe):
    with np.load(recipe["ref"]) as ref:
        assert ref["tokens"].shape == (PROMPTS, STEPS + 1)
        assert ref["logits"].shape == (PROMPTS, STEPS + 1, 49152)
        assert (ref["logits"].argmax(-1) == ref["tokens"]).all()
        assert 0 < ref["lengths"].max() <= 64
    assert (recipe["ref"].parent / "tokenizer").is_dir()


def test_results_and_gates(recipe):
    proc, _ = recipe["steps"]["verify"]
    results = json.loads((recipe["tmp"] / "results.json").read_text())
    dec, pre = results["decode@host-gpu"], results["prefill@host-gpu"]
    assert dec["passed"] and pre["passed"], (dec["gates"], pre["gates"])
    assert set(dec["gates"]) == {"strict GPU residency N/N", "top-1 agreement >= 97%", "min logits corr >= 0.999"}
    assert set(pre["gates"]) == {"strict GPU residency N/N", "prefill logits corr >= 0.999"}
    for record in (dec, pre):
        assert record["residency"].endswith("(strict GPU)") and record["residency"] in proc.stdout
    m = dec["metrics"]
    assert m["prompts"] == PROMPTS and m["decode_steps"] == STEPS
    assert m["top1_agreement"] >= 0.97 and m["min_logits_corr"] >= 0.999
    assert m["latency_ms_median"] > 0 and pre["metrics"]["latency_ms_median"] > 0  # one decode step; one prefill
    assert "torch :" in proc.stdout and "tflite:" in proc.stdout


def test_committed_results_are_untouched(recipe):
    """LITERT_RESULTS_DIR sent the test's records to the temp folder."""
    committed = RECIPE / "results.json"
    if committed.exists():
        for record in json.loads(committed.read_text()).values():   # the recipe's two result writers
            assert record["command"].split()[0] in ("verify_llm.py", "run_litertlm.py"), record["command"]
            assert "--results-dir" not in record["command"]
