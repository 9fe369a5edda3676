"""`benchmark`: init / first / steady latency in the leaderboard's field names."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from litert_gpu_toolkit.cli.benchmark import FIELDS, LATENCY_FIELDS, latency_ms
from litert_gpu_toolkit.runtime.tiny_models import add_model_bytes


def test_the_first_run_and_the_warm_up_stay_out_of_the_steady_figures():
    times = [0.5, 0.2, 0.2, 0.010, 0.012, 0.011, 0.013]          # seconds: first, 2 warm-up, 4 steady
    lat = latency_ms(1.25, times, warmup=2)
    assert lat["init"] == 1250.0 and lat["first_inference"] == 500.0
    assert lat["min"] == 10.0 and lat["max"] == 13.0 and lat["median"] == 11.5
    assert lat["p5"] == pytest.approx(10.15) and lat["p95"] == pytest.approx(12.85)
    assert set(lat) == set(LATENCY_FIELDS)


@pytest.mark.gpu
def test_benchmark_writes_leaderboard_rows(gpu, tmp_path):
    model = tmp_path / "add.tflite"
    model.write_bytes(add_model_bytes())
    out = tmp_path / "rows.jsonl"
    proc = subprocess.run([sys.executable, "-m", "litert_gpu_toolkit", "benchmark", str(model), "--runs", "5",
                           "--warmup", "1", "--rounds", "2", "--jsonl", str(out)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2]
    for row in rows:
        assert set(FIELDS) <= set(row) and row["status"] == "measured"
        assert (row["nodes_delegated"], row["nodes_total"], row["partitions"]) == (1, 1, 1)
        lat = row["latency_ms"]
        assert set(lat) == set(LATENCY_FIELDS) and lat["min"] <= lat["median"] <= lat["max"] and lat["init"] > 0
        assert row["runs"] == 5 and row["warmup_runs"] == 1 and row["runtime_version"]
    bad = subprocess.run([sys.executable, "-m", "litert_gpu_toolkit", "benchmark", str(tmp_path / "none.tflite")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no such file" in bad.stderr
