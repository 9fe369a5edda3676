"""scripts/bench_rewrite_cost.py: the plain vs defaults latency table on full-size models (its --quick smoke test)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "bench_rewrite_cost.py"


def _run(*args, timeout=900):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, message", [(["--devices", "tpu"], "--devices"), (["--rounds", "0"], "at least 1"),
                                           (["--only", "alexnet"], "unknown rows"),
                                           (["--record", "--quick"], "full-size")])
def test_bad_arguments_are_clear_errors(args, message):
    out = _run(*args, timeout=120)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr[-800:]


@pytest.mark.slow
def test_quick_run_pairs_the_two_graphs_on_the_cpu(tmp_path):
    out = _run("--quick", "--devices", "cpu", "--rounds", "2", "--repeats", "1", "--only", "resnet50,bert_base",
               "--json", str(tmp_path / "cost.json"))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    data = json.loads((tmp_path / "cost.json").read_text())
    assert [r["model"] for r in data["rows"]] == ["resnet50", "bert_base"]
    for row in data["rows"]:
        assert row["plain"]["ops"] > 0 and row["rewritten"]["ops"] > 0, row
        cpu = row["cpu"]
        assert cpu["rounds"] == 2 and cpu["ratio"] > 0 and cpu["plain"]["status"] == "ok", row
    bert = data["rows"][1]
    assert "patch_safe_layernorm" in bert["rewrites"]          # the insurance the table prices
    assert data["summary"]["cpu"]["rows_with_ratio"] == 2 and data["summary"]["gpu"]["rows_with_ratio"] == 0
    assert all(row["measured"] for row in data["rows"])          # each row is dated: --record --only mixes runs
    assert f"| bert_base ({bert['measured']}) |" in out.stdout and "Median ratio (rewritten / plain)" in out.stdout


def test_record_only_replaces_those_rows_and_keeps_the_others(tmp_path, monkeypatch):
    """--record --only: the measured rows replace theirs, the others stay as recorded, in the script's row order,
    and the summary is recomputed over all of them (the measurement itself is stubbed: this is the bookkeeping)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_rewrite_cost", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    import gen_docs

    record = tmp_path / "docs" / "data" / "rewrite_cost.json"
    record.parent.mkdir(parents=True)
    old = [{"model": n, "cpu": {"ratio": 1.2}, "gpu": {"ratio": None}, "date": "2026-11-01"}
           for n in ("gpt2_12l", "vit_b16", "resnet50")]
    record.write_text(json.dumps({"rows": old}))
    monkeypatch.setattr(bench, "RECORD", record)
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    monkeypatch.setattr(bench, "_configs", lambda quick: [(n, None) for n in bench.ROWS])
    monkeypatch.setattr(bench, "measure_row", lambda name, *a: {"model": name, "cpu": {"ratio": 1.0},
                                                                  "gpu": {"ratio": None}, "date": "2026-12-03"})
    monkeypatch.setattr(gen_docs, "render_rewrite_cost", lambda data: "")
    assert bench.main(["--record", "--only", "resnet50,efficientnet_b0", "--devices", "cpu"]) == 0
    data = json.loads(record.read_text())
    assert [r["model"] for r in data["rows"]] == ["vit_b16", "resnet50", "gpt2_12l", "efficientnet_b0"]
    assert [r["date"] for r in data["rows"]] == ["2026-11-01", "2026-12-03", "2026-11-01", "2026-12-03"]
    assert data["summary"]["cpu"]["median_ratio"] == 1.1 and data["summary"]["cpu"]["rows_with_ratio"] == 4
