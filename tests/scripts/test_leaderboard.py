"""scripts/leaderboard.py: what its record keeps of the command that measured each row."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("leaderboard", ROOT / "scripts" / "leaderboard.py")
leaderboard = importlib.util.module_from_spec(spec)
sys.modules["leaderboard"] = leaderboard          # its dataclasses look their module up there
spec.loader.exec_module(leaderboard)


def test_the_recorded_command_leaves_out_where_the_files_were_kept():
    assert leaderboard.recorded_command(["--only", "resnet18", "--keep", "/some/folder", "--record"]) == \
        "scripts/leaderboard.py --only resnet18 --record"
    assert leaderboard.recorded_command(["--keep=/x", "--runs", "2"]) == "scripts/leaderboard.py --runs 2"


def test_every_recorded_row_names_its_command_and_no_folder_of_a_machine():
    import json

    rows = json.loads((ROOT / "docs" / "data" / "leaderboard.json").read_text())["rows"]
    assert rows and all(r["command"].startswith("scripts/leaderboard.py ") and "--keep" not in r["command"]
                        for r in rows.values())
