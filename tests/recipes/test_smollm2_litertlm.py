"""SmolLM2's `.litertlm` bundle end to end on LiteRT-LM's CPU backend, with export_llm.py --format litertlm --tiny's
random 2-block model (SmolLM2's tokenizer, vocabulary, head layout and rotary base; random weights) so it converts
in about a minute: export + pack, dump_llm_ref.py --tiny (torch greedy), run_litertlm.py --backend cpu (and, where a
GPU is usable, --backend gpu). LiteRT-LM's greedy tokens must equal torch's for every prompt. The full-size bundle is
the README's commands. The tests that use the converted model are marked slow (the conversion takes about 1.5
minutes): they run in CI's GPU and slow lane, not the fast one.
"""
import json
import os
from pathlib import Path

import pytest

import script_runner  # tests/script_runner.py: the one way the tests run a recipe script

RECIPE = Path(__file__).resolve().parents[2] / "models" / "llm" / "smollm2_135m" / "converted"
PROMPTS, STEPS = 2, 8



def test_litert_lm_packages_are_installed():
    """Pinned in requirements(-nodeps).txt: a missing install is a failure, not a skip."""
    import litert_lm  # noqa: F401
    import litert_lm_builder  # noqa: F401


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("smollm2_litertlm")
    bundle, ref = tmp / "smollm2_135m.litertlm", tmp / "tiny_ref.npz"
    env = dict(os.environ, LITERT_RESULTS_DIR=str(tmp))
    procs = {}
    for name, script, args in (("export", "export_llm.py", ["--format", "litertlm", "--tiny", "--model", tmp]),
                               ("dump", "dump_llm_ref.py", ["--tiny", "--ref", ref, "--prompts", PROMPTS,
                                                            "--steps", STEPS]),
                               ("run", "run_litertlm.py", ["--model", tmp, "--ref", ref, "--backend", "cpu",
                                                           "--results-dir", tmp])):
        proc = script_runner.run_script(RECIPE / script, *args, cwd=tmp, env=env, timeout=600, check=False)
        procs[name] = proc
        print(f"{name}: exit {proc.returncode} in {proc.seconds:.0f} s")
        if proc.returncode != 0:
            break
    return {"tmp": tmp, "bundle": bundle, "procs": procs}


@pytest.mark.slow
def test_each_step_exits_zero(tiny):
    for name in ("export", "dump", "run"):
        assert name in tiny["procs"], f"{name} did not run (an earlier step failed)"
        proc = tiny["procs"][name]
        assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


@pytest.mark.slow
def test_step_modules_match_hf_in_torch(tiny):
    line = next(ln for ln in tiny["procs"]["export"].stdout.splitlines() if "max |step logits - HF|" in ln)
    assert "tokens equal for 8/8" in line and float(line.rsplit("=", 1)[1]) < 1e-3, line


@pytest.mark.slow
def test_bundle_layout(tiny):
    from litert_gpu_toolkit.core.model_info import read_model_info

    assert tiny["bundle"].read_bytes()[:8] == b"LITERTLM"
    embedder = read_model_info(tiny["bundle"].with_name("smollm2_135m_embedder.tflite")).signatures
    assert len(embedder) == 1 and [t.shape for t in embedder[0].outputs.values()] == [(1, 1, 576)]
    sigs = {s.key: s for s in read_model_info(tiny["bundle"].with_suffix(".tflite")).signatures}
    assert set(sigs) == {"prefill_64", "decode"}
    cache = {f"kv_cache_{kv}_{i}": ((1, 3, 256, 64), "float32") for i in range(2) for kv in "kv"}
    pre, dec = sigs["prefill_64"], sigs["decode"]
    assert {n: (t.shape, t.dtype) for n, t in pre.inputs.items()} == {
        "embeddings": ((1, 64, 576), "float32"), "input_pos": ((64,), "int32"), **cache}
    assert {n: (t.shape, t.dtype) for n, t in pre.outputs.items()} == cache
    assert {n: (t.shape, t.dtype) for n, t in dec.inputs.items()} == {
        "embeddings": ((1, 1, 576), "float32"), "input_pos": ((1,), "int32"), **cache}
    assert {n: (t.shape, t.dtype) for n, t in dec.outputs.items()} == {"logits": ((1, 1, 49152), "float32"), **cache}


@pytest.mark.slow
def test_cpu_backend_greedy_equals_torch(tiny):
    record = json.loads((tiny["tmp"] / "results.json").read_text())["litertlm@litertlm-cpu"]
    assert record["device_label"] == "LiteRT-LM 0.18.1 CPU backend (x86_64)"
    assert record["passed"], record
    assert record["metrics"]["prompts_equal"] == f"{PROMPTS}/{PROMPTS}"
    assert all(row["equal"] and row["tokenized_equal"] for row in record["per_prompt"]), record["per_prompt"]


def test_gpu_backend_greedy_equals_torch(tiny, gpu):
    """The same bundle on LiteRT-LM's GPU backend (llvmpipe here), default fp16 activations."""
    proc = script_runner.run_script(RECIPE / "run_litertlm.py", "--model", tiny["tmp"],
                                    "--ref", tiny["tmp"] / "tiny_ref.npz", "--backend", "gpu",
                                    "--results-dir", tiny["tmp"], cwd=tiny["tmp"], timeout=600, check=False,
                                    env=dict(os.environ, LITERT_RESULTS_DIR=str(tiny["tmp"])))
    record = json.loads((tiny["tmp"] / "results.json").read_text())["litertlm@litertlm-gpu"]
    assert proc.returncode == 0 and record["passed"], f"{proc.stdout[-3000:]}\n{record.get('failure')}"
    assert record["metrics"]["prompts_equal"] == f"{PROMPTS}/{PROMPTS}"
