"""The zoo (zoo/litert_zoo, not part of the toolkit): its rows across five libraries, the output rule, the weight
rule, the results file and generated table, the guard, the command; and the CI subset end to end on the GPU.

The zoo's libraries (timm, torchvision, diffusers, ultralytics) live in .venv-zoo (./zoo/setup.sh, which
scripts/test.sh runs): the tests that build models run it as a child process."""
import json
from dataclasses import asdict
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
from litert_zoo.build import user_outputs, wrap
from litert_zoo.guard import regressions
from litert_zoo.models import LIBRARIES, ROWS, ZOO
from litert_zoo.rows import RunSummary, ZooRow, load_results, row_from_dict, save_results
from litert_zoo.table import render_table
from litert_zoo.weights import redraw_weights

RUN = ROOT / "zoo" / "run.py"


def zoo_python() -> str:
    """.venv-zoo's interpreter (LITERT_ZOO_PYTHON overrides); its absence fails: scripts/test.sh makes it."""
    exe = os.environ.get("LITERT_ZOO_PYTHON") or str(ROOT / ".venv-zoo" / "bin" / "python")
    if not Path(exe).exists():
        pytest.fail(f"no zoo environment at {exe}: run ./zoo/setup.sh (scripts/test.sh does)")
    return exe


def _zoo(*args, timeout=120, python=sys.executable):
    return subprocess.run([python, str(RUN), *args], capture_output=True, text=True, timeout=timeout)


def test_zoo_spans_five_libraries_and_many_rows():
    assert len(ZOO) >= 120
    assert set(LIBRARIES) == {"transformers", "timm", "torchvision", "diffusers", "ultralytics"}
    for lib in LIBRARIES:
        assert sum(m.library == lib for m in ROWS) >= 5, lib


def test_fast_subset_touches_every_library():
    fast = [m for m in ROWS if m.fast]
    assert {m.library for m in fast} == set(LIBRARIES)
    assert len(fast) <= 6


def test_text_rows_are_called_with_a_padding_mask():
    """How users call text encoders: the fast text row's inputs include an attention_mask with padding."""
    import inspect

    from litert_zoo.models import hf

    assert "_masked(" in inspect.getsource(hf), "text encoders must be fed attention masks"
    from litert_zoo.build import text_inputs

    named = text_inputs()
    assert list(named) == ["input_ids", "attention_mask", "token_type_ids"]
    assert named["attention_mask"][0].all() and not named["attention_mask"][1].all()


def test_importing_the_zoo_imports_no_model_library_and_the_toolkit_never_imports_it():
    code = ("import sys; sys.path.insert(0, 'zoo'); import litert_zoo.models, litert_zoo.cli\n"
            "print(sorted(m for m in ('torch', 'transformers', 'timm', 'torchvision', 'diffusers', 'ultralytics')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-1500:] + out.stdout
    toolkit = ROOT / "utilities" / "litert_gpu_toolkit"
    assert not (toolkit / "zoo").exists()
    users = [p for p in toolkit.rglob("*.py") if "litert_zoo" in p.read_text()]
    assert not users, users


def test_user_outputs_returns_every_top_level_tensor():
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    a, b = torch.ones(2, 3), torch.zeros(2)
    out = BaseModelOutputWithPooling(last_hidden_state=a, pooler_output=b, hidden_states=(a, a))
    assert [t is x for t, x in zip(user_outputs(out), (a, b))] == [True, True]
    assert len(user_outputs((a, [a, a]))) == 1                  # a feature list is not an output users read
    assert user_outputs(((a, b), [a]))[1] is b                    # nothing at the top: the first item's tensors
    assert len(user_outputs({"out": a, "aux": b})) == 2
    with pytest.raises(TypeError):
        user_outputs("text")


def test_wrap_calls_by_keyword_and_returns_one_or_many():
    class M(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return {"x": input_ids * 2.0, "m": attention_mask.float()}

    w = wrap(M(), ("input_ids", "attention_mask"))
    x, m = w(torch.ones(1, 2), torch.zeros(1, 2))
    assert float(x.sum()) == 4.0 and float(m.sum()) == 0.0


def test_redraw_gives_unit_scale_activations():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3),
                                torch.nn.Linear(28, 28))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1e-6)                              # a default init that leaves activations tiny
        redraw_weights(model)
        out = model(torch.randn(1, 3, 32, 32))
    assert 0.05 < float(out.std()) < 20


def _row(name, verdict, lib="timm"):
    return ZooRow(name, "vision", 10, RunSummary("FALLBACK"), RunSummary(verdict, "GPU residency: 5/5 ops", 0.99999),
                  library=lib)


