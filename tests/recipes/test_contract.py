"""The contract every recipe's scripts keep, and the safety of the results file they share.

Every export / dump / verify script: `--help` in well under a second without importing torch, every option with
help text, the standard flags (--weights, --model, --ref, --device, --results-dir; an export's --quantize) where
they apply.

Every `models/*/*/converted/verify_*.py` is run as a user runs it (a subprocess, --results-dir in a temp folder so
nothing committed is touched) with the mistakes users make: an unknown device, a missing artifact, a corrupt
artifact, a corrupt reference. Each must exit 2 with one clear `error:` line and no traceback, and record nothing.
No model is converted and no GPU is needed: the scripts must stop before running anything.

`recipe.write_results` is tested directly: two processes writing at once, a full disk, a corrupt results.json, and a
run that found no GPU.
"""
from __future__ import annotations

import errno
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from litert_gpu_toolkit import recipe
from litert_gpu_toolkit.recipe import results as recipe_results
from litert_gpu_toolkit.runtime.compiled import STATUS_NO_GPU, STATUS_OK, GpuLog, RunResult
from litert_gpu_toolkit.runtime.tiny_models import PROBE_SHAPE, add_model_bytes

import script_runner  # tests/script_runner.py: the one way the tests run a recipe script

ROOT = Path(__file__).resolve().parents[2]
VERIFY_SCRIPTS = sorted(ROOT.glob("models/*/*/converted/verify_*.py"))
JUNK = b"\x00\x01this is not a flatbuffer\xff" * 3


def artifact_args(script: Path, tmp: Path, model: Path, ref: Path) -> list[str]:
    """The command-line arguments that point `script` at `model` (every .tflite it reads) and `ref`."""
    name = script.name
    if name == "verify_llm.py":
        return ["--prefill", str(model), "--decode", str(model), "--ref", str(ref)]
    if name in ("verify_mtcnn.py", "verify_oww.py"):
        folder = tmp / name[len("verify_"):-len(".py")]
        folder.mkdir(exist_ok=True)
        nets = ("pnet", "rnet", "onet") if name == "verify_mtcnn.py" else ("mel", "embedding", "hey_jarvis")
        for net in nets:
            target = folder / f"{net}.tflite"
            if model.exists():
                target.write_bytes(model.read_bytes())
            elif target.exists():
                target.unlink()
        return ["--model", str(folder), "--ref", str(ref)]
    if name in ("verify_sr.py", "verify_vocoder.py"):
        return ["--model", str(model), "--ref", str(ref), "--artifacts", str(tmp / "out")]
    return ["--model", str(model), "--ref", str(ref)]


def run_script(script: Path, *args: str, env: dict | None = None):
    env = dict(os.environ if env is None else env)
    env.pop("LITERT_RESULTS_DIR", None)
    return script_runner.run_script(script, *args, env=env, timeout=300, check=False)


def assert_usage_error(proc: subprocess.CompletedProcess, results_dir: Path, *expected: str) -> None:
    where = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == recipe.EXIT_USAGE, where
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, where
    assert "error:" in proc.stderr, where
    for text in expected:
        assert text in proc.stderr, f"{text!r} not in the message\n{where}"
    assert not (results_dir / "results.json").exists(), "a usage error recorded a result"


EXPORT_SCRIPTS = sorted(ROOT.glob("models/*/*/converted/export_*.py"))
DUMP_SCRIPTS = sorted(ROOT.glob("models/*/*/converted/dump_*.py"))
ALL_SCRIPTS = EXPORT_SCRIPTS + DUMP_SCRIPTS + VERIFY_SCRIPTS

# Runs a recipe script's main() until it parses its arguments, then prints what the parser holds and whether
# torch was imported by then. The script's own folder goes first on sys.path, as when it is run.
_PROBE = """
import argparse, json, runpy, sys
script = sys.argv[1]
sys.path.insert(0, script.rsplit("/", 1)[0])
class Parsed(Exception):
    pass
def capture(self, args=None, namespace=None):
    options = [{"flags": a.option_strings, "help": a.help, "nargs": a.nargs} for a in self._actions
               if a.option_strings and a.dest != "help"]
    print("OPTIONS " + json.dumps(options))
    print("TORCH " + str("torch" in sys.modules))
    raise Parsed()
argparse.ArgumentParser.parse_args = capture
sys.argv = [script]
try:
    runpy.run_path(script, run_name="__main__")
except Parsed:
    pass
"""


