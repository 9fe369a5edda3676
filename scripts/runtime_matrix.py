#!/usr/bin/env python
"""Recipe graphs under every ai-edge-litert version, and what an upgrade changes.

    .venv/bin/python scripts/runtime_matrix.py --runtime all --record         # every recipe graph, every version
    .venv/bin/python scripts/runtime_matrix.py --graphs models/vision/mtcnn/converted/artifacts/pnet.tflite \
        --runtime 2.1.3 --runtime 2.2.0
    .venv/bin/python scripts/runtime_matrix.py --upgrade 2.2.0 2.3.0          # the upgrade report, from the records

Each graph (default: the float graph of every recipe found under models/*/*/converted/artifacts/, built by the
recipe's export script) is checked with `check --runtime` semantics: strict GPU-only under each version, seeded
random inputs -- or `<graph stem>_inputs.npz` beside the graph where a recipe writes its real inputs (SmolLM2's
dump_llm_ref.py: a random mask and random rotary tables mean nothing) -- compared with the installed runtime's CPU
outputs. --record merges the results into
docs/data/runtime_recipes.json (per graph and version: verdict, residency, lowest fp16 corr, rejected ops) and
regenerates the table in docs/runtime-walls.md, whose "minimum runtime" column is the oldest version measured from
which every later one PASSes.

--zoo also runs the zoo's CI subset (`zoo/run.py --fast --also-runtime VERSION ...`, in .venv-zoo): every row
converted once through convert_for_gpu and its file checked strict GPU-only against torch under each version; its
rows join the record as "zoo --fast: NAME". (To convert under a version too: `zoo/run.py --runtime VERSION`.)

--upgrade OLD NEW is the upgrade check: it measures OLD and NEW on the walls suite, the graphs and the zoo's CI
subset (unless --no-run, which reads the records only) and prints every wall, graph and verdict that differs
between them -- newly accepted, newly rejected, numerics moved by more than 0.001 in correlation. "nightly" names
the newest development build (ai-edge-litert-nightly). Device: the GPU the runtime finds (llvmpipe, software
Vulkan, here).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "utilities"))

from litert_gpu_toolkit.core.atomic_file import write_text_atomic  # noqa: E402

RECORD = ROOT / "docs" / "data" / "runtime_recipes.json"
WALLS = ROOT / "utilities" / "litert_gpu_toolkit" / "lint" / "runtime_walls.json"
QUANTIZED = re.compile(r"_(fp16|int8|int4)$")
CORR_MOVED = 1e-3


def default_graphs() -> list[Path]:
    """Every recipe's float graphs that its export has written (quantized variants left out)."""
    return sorted(p for p in ROOT.glob("models/*/*/converted/artifacts/**/*.tflite")
                  if not QUANTIZED.search(p.stem) and not any(part.startswith(".") for part in p.parts))


def measure(graphs: list[Path], versions: list[str], timeout: float) -> dict:
    from litert_gpu_toolkit.check.runtimes import runtime_matrix

    out = {}
    for i, path in enumerate(graphs, 1):
        name = path.relative_to(ROOT).as_posix()
        own = path.with_name(f"{path.stem}_inputs.npz")     # a recipe's real inputs where random ones mean nothing
        print(f"[{i}/{len(graphs)}] {name}" + (f" on {own.name}" if own.is_file() else ""), flush=True)
        matrix = runtime_matrix(path, versions, timeout=timeout, skip_unusable=True,
                                inputs=str(own) if own.is_file() else None)
        out[name] = {}
        for row in matrix.rows:
            rep = row.report
            out[name][row.version] = {"verdict": rep.verdict, "residency": (rep.residency or {}).get("line"),
                                      "min_corr_fp16": row.min_corr, "rejected": row.rejected,
                                      "summary": rep.summary[:300]}
            print(f"  {row.version:8s} {rep.verdict:14s} {(rep.residency or {}).get('line') or '-'}  "
                  f"corr {row.min_corr}", flush=True)
    return out


def zoo_subset(versions: list[str], timeout: float) -> dict:
    """The zoo's CI subset: each row converted once through convert_for_gpu (installed runtime) and its file
    checked under every other version against the same torch outputs (`zoo/run.py --fast --also-runtime`):
    "zoo --fast: NAME" -> version -> the same fields as a graph."""
    from litert_gpu_toolkit.runtime.versions import installed_version

    python = Path(os.environ.get("LITERT_ZOO_PYTHON") or ROOT / ".venv-zoo" / "bin" / "python")
    if not python.exists():
        raise SystemExit(f"--zoo: no zoo environment at {python}; run ./zoo/setup.sh")
    installed = installed_version()
    others = [v for v in versions if v != installed]
    with tempfile.TemporaryDirectory(prefix="zoo_runtime_") as tmp:
        print(f"zoo --fast, checked under {', '.join([installed, *others])}", flush=True)
        subprocess.run([str(python), str(ROOT / "zoo" / "run.py"), "--fast", "--out", tmp, "--timeout",
                        str(int(timeout)), *[x for v in others for x in ("--also-runtime", v)]], check=False)
        results = Path(tmp) / "results.json"
        rows = json.loads(results.read_text())["rows"] if results.exists() else []
    out: dict = {}
    for row in rows:
        gpu = row.get("gpu") or {}
        per = {installed: {"verdict": gpu.get("verdict") or "ERROR", "residency": gpu.get("residency") or None,
                           "min_corr_fp16": gpu.get("corr_fp16"), "summary": (row.get("error") or gpu.get("note")
                                                                               or "")[:300]}}
        for v, r in (row.get("runtimes") or {}).items():
            per[v] = {"verdict": r.get("verdict"), "residency": r.get("residency") or None,
                      "min_corr_fp16": r.get("corr_fp16"), "summary": (r.get("note") or "")[:300]}
        out[f"zoo --fast: {row['name']}"] = {v: {**e, "rejected": {}} for v, e in per.items()}
    return out


