#!/usr/bin/env python
"""The graph pass (`legalize`) against the spelling rewrites, side by side on zoo rows.

    .venv-zoo/bin/python scripts/measure_legalize.py                 # the zoo's CI subset (--fast rows)
    .venv-zoo/bin/python scripts/measure_legalize.py --only bert,swin
    .venv-zoo/bin/python scripts/measure_legalize.py --record        # merges rows into docs/data/legalize_ablation.json
    .venv-zoo/bin/python scripts/measure_legalize.py --without patch_chunk,patch_select --record

Each row is converted three ways with `convert_for_gpu`, fallback off so that each file is what that mode makes:
  both      the defaults (module and spelling rewrites, then the pass);
  pass      the pass alone (`only=("legalize",)`: no module swap, no spelling handler);
  handlers  the rewrites without the pass (`exclude=("legalize",)`).
Per mode: verdict, residency, op count, and where the file runs GPU-only the median strict-GPU latency over
--repeats runs (zeros fed; the three files of a row are timed one after the other in this run, so the ratio is
a same-run comparison -- the absolute numbers are a shared machine's). Device: whatever the checker finds
(llvmpipe, software Vulkan, here).

--without NAMES asks, per spelling rewrite, whether the pass has made it redundant: each named rewrite is turned
off alone (`exclude=(name,)`, everything else the defaults) on the zoo rows where zoo/results.json says it fired
(at most --rows of them, spread over libraries), beside the defaults in the same run. A rewrite is redundant on a
row when the row keeps its verdict without it and its graph is no larger; the records merge, per rewrite, into
docs/data/handler_redundancy.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "utilities"), str(ROOT / "zoo")]

MODES = {"both": {}, "pass": {"only": ("legalize",)}, "handlers": {"exclude": ("legalize",)}}
OUT = ROOT / "docs" / "data" / "legalize_ablation.json"
REDUNDANCY = ROOT / "docs" / "data" / "handler_redundancy.json"
ZOO_RESULTS = ROOT / "zoo" / "results.json"


ADAPTERS: set[str] = set()


def _latency_ms(path: Path, repeats: int) -> float | None:
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    from litert_gpu_toolkit.runtime.compiled import compile_and_run

    runner = Interpreter(model_path=str(path))
    feeds = {}
    for key, sig in runner.get_signature_list().items():
        details = runner.get_signature_runner(key).get_input_details()
        feeds[key] = {name: np.zeros(d["shape"], dtype=d["dtype"]) for name, d in details.items()}
    run = compile_and_run(path, feeds, accelerator="gpu", repeats=repeats)
    if run.gpu.adapter:
        ADAPTERS.add(run.gpu.adapter)
    return round(1000.0 * sum(run.run_s.values()), 3) if run.ok else None


def convert_one(model, inputs, path: Path, options: dict, repeats: int, label: str) -> dict:
    """One conversion (fallback off: the file is what these options make): verdict, ops, residency, latency."""
    from litert_gpu_toolkit import convert_for_gpu
    from litert_gpu_toolkit.core.model_info import read_model_info

    t0 = time.perf_counter()
    try:
        result = convert_for_gpu(model, inputs, path, fallback=False, diagnose_budget_s=0, **options)
    except Exception as e:                               # noqa: BLE001 - a result, not a crash
        entry = {"verdict": "RAISED", "note": f"{type(e).__name__}: {e}"[:200]}
        print(f"  {label:40s} RAISED {entry['note']}", flush=True)
        return entry
    entry = {"verdict": result.verdict, "seconds": round(time.perf_counter() - t0, 1)}
    if result.path and Path(result.path).exists():
        entry["ops"] = sum(read_model_info(result.path).op_histogram().values())
    if result.report is not None:
        entry["residency"] = (result.report.residency or {}).get("line")
    if result.ok:
        entry["gpu_ms"] = _latency_ms(Path(result.path), repeats)
    print(f"  {label:40s} {entry['verdict']:14s} ops={entry.get('ops')} ms={entry.get('gpu_ms')}", flush=True)
    return entry


def rows_where_fired(rewrite: str, limit: int) -> list[str]:
    """Zoo rows whose recorded defaults applied `rewrite`, one library at a time in turn, at most `limit`."""
    from litert_zoo.runner import ZOO

    by_library: dict[str, list[str]] = {}
    for row in json.loads(ZOO_RESULTS.read_text())["rows"]:
        if rewrite in (row.get("gpu") or {}).get("rewrites", []) and row["name"] in ZOO:
            by_library.setdefault(row.get("library", ""), []).append(row["name"])
    picked: list[str] = []
    while len(picked) < limit and any(by_library.values()):
        for names in by_library.values():
            if names and len(picked) < limit:
                picked.append(names.pop(0))
    return picked


def redundancy(rewrites: list[str], limit: int, repeats: int, work: Path, record=None) -> dict:
    """Per rewrite: its rows, each converted with the defaults and without that rewrite, and the verdict;
    record(name, entry), when given, is called as each rewrite is done."""
    from litert_zoo.runner import ZOO

    built: dict[str, tuple] = {}
    defaults: dict[str, dict] = {}
    out: dict[str, dict] = {}
    for rewrite in rewrites:
        rows = []
        names = rows_where_fired(rewrite, limit)
        print(f"{rewrite}: {len(names)} rows ({', '.join(names) or 'none recorded'})", flush=True)
        for name in names:
            if name not in built:
                built[name] = ZOO[name].build()
                defaults[name] = convert_one(*built[name], work / f"{name}_both.tflite", {}, repeats,
                                             f"{name} defaults")
            without = convert_one(*built[name], work / f"{name}_without.tflite", {"exclude": (rewrite,)},
                                  repeats, f"{name} without {rewrite}")
            both = defaults[name]
            same = without.get("verdict") == both.get("verdict")
            smaller = (without.get("ops") or 10**9) <= (both.get("ops") or 0)
            ratio = (round(without["gpu_ms"] / both["gpu_ms"], 3)
                     if without.get("gpu_ms") and both.get("gpu_ms") else None)
            rows.append({"model": name, "library": ZOO[name].library, "both": both, "without": without,
                         "without_over_both": ratio, "redundant": bool(same and smaller)})
        out[rewrite] = {"rows": rows, "redundant": bool(rows) and all(r["redundant"] for r in rows)}
        print(f"  => {rewrite}: redundant on {sum(r['redundant'] for r in rows)}/{len(rows)} rows: "
              f"{'redundant' if out[rewrite]['redundant'] else 'needed'}", flush=True)
        if record is not None:
            record(rewrite, out[rewrite])
    return out


def measure_row(name: str, work: Path, repeats: int) -> dict:
    from litert_zoo.runner import ZOO

    model, inputs = ZOO[name].build()
    row = {"model": name, "library": ZOO[name].library}
    for mode, options in MODES.items():
        row[mode] = convert_one(model, inputs, work / f"{name}_{mode}.tflite", options, repeats, f"{name:28s} {mode}")
    for mode in ("pass", "handlers"):
        a, b = row["both"].get("gpu_ms"), row[mode].get("gpu_ms")
        row[f"{mode}_over_both"] = round(b / a, 3) if a and b else None
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="", help="comma-separated zoo rows (default: the --fast CI subset)")
    p.add_argument("--repeats", type=int, default=20, help="timed runs per file (median; default %(default)s)")
    p.add_argument("--record", action="store_true",
                   help=f"merge each row into {OUT.relative_to(ROOT)} as it is done (with --without: into "
                        f"{REDUNDANCY.relative_to(ROOT)})")
    p.add_argument("--without", default="",
                   help="comma-separated rewrite names: is each redundant beside the pass? (see above)")
    p.add_argument("--rows", type=int, default=3, help="with --without: rows per rewrite (default %(default)s)")
    args = p.parse_args(argv)
    from litert_zoo.runner import ZOO, _toolkit_commit

    import litert_gpu_toolkit.legalize  # noqa: F401 - loaded now: the commit below is the code every row runs
    commit = _toolkit_commit()
    if args.without:
        from litert_gpu_toolkit.rewrites.registry import check_names

        rewrites = [n for n in args.without.split(",") if n]
        try:
            check_names(rewrites, "--without")
        except ValueError as e:
            p.error(str(e))
        record = None
        if args.record:
            from litert_gpu_toolkit.runtime.residency import runtime_version

            command = "scripts/measure_legalize.py " + " ".join(argv or sys.argv[1:])

            def record(name: str, entry: dict) -> None:       # after each rewrite: a stopped run keeps what it did
                data = json.loads(REDUNDANCY.read_text()) if REDUNDANCY.exists() else {"rewrites": {}}
                device = f"{', '.join(sorted(ADAPTERS)) or 'no GPU run'}, ai-edge-litert {runtime_version()}"
                data["rewrites"][name] = {**entry, "device": device, "toolkit_commit": commit, "command": command}
                REDUNDANCY.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
                print(f"  recorded in {REDUNDANCY.relative_to(ROOT)}", flush=True)
        with tempfile.TemporaryDirectory(prefix="handler-redundancy-") as tmp:
            redundancy(rewrites, args.rows, args.repeats, Path(tmp), record)
        return 0
    names = [n for n in args.only.split(",") if n] or [n for n, m in ZOO.items() if m.fast]
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        p.error(f"unknown rows: {', '.join(unknown)} (zoo/run.py --list names them)")
    rows = []
    command = "scripts/measure_legalize.py " + " ".join(argv or sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="legalize-ablation-") as tmp:
        for i, name in enumerate(names, 1):
            print(f"[{i}/{len(names)}] {name}", flush=True)
            rows.append(measure_row(name, Path(tmp), args.repeats))
            if args.record:
                _record_row(rows[-1], command, commit)
    for mode in MODES:
        ok = sum(r[mode].get("verdict") == "PASS" for r in rows)
        print(f"{mode:9s} PASS {ok}/{len(rows)}")
    return 0


def _record_row(row: dict, command: str, commit: str) -> None:
    """Merge one measured row into OUT after it is done (a stopped run keeps what it did): a row measured again
    replaces its earlier record; each row says which command, commit and device measured it."""
    from litert_gpu_toolkit.runtime.residency import runtime_version

    data = json.loads(OUT.read_text()) if OUT.exists() else {"rows": []}
    for key in ("command", "device", "toolkit_commit"):        # the file-wide fields of older records: per row now
        if key in data:
            for old in data["rows"]:
                old.setdefault(key, data[key])
            del data[key]
    device = f"{', '.join(sorted(ADAPTERS)) or 'no GPU run'}, ai-edge-litert {runtime_version()}"
    row = {**row, "command": command, "device": device, "toolkit_commit": commit}
    data["rows"] = [r for r in data["rows"] if r["model"] != row["model"]] + [row]
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"  recorded in {OUT.relative_to(ROOT)}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