def script_options(script: Path) -> tuple[list[dict], bool]:
    out = subprocess.run([sys.executable, "-c", _PROBE, str(script)], capture_output=True, text=True, timeout=120,
                         cwd=script.parent, env={**os.environ, "PYTHONPATH": str(ROOT / "utilities")})
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.stdout.splitlines()
             if line.startswith(("OPTIONS ", "TORCH "))}
    assert "OPTIONS" in lines, f"{script.name} never parsed its arguments:\n{out.stderr[-2000:]}"
    return json.loads(lines["OPTIONS"]), lines["TORCH"] == "True"


@pytest.mark.parametrize("script", ALL_SCRIPTS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_every_option_has_help_and_no_torch_before_parsing(script):
    options, torch_loaded = script_options(script)
    assert not torch_loaded, f"{script.name} imports torch before parsing its arguments (--help would be slow)"
    bare = [o["flags"] for o in options if not o["help"]]
    assert not bare, f"{script.name}: options without help: {bare}"
    commas = [o["flags"] for o in options if "comma" in (o["help"] or "").lower()]
    assert not commas, f"{script.name}: a list option takes a comma string instead of several values: {commas}"


@pytest.mark.parametrize("script", ALL_SCRIPTS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_standard_flags(script):
    flags = {f for o in script_options(script)[0] for f in o["flags"]}
    kind = script.name.split("_")[0]
    wanted = {"export": {"--weights", "--model", "--quantize"}, "dump": {"--weights", "--ref"},
              "verify": {"--model", "--ref", "--device", "--results-dir"}}[kind]
    assert wanted <= flags, f"{script.name} lacks {sorted(wanted - flags)}"
    if kind != "verify":
        assert not {"--out", "--out-dir", "--weights-dir", "--variant"} & flags, f"{script.name}: {sorted(flags)}"


def test_every_recipe_has_a_verify_script():
    """At least one `verify_*.py` per recipe (XFeat has two: the extractor and the LighterGlue matcher), and none
    outside a recipe folder with results.json."""
    recipes = sorted(p.parent for p in ROOT.glob("models/*/*/converted/results.json"))
    assert len(recipes) >= 11, recipes
    assert sorted({p.parent for p in VERIFY_SCRIPTS}) == recipes, \
        [p.relative_to(ROOT).as_posix() for p in VERIFY_SCRIPTS]


@pytest.mark.parametrize("script", VERIFY_SCRIPTS, ids=lambda p: p.name)
def test_script_style(script):
    """main() behind a __main__ guard through verify_main, no sys.path edits, --help names the shared options."""
    text = script.read_text()
    assert "sys.path" not in text and "noqa: E402" not in text
    assert "def main(" in text and "verify_main(main)" in text and 'if __name__ == "__main__":' in text
    proc = run_script(script, "--help")
    assert proc.returncode == 0, proc.stderr
    for option in ("--device", "--results-dir", "exit status"):
        assert option in proc.stdout, f"--help of {script.name} does not mention {option}"


@pytest.mark.parametrize("script", EXPORT_SCRIPTS + DUMP_SCRIPTS, ids=lambda p: p.name)
def test_writing_scripts_end_through_script_main(script):
    """Exports and dumps run behind script_main: Ctrl-C ends them within seconds, saying a file may be incomplete,
    and a RecipeError is one `error:` line, not a traceback."""
    assert "sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))" in script.read_text()


@pytest.mark.parametrize("script", VERIFY_SCRIPTS, ids=lambda p: p.name)
def test_unknown_device(script, tmp_path):
    proc = run_script(script, "--device", "toaster", "--results-dir", str(tmp_path))
    assert_usage_error(proc, tmp_path, "unknown device 'toaster'")
    assert "phone runner" not in proc.stderr  # SmolLM2 once blamed the phone runner for an unknown name


@pytest.mark.parametrize("script", VERIFY_SCRIPTS, ids=lambda p: p.name)
def test_missing_artifact(script, tmp_path):
    args = artifact_args(script, tmp_path, tmp_path / "missing.tflite", tmp_path / "missing.npz")
    proc = run_script(script, *args, "--device", "cpu", "--results-dir", str(tmp_path))
    assert_usage_error(proc, tmp_path, "not found: run ")


@pytest.mark.parametrize("script", VERIFY_SCRIPTS, ids=lambda p: p.name)
def test_corrupt_model(script, tmp_path):
    model = tmp_path / "junk.tflite"
    model.write_bytes(JUNK)
    args = artifact_args(script, tmp_path, model, tmp_path / "missing.npz")
    proc = run_script(script, *args, "--device", "cpu", "--results-dir", str(tmp_path))
    assert_usage_error(proc, tmp_path, "not a LiteRT flatbuffer")


@pytest.mark.parametrize("script", VERIFY_SCRIPTS, ids=lambda p: p.name)
def test_corrupt_reference(script, tmp_path):
    model, ref = tmp_path / "valid.tflite", tmp_path / "ref.npz"
    model.write_bytes(add_model_bytes())  # a real model, so the reference is what is wrong
    ref.write_bytes(b"PK\x03\x04 half a zip file")
    args = artifact_args(script, tmp_path, model, ref)
    proc = run_script(script, *args, "--device", "cpu", "--results-dir", str(tmp_path))
    assert_usage_error(proc, tmp_path, "is not a readable .npz")


@pytest.mark.parametrize("device,what", [("pixel8", "a phone"), ("host-native", "the native runner")])
def test_llm_on_a_fixed_input_runner_is_a_clear_error(tmp_path, device, what):
    script = ROOT / "models" / "llm" / "smollm2_135m" / "converted" / "verify_llm.py"
    proc = run_script(script, "--device", device, "--results-dir", str(tmp_path))
    assert_usage_error(proc, tmp_path, f"{device} is {what}", "fixed inputs")


def test_empty_file(tmp_path):
    (tmp_path / "m.tflite").write_bytes(b"")
    with pytest.raises(recipe.ArtifactError, match="is empty: run export_x.py again"):
        recipe.load_model(tmp_path / "m.tflite", "export_x.py")
    with pytest.raises(recipe.ArtifactError, match="not found: run dump_x.py first"):
        recipe.load_reference(tmp_path / "none.npz", "dump_x.py")


def test_phone_errors_are_device_errors():
    from litert_gpu_toolkit.phone import PhoneError

    assert issubclass(PhoneError, recipe.DeviceError) and issubclass(recipe.NoGpuError, recipe.DeviceError)
    assert issubclass(recipe.DeviceError, recipe.RecipeError)


def test_strict_gate_is_the_residency_verdict():
    strict = recipe.Residency(5, 5, 0, 1, True, "GPU residency: 5/5 ops, 1 partition (strict GPU)")
    split = recipe.Residency(3, 5, 2, None, False, "3/5 ops on GPU, 2 on CPU")
    assert recipe.strict_gates("host-gpu", strict) == {recipe.STRICT_GATE: True}
    assert recipe.strict_gates("host-gpu", strict, split) == {recipe.STRICT_GATE: False}
    assert recipe.strict_gates("host-gpu") == {recipe.STRICT_GATE: False}  # no graph ran: not strict
    assert recipe.strict_gates("cpu", split) == {}


def test_latency_is_a_median_in_milliseconds():
    assert recipe.latency_ms([0.010, 0.030, 0.020]) == 20.0
    assert recipe.latency_ms(0.0000598) == 0.0598  # small CPU latencies keep 4 significant digits


def test_startup_is_init_and_first_run_summed_over_a_recipes_graphs():
    a = RunResult(status=STATUS_OK, accelerator="gpu", enforce_f32=False, compile_s=0.5, first_run_s=0.0251)
    b = RunResult(status=STATUS_OK, accelerator="gpu", enforce_f32=False, compile_s=1.25, first_run_s=0.0100)
    assert recipe.startup_metrics(a, b) == {"init_ms": 1750.0, "first_run_ms": 35.1}
    never_ran = RunResult(status="run_error", accelerator="gpu", enforce_f32=False, compile_s=0.5)
    assert recipe.startup_metrics(a, never_ran) == {"init_ms": 1000.0}    # a missing figure is left out, not guessed
    assert recipe.startup_metrics(None) == {}


def test_finish_verify_records_the_cold_start_beside_the_steady_latency(tmp_path, monkeypatch):
    """Every verify script ends in finish_verify: the record gains init_ms and first_run_ms of the runs it names
    (all of a recipe's graphs), and a figure the script measured itself is kept."""
    monkeypatch.setenv("LITERT_RESULTS_DIR", str(tmp_path))
    args = recipe.verify_parser(__doc__, tmp_path).parse_args(["--device", "cpu"])
    args.model = tmp_path / "g.tflite"
    a = RunResult(status=STATUS_OK, accelerator="cpu", enforce_f32=False, compile_s=0.002, first_run_s=0.004)
    b = RunResult(status=STATUS_OK, accelerator="cpu", enforce_f32=False, compile_s=0.001, first_run_s=0.001)
    assert recipe.finish_verify(args, graph="g", run=a, residency="CPU", metrics={"latency_ms_median": 3.0},
                                gates={"ok": True}, startup=[a, b]) == recipe.EXIT_PASSED
    metrics = json.loads((tmp_path / "results.json").read_text())["g@cpu"]["metrics"]
    assert metrics == {"latency_ms_median": 3.0, "init_ms": 3.0, "first_run_ms": 5.0}
    recipe.finish_verify(args, graph="h", run=a, residency="CPU", metrics={"init_ms": 9.0}, gates={"ok": True})
    assert json.loads((tmp_path / "results.json").read_text())["h@cpu"]["metrics"] == {"init_ms": 9.0,
                                                                                       "first_run_ms": 4.0}


def test_the_worker_times_the_first_run_after_the_compile(tmp_path):
    """first_run_s is the first run of the process (the cold one), before any repeat; CPU, so no GPU is needed."""
    x = np.ones(PROBE_SHAPE, np.float32)
    model = tmp_path / "add.tflite"
    model.write_bytes(add_model_bytes())
    run = recipe.run_on_device(model, {"serving_default": [{"x": x, "y": x}, {"x": x, "y": 2 * x}]},
                               "cpu", repeats=3)
    assert run.ok, run.error
    assert run.compile_s is not None and run.first_run_s is not None and run.first_run_s > 0
    assert recipe.startup_metrics(run)["first_run_ms"] == float(f"{1e3 * run.first_run_s:.4g}")


# --- the results file --------------------------------------------------------------------------------------------

def cpu_run() -> RunResult:
    return RunResult(status=STATUS_OK, accelerator="cpu", enforce_f32=False)


def record(folder: Path, graph: str, device: str = "cpu", run: RunResult | None = None, **metrics) -> Path:
    return recipe.write_results(folder, graph=graph, device=device, run=run or cpu_run(), residency="CPU: 1 ops",
                                metrics=metrics or {"x": 1.0}, gates={"ok": True}, headline=list(metrics)[:1])


def _writer(folder: str, prefix: str, count: int) -> None:
    for i in range(count):
        record(Path(folder), f"{prefix}{i}", x=float(i))


def test_two_writers_at_once_lose_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(recipe, "git_commit", lambda cwd: None)  # keep each write short so they interleave
    monkeypatch.delenv("LITERT_RESULTS_DIR", raising=False)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), p, 25)) for p in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data) == {f"{p}{i}@cpu" for p in "ab" for i in range(25)}
    assert not list(tmp_path.glob(".results.json.*.tmp")), "a temporary file was left behind"


