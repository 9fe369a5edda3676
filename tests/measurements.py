"""Numbers the docs quote, recorded by the tests that assert them.

A test takes the `measured` fixture and calls `measured(block, row, **values)` next to its assertions.
`python -m pytest ... --record-measurements` then merges what was measured into docs/data/measured.json
(one entry per block: the device, the command, the date, the commit, the rows), and
`python scripts/gen_docs.py` renders the blocks in the toolkit's REFERENCE.md from that file. So every
measured number in the reference comes from an asserted test run, names its device, and is never typed.
"""
from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "measured.json"
OPTION = "--record-measurements"


class Recorder:
    def __init__(self):
        self.blocks: dict[str, dict[str, dict]] = {}

    def __call__(self, block: str, row: str, **values) -> None:
        self.blocks.setdefault(block, {}).setdefault(row, {}).update(values)

    def write(self, argv: list[str], path: Path = DATA) -> Path:
        """Merge the recorded blocks into `path` (atomic): a block measured now replaces its old entry whole."""
        from litert_gpu_toolkit.core.atomic_file import write_text_atomic
        from litert_gpu_toolkit.recipe.results import git_commit
        from litert_gpu_toolkit.runtime.residency import gpu_label
        from litert_gpu_toolkit.runtime.testing import cached_probe

        gpu = cached_probe().gpu
        device, commit = gpu_label(gpu.adapter, gpu.is_software, gpu.backend), git_commit(ROOT)
        data = json.loads(path.read_text()) if path.exists() else {}
        command = "python -m pytest " + " ".join(a for a in argv if not a.startswith("--rootdir"))
        for block, rows in self.blocks.items():
            data[block] = {"device": device, "command": command, "date": datetime.date.today().isoformat(),
                           "git_commit": commit, "rows": rows}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(dict(sorted(data.items())), indent=1) + "\n")
        return path


RECORDER = Recorder()


def finish(config) -> None:
    """At the end of a session run with --record-measurements: write what was measured (not from xdist workers)."""
    if not config.getoption(OPTION) or hasattr(config, "workerinput"):
        return
    if not RECORDER.blocks:
        print(f"\n{OPTION}: no test measured anything (were the gpu tests selected?)", file=sys.stderr)
        return
    path = RECORDER.write(list(config.invocation_params.args))
    print(f"\n{OPTION}: {', '.join(sorted(RECORDER.blocks))} -> {path.relative_to(ROOT)}; "
          "now run python scripts/gen_docs.py", file=sys.stderr)
