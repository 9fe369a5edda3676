"""The provenance sidecar an export writes, and what a verify record reads back from it."""
import argparse
import json
import sys
from pathlib import Path

from litert_gpu_toolkit.recipe.provenance import read_provenance, sha256, write_provenance
from litert_gpu_toolkit.runtime.tiny_models import add_model_bytes


def test_sidecar_names_the_file_and_no_folder_of_this_machine(tmp_path, monkeypatch):
    recipe = tmp_path / "converted"
    (recipe / "artifacts").mkdir(parents=True)
    model = recipe / "artifacts" / "g.tflite"
    model.write_bytes(add_model_bytes())
    monkeypatch.setattr(sys, "argv", [str(recipe / "export_g.py"), "--model", str(model)])
    args = argparse.Namespace(model=model, ref=Path("/elsewhere/r.npz"), size=[2, 3], weights=None)
    record = json.loads(write_provenance(model, args).read_text())
    assert record["sha256"] == sha256(model) and record["file"] == "g.tflite" and record["ops"] >= 1
    assert record["flags"] == {"model": "artifacts/g.tflite", "ref": "/elsewhere/r.npz", "size": [2, 3],
                               "weights": None}
    assert str(tmp_path) not in json.dumps(record["flags"])
    assert read_provenance(model)["sha256"] == record["sha256"] and "note" not in read_provenance(model)


def test_a_stale_or_missing_sidecar_is_said(tmp_path, monkeypatch):
    model = tmp_path / "g.tflite"
    model.write_bytes(add_model_bytes())
    assert "not written by a recipe's export" in read_provenance(model)["note"]
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "export_g.py")])
    write_provenance(model)
    model.write_bytes(add_model_bytes() + b"\0")        # the file changed after its export
    assert "describes another file" in read_provenance(model)["note"]
