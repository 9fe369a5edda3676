"""The transformers zoo: weights redrawn to O(1) activations, the table generated from results.json,
and the CI subset (`--fast`) run end to end through `convert_for_gpu` on the GPU."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch


pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[3]
from litert_gpu_toolkit.zoo import ZOO, redraw_weights
from litert_gpu_toolkit.zoo.rows import RunSummary, ZooRow, load_results, row_from_dict, save_results
from litert_gpu_toolkit.zoo.table import render_table

RUN_ZOO = [sys.executable, "-m", "litert_gpu_toolkit", "zoo"]


def test_zoo_is_big_and_covers_every_domain():
    assert len(ZOO) >= 30
    assert {m.domain for m in ZOO.values()} == {"vision", "audio", "text", "llm", "multimodal"}
    assert 2 <= sum(m.fast for m in ZOO.values()) <= 5


def test_redraw_gives_unit_scale_activations():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3),
                                torch.nn.Linear(28, 28))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1e-6)                              # a default init that leaves activations tiny
        redraw_weights(model)
        out = model(torch.randn(1, 3, 32, 32))
    assert 0.05 < float(out.std()) < 20


@pytest.mark.parametrize("name", ["vit", "bert", "gpt2"])
def test_fast_models_build_with_finite_unit_scale_outputs(name):
    module, inputs = ZOO[name].build()
    with torch.no_grad():
        out = module(*inputs)
    assert torch.isfinite(out).all() and 0.1 < float(out.float().std()) < 10


def test_table_is_generated_from_results(tmp_path):
    rows = {
        "vit": ZooRow(
            "vit",
            "vision",
            1000,
            RunSummary("FALLBACK", corr_fp16=None),
            RunSummary("PASS", "GPU residency: 5/5 ops", 0.99999, rewrites=["patch_amax"]),
            seconds=3.0,
        ),
        "t5_encoder": ZooRow(
            "t5_encoder",
            "text",
            10,
            RunSummary("FALLBACK"),
            RunSummary("FALLBACK", note="strict GPU compile rejected ABS", dropped=["patch_x"]),
        ),
    }
    path = tmp_path / "results.json"
    save_results(path, rows, {"ai-edge-litert": "2.3.0", "gpu": "llvmpipe (LLVM)", "gpu_is_software": True})
    assert load_results(path)["vit"].gpu.corr_fp16 == 0.99999
    out = subprocess.run(
        [*RUN_ZOO, "--table-only", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert out.returncode == 0, out.stderr
    table = (tmp_path / "README.md").read_text()
    assert "**convert_for_gpu: 1/2 PASS**" in table and "llvmpipe (software Vulkan), ai-edge-litert 2.3.0" in table
    assert "| t5_encoder |" in table and "rejected ABS" in table and "patch_x" in table


def test_committed_readme_matches_committed_results():
    results = ROOT / "zoo" / "results.json"
    if not results.exists():
        pytest.skip("no committed zoo results")
    data = json.loads(results.read_text())
    rows = {d["name"]: row_from_dict(d) for d in data["rows"]}
    assert render_table(rows, data["environment"]).rstrip() in (ROOT / "zoo" / "README.md").read_text()


def test_unknown_model_is_a_clear_error(tmp_path):
    out = subprocess.run(
        [*RUN_ZOO, "--only", "nope", "--out", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode != 0 and "unknown zoo model" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.gpu
def test_fast_subset_passes_through_convert_for_gpu(gpu, tmp_path):
    """The CI subset, end to end (a few minutes on 2 CPU cores)."""
    out = subprocess.run(
        [*RUN_ZOO, "--fast", "--out", str(tmp_path)], capture_output=True, text=True, timeout=900
    )
    rows = load_results(tmp_path / "results.json")
    fast = [m.name for m in ZOO.values() if m.fast]
    assert set(rows) == set(fast), out.stdout[-2000:] + out.stderr[-2000:]
    for name in fast:
        row = rows[name]
        assert row.passed, (name, row)
        assert row.gpu.corr_fp16 >= 0.999 and "strict GPU" in row.gpu.residency
    assert out.returncode == 0
