"""The one way the tests run a recipe script: as a user does, in a child process, offline, timed.

`run_script(path, *args)` returns the CompletedProcess with `.seconds` added. With `check=True` (default) an exit
status outside `ok` fails the test with the script's last output; `check=False` returns whatever happened.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_script(script: str | os.PathLike, *args, cwd: str | os.PathLike | None = None, env: dict | None = None,
               timeout: float = 900, check: bool = True, ok=(0,)) -> subprocess.CompletedProcess:
    script = Path(script)
    env = dict(os.environ if env is None else env)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "utilities"), env.get("PYTHONPATH")) if p)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(script), *map(str, args)], cwd=cwd or script.parent, env=env,
                          capture_output=True, text=True, timeout=timeout)
    proc.seconds = time.perf_counter() - start
    if check:
        assert proc.returncode in ok, (f"{script.name} {' '.join(map(str, args))} exited {proc.returncode}:\n"
                                       f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc
