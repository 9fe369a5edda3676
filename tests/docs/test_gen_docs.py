"""Every generated block (results, symptoms, bench, zoo) comes from its data through scripts/gen_docs.py."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from litert_gpu_toolkit.core import generated as blocks_module

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)
blocks = blocks_module  # the one marker style, shared by gen_docs.py and the zoo


def test_committed_tables_are_current():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_results_record_is_complete():
    for path in ROOT.glob("models/*/*/converted/results.json"):
        for key, record in json.loads(path.read_text()).items():
            for field in ("graph", "device", "device_label", "residency", "metrics", "gates", "passed", "date",
                          "command"):
                assert field in record, f"{path}: {key} lacks {field}"
            assert record["passed"] == all(record["gates"].values()), f"{path}: {key}"


def test_splice_replaces_only_the_marked_block():
    text = f"# Title\n\nintro\n\n{blocks.begin('results', 'x')}\nold\n{blocks.end('results')}\n\nafter\n"
    new = blocks.splice(text, "results", "x", "NEW TABLE", "## Results")
    assert "old" not in new and "NEW TABLE" in new and new.endswith("after\n") and new.startswith("# Title")
    appended = blocks.splice("# Title\n", "results", "x", "T", "## Results")
    assert "## Results" in appended and blocks.begin("results", "x") in appended
    other = blocks.splice(new, "symptoms", "y", "S", "## Symptoms")      # a second block leaves the first alone
    assert "NEW TABLE" in other and other.count("BEGIN GENERATED") == 2


def test_one_marker_style_everywhere():
    """No file keeps an old-style marker; every BEGIN GENERATED has its END."""
    for path in list(ROOT.glob("**/*.md")):
        if ".venv" in path.parts:
            continue
        text = path.read_text()
        assert "BEGIN RESULTS" not in text and "BEGIN SYMPTOMS" not in text and "bench_rewrites:begin" not in text, path
        for line in text.splitlines():
            if line.startswith("<!-- BEGIN GENERATED "):
                name = line.split()[3].rstrip(":")
                assert f"<!-- END GENERATED {name} -->" in text, (path, name)


def test_recipe_table_renders_metrics_and_gates():
    records = {"enc@host-gpu": {"graph": "enc", "device": "host-gpu", "device_label": "llvmpipe (software Vulkan)",
                                "residency": "GPU residency: 5/5 ops, 1 partition (strict GPU)",
                                "metrics": {"min_cosine": 0.99991, "nn_agreement": 1.0},
                                "gates": {"min cosine >= 0.999": True}, "date": "2026-11-29", "git_commit": "abc",
                                "command": "verify_encoder.py"}}
    table = gen.recipe_table(records)
    assert "5/5 ops" in table and "min_cosine: 0.99991" in table and "✅ min cosine >= 0.999" in table


def test_top_table_shows_the_declared_headline_metrics():
    base = {"graph": "enc", "device": "cpu", "device_label": "CPU", "residency": "CPU: 5 ops",
            "metrics": {"a": 1.5, "b": 2.5, "c": 3.5, "latency_ms_median": 7.25}, "gates": {"g": True}}
    declared = gen.headline_metrics({**base, "headline": ["latency_ms_median", "a"]})
    assert declared == [("latency_ms_median", 7.25), ("a", 1.5)]
    assert gen.headline_metrics(base) == [("a", 1.5), ("b", 2.5), ("c", 3.5)]  # records from before `headline`
    row = gen.top_table([(gen.ROOT / "models" / "x" / "y", {"enc@cpu": {**base, "headline": ["c"]}})])
    assert "| c 3.5 |" in row and "a 1.5" not in row


def test_committed_data_names_no_absolute_path():
    """Records are committed from one machine and read on others: no value may name a folder of that machine."""
    def strings(o):
        if isinstance(o, dict):
            for v in o.values():
                yield from strings(v)
        elif isinstance(o, list):
            for v in o:
                yield from strings(v)
        elif isinstance(o, str):
            yield o

    files = (list(ROOT.glob("models/*/*/converted/results.json")) + list(ROOT.glob("docs/data/*.json"))
             + list(ROOT.glob("zoo/results.json")))
    assert files
    for path in files:
        bad = [s for s in strings(json.loads(path.read_text())) if s.startswith("/") or str(ROOT) in s]
        assert not bad, f"{path.relative_to(ROOT)} names absolute paths: {bad[:3]}"


def test_no_tracked_file_names_this_checkout():
    """No committed file (code, tests, docs, data) names the folder this checkout lives in."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    here = str(ROOT)
    bad = [name for name in listed.stdout.splitlines()
           if (ROOT / name).is_file() and here in (ROOT / name).read_text(errors="ignore")]
    assert not bad, f"files naming {here}: {bad}"
