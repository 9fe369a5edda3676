"""Every recipe's recipe.yaml: it loads, names scripts that exist, and declares every graph, gate, device and
command that its results.json records (so the card and the rerun script cannot drift from what was run)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from litert_gpu_toolkit.recipe.devices import Device
from litert_gpu_toolkit.recipe.metadata import MetadataError, load_metadata, recipe_folders

ROOT = Path(__file__).resolve().parents[2]
RECIPES = recipe_folders(ROOT / "models")


def test_every_recipe_has_metadata():
    assert len(RECIPES) >= 11
    missing = [p.name for p in RECIPES if not (p / "recipe.yaml").is_file()]
    assert not missing, f"recipes without recipe.yaml: {missing}"


@pytest.mark.parametrize("folder", RECIPES, ids=[p.name for p in RECIPES])
def test_metadata_names_existing_scripts(folder):
    meta = load_metadata(folder)
    commands = [c.split()[0] for c in meta.rerun] + [g.export.split()[0] for g in meta.graphs.values()]
    absent = sorted({c for c in commands if not (meta.converted / c).is_file()})
    assert not absent, f"{folder.name}: recipe.yaml names scripts that are not in converted/: {absent}"
    assert any(c.startswith("export_") for c in meta.rerun) and any(c.startswith("verify_") for c in meta.rerun)


@pytest.mark.parametrize("folder", RECIPES, ids=[p.name for p in RECIPES])
def test_metadata_declares_what_results_record(folder):
    meta = load_metadata(folder)
    results = folder / "converted" / "results.json"
    records = json.loads(results.read_text()) if results.is_file() else {}
    for key, r in records.items():
        assert r["graph"] in meta.graphs, f"{key}: graph {r['graph']!r} is not in recipe.yaml's graphs"
        assert r["device"] in meta.devices, f"{key}: device {r['device']!r} is not in recipe.yaml's devices"
        assert r["command"] in meta.rerun, f"{key}: {r['command']!r} is not one of recipe.yaml's rerun commands"
        unknown = set(r["gates"]) - set(meta.gates)
        assert not unknown, f"{key}: gates {sorted(unknown)} are not in recipe.yaml's gates"
    recorded = {g for r in records.values() for g in r["gates"]}
    assert set(meta.gates) <= recorded, f"declared but never recorded: {sorted(set(meta.gates) - recorded)}"


@pytest.mark.parametrize("folder", RECIPES, ids=[p.name for p in RECIPES])
def test_devices_are_devices(folder):
    for d in load_metadata(folder).devices:
        if not d.startswith("litertlm-"):          # LiteRT-LM's backends, recorded by run_litertlm.py
            Device(d)                              # raises on an unknown device


def _write(tmp_path, text: str) -> Path:
    (tmp_path / "recipe.yaml").write_text(text)
    return tmp_path


GOOD = """name: n
task: t
source: {model: m, licence: MIT}
weights: {package: p==1}
graphs: {g: {export: export_g.py, inputs: x, outputs: y}}
metric: m
gates: [a]
devices: [cpu]
rerun: [export_g.py]
"""


def test_a_good_file_loads(tmp_path):
    meta = load_metadata(_write(tmp_path, GOOD))
    assert meta.graphs["g"].export == "export_g.py" and meta.rerun_commands() == [["export_g.py"]]
    assert meta.tolerates_exit_1(["verify_g.py"]) and not meta.tolerates_exit_1(["export_g.py"])


@pytest.mark.parametrize("text, says", [
    (GOOD.replace("metric: m\n", ""), "`metric` must be a non-empty str"),
    (GOOD + "extra: 1\n", "unknown key(s) extra"),
    (GOOD.replace("{export: export_g.py, inputs: x, outputs: y}", "{export: export_g.py}"), "graph 'g' needs"),
    (GOOD.replace("rerun: [export_g.py]", "rerun: ['']"), "every entry of `rerun`"),
    ("name: [unclosed", "not valid YAML"),
    ("- a list", "expected a mapping"),
])
def test_a_bad_file_is_one_clear_error(tmp_path, text, says):
    with pytest.raises(MetadataError, match="recipe.yaml") as err:
        load_metadata(_write(tmp_path, text))
    assert says in str(err.value)


def test_a_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(MetadataError, match="cannot read"):
        load_metadata(tmp_path)


def test_rerun_script_lists_and_refuses_unknown_names():
    script = [sys.executable, str(ROOT / "scripts" / "rerun_recipes.py")]
    listed = subprocess.run([*script, "--list", "mobilenet_v2"], capture_output=True, text=True, check=True)
    assert "export_classifier.py" in listed.stdout and "verify_classifier.py --device host-gpu" in listed.stdout
    bad = subprocess.run([*script, "no_such_recipe"], capture_output=True, text=True)
    assert bad.returncode == 2 and "no recipe named no_such_recipe" in bad.stderr
