#!/usr/bin/env python3
"""Re-run recipes end to end -- the `rerun` commands of each recipe.yaml, in order, in its converted/ folder -- so
that every record in their results.json comes from the code as it is now, with the graph's provenance.

    python scripts/rerun_recipes.py                       every recipe (slow: about an hour on 2 shared cores)
    python scripts/rerun_recipes.py mobilenet_v2 mtcnn    some of them (names: the folders under models/<family>/)
    python scripts/rerun_recipes.py --list                the recipes and their commands, nothing run

Then `python scripts/gen_docs.py` refreshes the READMEs' tables. A recipe stops at its first failing step; a verify
(or run_*) step that exits 1 has recorded its failing gates -- a result, not a broken run -- and the recipe goes
on. Exit status: 0 every recipe ran, 1 a step of some recipe failed (named at the end), 2 an unknown recipe name.
Environment: LITERT_VENV picks the interpreter's virtual environment (default .venv).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "utilities"))
from litert_gpu_toolkit.recipe.metadata import MetadataError, load_metadata, recipe_folders  # noqa: E402


def python() -> str:
    venv = Path(os.environ.get("LITERT_VENV", ROOT / ".venv"))
    exe = venv / "bin" / "python"
    return str(exe) if exe.exists() else sys.executable


def rerun(meta, exe: str) -> str | None:
    """Run one recipe's commands; the failing command, or None."""
    for argv in meta.rerun_commands():
        print(f"[rerun] {meta.folder.name}: {' '.join(argv)}", flush=True)
        start = time.perf_counter()
        code = subprocess.run([exe, *argv], cwd=meta.converted).returncode
        print(f"[rerun] {meta.folder.name}: exit {code} in {time.perf_counter() - start:.0f} s", flush=True)
        if code and not (code == 1 and meta.tolerates_exit_1(argv)):
            return " ".join(argv)
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipes", nargs="*", help="recipe folder names (default: every recipe)")
    parser.add_argument("--list", action="store_true", help="print the recipes and their commands; run nothing")
    args = parser.parse_args(argv)
    try:
        metas = {m.folder.name: m for m in map(load_metadata, recipe_folders(ROOT / "models"))}
    except MetadataError as exc:
        parser.exit(2, f"error: {exc}\n")
    unknown = [n for n in args.recipes if n not in metas]
    if unknown:
        parser.exit(2, f"error: no recipe named {', '.join(unknown)} (have: {', '.join(metas)})\n")
    chosen = [metas[n] for n in args.recipes or metas]
    if args.list:
        for m in chosen:
            print(f"{m.folder.relative_to(ROOT)}:\n" + "".join(f"  {c}\n" for c in m.rerun))
        return 0
    failed = {}
    for m in chosen:
        bad = rerun(m, python())
        if bad:
            failed[m.folder.name] = bad
    for name, command in failed.items():
        print(f"[rerun] FAILED {name}: {command}", file=sys.stderr)
    print(f"[rerun] done; now: {Path(python()).name} scripts/gen_docs.py")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