@pytest.mark.parametrize("fail_at", ["fsync", "replace"])
def test_a_failed_write_leaves_the_old_file_intact(tmp_path, monkeypatch, fail_at):
    monkeypatch.delenv("LITERT_RESULTS_DIR", raising=False)
    record(tmp_path, "before", x=1.0)
    old = (tmp_path / "results.json").read_bytes()

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(recipe_results.os, fail_at, full_disk)
    with pytest.raises(recipe.ResultsFileError, match="the disk is full.*previous file is unchanged"):
        record(tmp_path, "after", x=2.0)
    monkeypatch.undo()
    assert (tmp_path / "results.json").read_bytes() == old
    assert [p.name for p in tmp_path.iterdir() if p.name != "results.json.lock"] == ["results.json"]


def test_a_corrupt_results_file_is_kept_aside_and_reported(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("LITERT_RESULTS_DIR", raising=False)
    broken = b'{"encoder@cpu": {"graph": "enc'  # what a full disk used to leave behind
    (tmp_path / "results.json").write_bytes(broken)
    with pytest.raises(recipe.ResultsFileError, match="not valid JSON"):
        recipe.read_results(tmp_path / "results.json")
    record(tmp_path, "new", x=3.0)
    aside = list(tmp_path.glob("results.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == broken
    assert set(json.loads((tmp_path / "results.json").read_text())) == {"new@cpu"}
    err = capsys.readouterr().err
    assert "not valid JSON" in err and aside[0].name in err


def no_gpu_run() -> RunResult:
    return RunResult(status=STATUS_NO_GPU, accelerator="gpu", enforce_f32=False, error="compile failed",
                     gpu=GpuLog(no_gpu_reason="ERROR: Found no drivers!"))


def test_a_run_without_gpu_does_not_replace_a_result(tmp_path, monkeypatch):
    monkeypatch.setenv("VK_ICD_FILENAMES", "/nonexistent/icd.json")
    monkeypatch.delenv("LITERT_RESULTS_DIR", raising=False)
    passing = RunResult(status=STATUS_OK, accelerator="gpu", enforce_f32=False)
    record(tmp_path, "encoder", device="host-gpu", run=passing, x=1.0)
    before = (tmp_path / "results.json").read_bytes()
    with pytest.raises(recipe.NoGpuError, match="VK_ICD_FILENAMES=/nonexistent/icd.json") as err:
        record(tmp_path, "encoder", device="host-gpu", run=no_gpu_run(), x=0.0)
    assert err.value.exit_code == recipe.EXIT_NO_GPU == 3
    assert "Nothing was recorded" in str(err.value)
    assert (tmp_path / "results.json").read_bytes() == before


def test_verify_main_turns_errors_into_exit_codes(capsys):
    def no_gpu() -> int:
        recipe.refuse_no_gpu(no_gpu_run(), "host-gpu")
        return 0

    def bad_device() -> int:
        recipe.resolve_device("toaster")
        return 0
    assert recipe.verify_main(no_gpu) == recipe.EXIT_NO_GPU
    assert recipe.verify_main(bad_device) == recipe.EXIT_USAGE
    assert recipe.verify_main(lambda: 1) == recipe.EXIT_FAILED
    err = capsys.readouterr().err
    assert "no usable GPU for --device host-gpu" in err and "Found no drivers" in err and "unknown device" in err


def test_run_on_device_without_a_driver_raises_no_gpu(tmp_path, monkeypatch):
    """The real runtime with VK_ICD_FILENAMES pointing nowhere: run_on_device raises NoGpuError naming it."""
    monkeypatch.setenv("VK_ICD_FILENAMES", str(tmp_path / "nonexistent_icd.json"))
    model = tmp_path / "add.tflite"
    model.write_bytes(add_model_bytes())
    x = np.ones(PROBE_SHAPE, np.float32)
    with pytest.raises(recipe.NoGpuError, match="nonexistent_icd.json"):
        recipe.run_on_device(model, {"serving_default": {"x": x, "y": x}}, "host-gpu", timeout=120)


def test_headline_must_name_recorded_metrics(tmp_path, monkeypatch):
    monkeypatch.delenv("LITERT_RESULTS_DIR", raising=False)
    with pytest.raises(ValueError, match="headline metrics"):
        recipe.write_results(tmp_path, graph="g", device="cpu", run=cpu_run(), residency="", metrics={"a": 1},
                             gates={}, headline=["b"])
    path = recipe.write_results(tmp_path, graph="g", device="cpu", run=cpu_run(), residency="",
                                metrics={"a": 1, "b": 2}, gates={}, headline=["b", "a"])
    assert json.loads(path.read_text())["g@cpu"]["headline"] == ["b", "a"]


def test_the_guide_template_is_valid_and_uses_real_toolkit_names():
    """docs/writing-a-recipe.md's template parses, keeps the contract, and imports only names that exist."""
    import ast
    import importlib

    text = (ROOT / "docs" / "writing-a-recipe.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    tree = ast.parse(code)
    assert "sys.path" not in code and "verify_main(main)" in code and "verify_parser(__doc__, HERE)" in code
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("litert_gpu_toolkit"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"


def test_one_delegate_log_parser_feeds_residency():
    """The delegate's 'Replacing N out of M node(s)' line is read by runtime.parse_gpu_log only."""
    from litert_gpu_toolkit.core.model_info import read_model_info
    from litert_gpu_toolkit.phone import residency_from_log
    from litert_gpu_toolkit.runtime.compiled import parse_gpu_log

    log = "INFO: Replacing 118 out of 121 node(s) with delegate (TfLiteGpuDelegateV2) node, yielding 2 partitions."
    assert parse_gpu_log(log).delegated == (118, 121, 2) == residency_from_log(log)
    assert parse_gpu_log("nothing").delegated is None
    info = read_model_info(add_model_bytes())
    split = recipe.residency(info, RunResult(status=STATUS_OK, accelerator="gpu", enforce_f32=False, log=log))
    assert (split.gpu_ops, split.total_ops, split.partitions, split.strict) == (118, 121, 2, False)
    full = log.replace("118 out of", "121 out of").replace("2 partitions", "1 partition")
    whole = recipe.residency(info, RunResult(status=STATUS_OK, accelerator="gpu", enforce_f32=False, log=full))
    assert whole.strict and recipe.strict_gates("pixel8", whole) == {recipe.STRICT_GATE: True}
