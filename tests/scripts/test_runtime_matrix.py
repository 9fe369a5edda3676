"""scripts/runtime_matrix.py: the minimum runtime of a graph and the upgrade report, from records."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("runtime_matrix", ROOT / "scripts" / "runtime_matrix.py")
runtime_matrix = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runtime_matrix)


def _entry(verdict, rejected=None, corr=0.9999):
    return {"verdict": verdict, "residency": None, "min_corr_fp16": corr, "rejected": rejected or {}}


def test_the_minimum_runtime_is_where_every_later_version_passes():
    per = {"2.1.3": _entry("PASS"), "2.1.5": _entry("COMPILE_FAIL"), "2.2.0": _entry("PASS"), "2.3.0": _entry("PASS")}
    assert runtime_matrix.minimum_runtime(per) == "2.2.0"
    assert runtime_matrix.minimum_runtime({**per, "2.3.0": _entry("FALLBACK")}) == "-"


def test_the_upgrade_report_names_every_change(tmp_path, monkeypatch):
    graphs = {"g.tflite": {"2.2.0": _entry("FALLBACK", {"RELU_0_TO_1": "Not supported"}, 0.99990),
                           "2.3.0": _entry("PASS", {}, 0.99700)},
              "same.tflite": {"2.2.0": _entry("PASS"), "2.3.0": _entry("PASS")}}
    walls = {"walls": {"relu_0_to_1": {"results": {"2.2.0": {"class": "rejected"},
                                                   "2.3.0": {"class": "accepted", "why": "corr 1"}}}}}
    (tmp_path / "r.json").write_text(json.dumps({"graphs": graphs}))
    (tmp_path / "w.json").write_text(json.dumps(walls))
    monkeypatch.setattr(runtime_matrix, "RECORD", tmp_path / "r.json")
    monkeypatch.setattr(runtime_matrix, "WALLS", tmp_path / "w.json")
    lines = runtime_matrix.upgrade_report("2.2.0", "2.3.0")
    assert lines == ["wall relu_0_to_1: rejected -> accepted (corr 1)",
                     "graph g.tflite: FALLBACK -> PASS (-)",
                     "graph g.tflite: RELU_0_TO_1 newly accepted",
                     "graph g.tflite: fp16 corr 0.999900 -> 0.997000"]


def test_the_zoo_subset_is_converted_once_and_read_per_version(tmp_path, monkeypatch):
    """zoo_subset runs `zoo/run.py --fast --also-runtime V` once and reads each row's installed-runtime verdict and
    its per-version checks into graph-shaped entries."""
    import subprocess

    from litert_gpu_toolkit.runtime.versions import installed_version

    calls = []

    def fake_run(cmd, check=False):
        calls.append(cmd)
        out = Path(cmd[cmd.index("--out") + 1])
        row = {"name": "bert", "gpu": {"verdict": "PASS", "residency": "GPU residency: 9/9 ops", "corr_fp16": 0.9999},
               "runtimes": {"2.1.2": {"verdict": "COMPILE_FAIL", "residency": "", "corr_fp16": None,
                                      "note": "read failed"}}}
        (out / "results.json").write_text(json.dumps({"rows": [row]}))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(runtime_matrix.subprocess, "run", fake_run)
    monkeypatch.setenv("LITERT_ZOO_PYTHON", str(Path(__file__)))          # any existing file: the run is faked
    found = runtime_matrix.zoo_subset([installed_version(), "2.1.2"], 60)
    assert len(calls) == 1 and calls[0][calls[0].index("--also-runtime") + 1] == "2.1.2"
    assert "--runtime" not in calls[0]
    per = found["zoo --fast: bert"]
    assert per[installed_version()]["verdict"] == "PASS" and per["2.1.2"]["verdict"] == "COMPILE_FAIL"
    assert per["2.1.2"]["summary"] == "read failed" and per["2.1.2"]["rejected"] == {}