def minimum_runtime(per_version: dict) -> str:
    """The oldest version measured from which every later measured version PASSes; '-' when the newest fails."""
    from litert_gpu_toolkit.runtime.versions import parse_version

    oldest = "-"
    for v in sorted(per_version, key=parse_version, reverse=True):
        if per_version[v]["verdict"] != "PASS":
            break
        oldest = v
    return oldest


def upgrade_report(old: str, new: str) -> list[str]:
    """Every wall and graph whose class, verdict, rejected ops or numerics differ between OLD and NEW."""
    lines = []
    walls = json.loads(WALLS.read_text())["walls"] if WALLS.exists() else {}
    for name, wall in sorted(walls.items()):
        a, b = (wall["results"].get(v) for v in (old, new))
        if a is None or b is None:
            lines.append(f"wall {name}: not measured under {old if a is None else new}")
        elif a["class"] != b["class"]:
            lines.append(f"wall {name}: {a['class']} -> {b['class']} ({b.get('why', '')})")
    graphs = json.loads(RECORD.read_text())["graphs"] if RECORD.exists() else {}
    for name, per in sorted(graphs.items()):
        a, b = per.get(old), per.get(new)
        if a is None or b is None:
            lines.append(f"graph {name}: not measured under {old if a is None else new}")
            continue
        if a["verdict"] != b["verdict"]:
            lines.append(f"graph {name}: {a['verdict']} -> {b['verdict']} ({b.get('residency') or '-'})")
        for op in sorted(set(b["rejected"]) - set(a["rejected"])):
            lines.append(f"graph {name}: {op} newly rejected ({b['rejected'][op]})")
        for op in sorted(set(a["rejected"]) - set(b["rejected"])):
            lines.append(f"graph {name}: {op} newly accepted")
        ca, cb = a.get("min_corr_fp16"), b.get("min_corr_fp16")
        if isinstance(ca, float) and isinstance(cb, float) and abs(ca - cb) > CORR_MOVED:
            lines.append(f"graph {name}: fp16 corr {ca:.6f} -> {cb:.6f}")
    return lines


def main(argv=None) -> int:
    from litert_gpu_toolkit.runtime.versions import RuntimeVersionError, resolve

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtime", action="append", default=[], metavar="VERSION",
                   help="a version to check under (repeatable; 'all'); the installed one always runs")
    p.add_argument("--graphs", nargs="+", type=Path, help="the .tflite files (default: every recipe's float graphs)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per compile+run child (default 600)")
    p.add_argument("--record", action="store_true", help=f"merge into {RECORD.relative_to(ROOT)} and regenerate "
                                                        "docs/runtime-walls.md")
    p.add_argument("--upgrade", nargs=2, metavar=("OLD", "NEW"), help="print what changes from OLD to NEW")
    p.add_argument("--no-run", action="store_true", help="with --upgrade: read the records, measure nothing")
    p.add_argument("--zoo", action="store_true", help="also run the zoo's CI subset under each version (with "
                                                     "--upgrade: always)")
    args = p.parse_args(argv)
    graphs = [g.resolve() for g in (args.graphs or default_graphs())]
    missing = [str(g) for g in graphs if not g.exists()]
    if missing:
        p.error(f"no such graph: {', '.join(missing)}")
    if not graphs and not args.no_run:
        p.error("no recipe graph found: run the recipes' export scripts first, or pass --graphs")
    try:
        upgrade = resolve(args.upgrade[:1]) + resolve(args.upgrade[1:]) if args.upgrade else []
        versions = resolve(args.runtime + upgrade)
    except RuntimeVersionError as e:
        p.error(str(e))
    if not args.no_run:
        if upgrade:                                   # the walls suite too, for the two versions
            subprocess.run([sys.executable, str(ROOT / "scripts" / "runtime_walls.py"), "--record",
                            *[x for v in upgrade for x in ("--runtime", v)]], check=True)
        found = measure(graphs, versions, args.timeout)
        if args.zoo or upgrade:
            found.update(zoo_subset(versions, args.timeout))
        if args.record or args.upgrade:
            data = json.loads(RECORD.read_text()) if RECORD.exists() else {"graphs": {}}
            for name, per in found.items():
                data["graphs"].setdefault(name, {}).update(per)
            command = "scripts/runtime_matrix.py " + " ".join(argv if argv is not None else sys.argv[1:])
            data["commands"] = [c for c in data.get("commands", [data.get("command")]) if c] + [command]
            data.pop("command", None)                 # each run's command is kept: the columns come from several
            write_text_atomic(RECORD, json.dumps(data, indent=1, sort_keys=True) + "\n")
            subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py")], check=True)
    if upgrade:
        old, new = upgrade
        lines = upgrade_report(old, new)
        print(f"\nupgrade {old} -> {new}: {len(lines)} change(s)")
        for line in lines:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
