#!/usr/bin/env python
"""GPU init with and without the program cache, side by side, through the native runner (the phone's C API path).

    .venv/bin/python scripts/measure_program_cache.py --record           # the recipe graphs on disk, 3 rounds
    .venv/bin/python scripts/measure_program_cache.py --graphs A.tflite B.tflite --rounds 5

Each round times three compiles of each graph, in turn: no cache; a cold cache (an empty folder: the compile
writes the model's programs there); a warm cache (the same folder: the compile reads them back, which the
accelerator's log confirms). Init is the strict GPU-only compile; first is the first run after it. Mesa's own
shader cache is switched off (MESA_SHADER_CACHE_DISABLE) so a driver cache from an earlier run does not make the
"no cache" compile warm. The figures are medians over rounds of this machine's wall times: read the ratios, not
the milliseconds. --record writes docs/data/program_cache.json and regenerates docs/performance.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "utilities"))

from litert_gpu_toolkit.core.atomic_file import write_text_atomic  # noqa: E402

RECORD = ROOT / "docs" / "data" / "program_cache.json"
MODES = ("none", "cold", "warm")


def default_graphs() -> list[Path]:
    sys.path.insert(0, str(ROOT / "scripts"))
    from runtime_matrix import default_graphs as recipe_graphs

    return recipe_graphs()


def measure(graph: Path, rounds: int, timeout: float) -> dict:
    from litert_gpu_toolkit.cli.benchmark import benchmark_file

    times: dict[str, dict[str, list[float]]] = {m: {"init": [], "first": []} for m in MODES}
    read = {m: [] for m in MODES}
    row = {}
    for r in range(rounds):
        with tempfile.TemporaryDirectory(prefix="program_cache_") as cache:
            for mode in MODES:
                row = benchmark_file(graph, runs=1, warmup=0, accelerator="gpu", fp32=False, inputs=None,
                                     runtime=None, timeout=timeout, runner="native",
                                     cache=None if mode == "none" else Path(cache))
                if row["status"] != "measured":
                    return {"status": row["status"]}
                times[mode]["init"].append(row["latency_ms"]["init"])
                times[mode]["first"].append(row["latency_ms"]["first_inference"])
                read[mode].append(bool((row.get("program_cache") or {}).get("read")))
            cache_bytes = sum(p.stat().st_size for p in Path(cache).iterdir())     # what the cold compile wrote
        print(f"  round {r + 1}: " + ", ".join(f"{m} init {times[m]['init'][-1]:.0f} ms" for m in MODES), flush=True)
    med = {m: {k: round(statistics.median(v), 1) for k, v in times[m].items()} for m in MODES}
    return {"status": "measured", "nodes": f"{row['nodes_delegated']}/{row['nodes_total']}", "median_ms": med,
            "warm_over_none_init": round(med["warm"]["init"] / med["none"]["init"], 3),
            "cold_over_none_init": round(med["cold"]["init"] / med["none"]["init"], 3),
            "warm_read_every_round": all(read["warm"]), "cold_read_any_round": any(read["cold"]),
            "cache_bytes": cache_bytes, "model_bytes": graph.stat().st_size, "device": row["device"],
            "runtime_version": row["runtime_version"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", nargs="+", type=Path, help="the .tflite files (default: the recipe graphs on disk)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of none / cold / warm per graph (default 3)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per compile+run (default 600)")
    p.add_argument("--record", action="store_true", help=f"write {RECORD.relative_to(ROOT)} and the docs")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    graphs = [g.resolve() for g in (args.graphs or default_graphs())]
    missing = [str(g) for g in graphs if not g.is_file()]
    if missing or not graphs:
        p.error(f"no such graph: {', '.join(missing)}" if missing else "no recipe graph on disk: pass --graphs")
    os.environ["MESA_SHADER_CACHE_DISABLE"] = "true"       # the runner inherits it
    found = {}
    for i, graph in enumerate(graphs, 1):
        name = graph.relative_to(ROOT).as_posix() if graph.is_relative_to(ROOT) else graph.name
        print(f"[{i}/{len(graphs)}] {name}", flush=True)
        found[name] = measure(graph, args.rounds, args.timeout)
        entry = found[name]
        if entry["status"] == "measured":
            print(f"  init warm/none {entry['warm_over_none_init']}, cold/none {entry['cold_over_none_init']}; "
                  f"cache read on every warm compile: {entry['warm_read_every_round']}", flush=True)
        else:
            print(f"  {entry['status']}", flush=True)
    if args.record:
        data = {"command": "scripts/measure_program_cache.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                "date": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d}", "rounds": args.rounds, "graphs": found}
        write_text_atomic(RECORD, json.dumps(data, indent=1, sort_keys=True) + "\n")
        subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py")], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