def test_guard_names_rows_that_passed_and_stopped():
    before = {"a": _row("a", "PASS"), "b": _row("b", "FALLBACK"), "c": _row("c", "PASS")}
    now = {"a": _row("a", "FALLBACK"), "b": _row("b", "PASS"), "c": _row("c", "PASS")}
    assert regressions(before, now, ["a", "b", "c"]) == ["a"]
    assert regressions(before, now, ["b", "c"]) == []


def test_table_is_generated_from_results(tmp_path):
    rows = {"vit": _row("vit", "PASS", "transformers"), "timm_resnet18": _row("timm_resnet18", "FALLBACK")}
    rows["timm_resnet18"].gpu.note = "strict GPU compile rejected ABS"
    path = tmp_path / "results.json"
    save_results(path, rows, {"ai-edge-litert": "2.3.0", "gpu": "llvmpipe (LLVM)", "gpu_is_software": True})
    assert load_results(path)["vit"].gpu.corr_fp16 == 0.99999
    out = _zoo("--table-only", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    table = (tmp_path / "README.md").read_text()
    assert "**convert_for_gpu: 1/2 PASS**" in table and "llvmpipe (software Vulkan), ai-edge-litert 2.3.0" in table
    assert "| timm | 1 | 0 | 0 |" in table and "rejected ABS" in table


def test_weights_mode_table_states_its_own_floor_and_the_weights_line():
    """A weights mode's headline names the mode and its corr floor (not the float mode's 0.999), and every row
    says which weights were quantized and which stayed float."""
    from litert_gpu_toolkit.quantize.plan import DEFAULT_MIN_CORR

    row = _row("vit", "PASS", "transformers")
    row.gpu.weights = "int8: 14 of 14 weight tensors (14 int8 per channel on the op (dynamic-range))"
    env = {"ai-edge-litert": "2.3.0", "gpu": "llvmpipe (LLVM)", "gpu_is_software": True, "weights": "int8"}
    table = render_table({"vit": row}, env)
    assert "with int8 weights" in table.splitlines()[0]
    assert "weights='int8'): 1/1 PASS" in table and f"corr >= {DEFAULT_MIN_CORR['int8']:g}" in table
    assert "corr >= 0.999 vs torch" not in table
    assert "14 of 14 weight tensors" in table and "--weights int8" in table


@pytest.mark.parametrize("sub", ["weights_fp16", "weights_int8", "library_init"])
def test_committed_mode_readmes_match_their_results(sub):
    data = json.loads((ROOT / "zoo" / sub / "results.json").read_text())
    rows = {d["name"]: row_from_dict(d) for d in data["rows"]}
    env = data["environment"]
    assert (env["weights"] == sub.split("_")[1]) if sub.startswith("weights_") else env["activations"] == "library"
    readme = (ROOT / "zoo" / sub / "README.md").read_text()
    assert render_table(rows, env).rstrip() in readme
    if sub == "library_init":
        assert "at each library's own initialisation" in readme and "--activations library" in readme


def test_committed_readme_matches_committed_results():
    data = json.loads((ROOT / "zoo" / "results.json").read_text())
    rows = {d["name"]: row_from_dict(d) for d in data["rows"]}
    assert render_table(rows, data["environment"]).rstrip() in (ROOT / "zoo" / "README.md").read_text()


def test_every_row_has_a_result_and_convert_for_gpu_never_raised():
    """The committed run covers the whole zoo, and on no row did convert_for_gpu raise or its worker crash or hang
    (a failure is a verdict with its cause, never an exception)."""
    data = json.loads((ROOT / "zoo" / "results.json").read_text())
    rows = {d["name"]: row_from_dict(d) for d in data["rows"]}
    assert set(ZOO) <= set(rows), sorted(set(ZOO) - set(rows))
    for name in ZOO:
        row = rows[name]
        assert not row.error, f"{name}: {row.error}"
        for summary in (row.gpu, row.plain):
            assert summary is not None and summary.verdict != "RAISED", f"{name}: {summary}"


@pytest.mark.parametrize("args, message", [
    (["--only", "nope"], "unknown zoo row"), (["--library", "keras"], "unknown library"),
    (["--jobs", "0"], "--jobs must be at least 1"), (["--table-only", "--out", "{tmp}"], "no results"),
    (["--fast", "--runtime", "1.4.0"], "predates the CompiledModel API")])
def test_bad_arguments_are_clear_errors(tmp_path, args, message):
    out = _zoo(*[a.replace("{tmp}", str(tmp_path)) for a in args], "--out", str(tmp_path))
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr[-800:]


def test_list_and_help():
    out = _zoo("--list")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == len(ZOO)
    out = _zoo("--help")
    assert out.returncode == 0 and "Exit status" in out.stdout and "guard" in out.stdout


@pytest.mark.slow
@pytest.mark.sweep
def test_every_row_builds_with_finite_outputs():
    """Every builder, in .venv-zoo: the model builds from its config and its outputs are finite (a few minutes)."""
    code = ("import sys, torch; sys.path.insert(0, 'zoo')\nfrom litert_zoo.models import ZOO\nbad = []\n"
            "for n, m in ZOO.items():\n    try:\n        mod, x = m.build()\n        with torch.no_grad():\n"
            "            out = mod(*x)\n        outs = out if isinstance(out, tuple) else (out,)\n"
            "        assert all(torch.isfinite(o).all() for o in outs)\n"
            "    except Exception as e:\n        bad.append(f'{n}: {type(e).__name__}: {e}'[:200])\n"
            "print('BAD', bad)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "YOLO_OFFLINE": "1"}
    out = subprocess.run([zoo_python(), "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=1800,
                         env=env)
    assert out.returncode == 0 and "BAD []" in out.stdout, out.stdout[-3000:] + out.stderr[-2000:]


@pytest.mark.gpu
def test_fast_subset_passes_and_nothing_regressed(gpu, tmp_path):
    """The CI subset (one row or more of every library) end to end, guarded by the committed results: a row that
    passed there and fails here exits 3. Each file is checked under the installed runtime (the newest release) and
    again under the oldest one with a GPU accelerator (`--also-runtime`), against the same torch outputs."""
    from litert_gpu_toolkit.runtime.versions import OLDEST_WITH_GPU

    out = _zoo("--fast", "--out", str(tmp_path), "--baseline", str(ROOT / "zoo" / "results.json"),
               "--also-runtime", OLDEST_WITH_GPU, timeout=2400, python=zoo_python())
    rows = load_results(tmp_path / "results.json")
    fast = [m.name for m in ROWS if m.fast]
    assert set(rows) == set(fast), out.stdout[-2000:] + out.stderr[-2000:]
    for name in fast:
        row = rows[name]
        assert row.passed, (name, row)
        assert row.gpu.corr_fp16 >= 0.999 and "strict GPU" in row.gpu.residency
        old = row.runtimes[OLDEST_WITH_GPU]
        assert old["verdict"] == "PASS" and "strict GPU" in old["residency"] and old["corr_fp16"] >= 0.999, old
    assert out.returncode == 0, out.stderr[-2000:]


def test_saved_notes_carry_no_machine_paths(tmp_path):
    row = _row("a", "CONVERT_FAIL")
    row.gpu.note = ("AttributeError (at /tmp/snap/zoo/litert_zoo/models/hf.py:258 in <lambda>) File "
                    f"'{sys.prefix}/lib/python3.11/site-packages/torch/nn/modules/module.py', log /tmp/zoo_x/a.log")
    row.error = f"worker exited 1: {ROOT}/utilities/litert_gpu_toolkit/convert/pipeline.py"
    save_results(tmp_path / "results.json", {"a": row}, {})
    text = (tmp_path / "results.json").read_text()
    assert "/tmp/" not in text and str(ROOT) not in text and sys.prefix not in text, text
    assert "zoo/litert_zoo/models/hf.py:258" in text and "site-packages/torch/nn" in text


def test_a_numerics_fail_row_says_what_bisect_found():
    from litert_zoo.rows import RunSummary, ZooRow
    from litert_zoo.table import _why

    bound = ("diagnosis: degraded at m.features.9; needs more than fp16 (torch with fp16 tensors is wrong too): see "
             "the precision plan in the diagnosis")
    row = ZooRow("m", "vision", gpu=RunSummary("NUMERICS_FAIL", corr_fp32=1.0, attempts=["rewritten: x", bound]))
    assert "bisect: degraded at m.features.9; needs more than fp16 (torch with fp16 tensors is wrong too)" in _why(row)
    assert "see the precision plan" not in _why(row)
    row.gpu.verdict = "PASS"
    assert "bisect" not in _why(row)


def test_a_row_passes_only_when_every_also_runtime_passes():
    from litert_zoo.table import _why

    row = _row("m", "PASS")
    row.runtimes = {"2.1.2": {"verdict": "PASS", "residency": "GPU residency: 5/5 ops", "corr_fp16": 0.9999}}
    assert row.passed
    row.runtimes["2.1.3"] = {"verdict": "COMPILE_FAIL", "note": "read failed"}
    assert not row.passed and "under ai-edge-litert 2.1.3: COMPILE_FAIL read failed" in _why(row)
    assert row_from_dict(json.loads(json.dumps(asdict(row)))).runtimes == row.runtimes
