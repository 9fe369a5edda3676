#!/usr/bin/env python
"""The graph pass (`legalize`) against the spelling rewrites, side by side on zoo rows.

    .venv-zoo/bin/python scripts/measure_legalize.py                 # the zoo's CI subset (--fast rows)
    .venv-zoo/bin/python scripts/measure_legalize.py --only bert,swin
    .venv-zoo/bin/python scripts/measure_legalize.py --record        # writes docs/data/legalize_ablation.json

Each row is converted three ways with `convert_for_gpu`, fallback off so that each file is what that mode makes:
  both      the defaults (module and spelling rewrites, then the pass);
  pass      the pass alone (`only=("legalize",)`: no module swap, no spelling handler);
  handlers  the rewrites without the pass (`exclude=("legalize",)`).
Per mode: verdict, residency, op count, and where the file runs GPU-only the median strict-GPU latency over
--repeats runs (zeros fed; the three files of a row are timed one after the other in this run, so the ratio is
a same-run comparison -- the absolute numbers are a shared machine's). Device: whatever the checker finds
(llvmpipe, software Vulkan, here).
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


def measure_row(name: str, work: Path, repeats: int) -> dict:
    from litert_gpu_toolkit import convert_for_gpu
    from litert_gpu_toolkit.core.model_info import read_model_info
    from litert_zoo.runner import ZOO

    model, inputs = ZOO[name].build()
    row = {"model": name, "library": ZOO[name].library}
    for mode, options in MODES.items():
        t0 = time.perf_counter()
        path = work / f"{name}_{mode}.tflite"
        try:
            result = convert_for_gpu(model, inputs, path, fallback=False, diagnose_budget_s=0, **options)
        except Exception as e:                               # noqa: BLE001 - a result, not a crash
            row[mode] = {"verdict": "RAISED", "note": f"{type(e).__name__}: {e}"[:200]}
            continue
        entry = {"verdict": result.verdict, "seconds": round(time.perf_counter() - t0, 1)}
        if result.path and Path(result.path).exists():
            entry["ops"] = sum(read_model_info(result.path).op_histogram().values())
        if result.report is not None:
            entry["residency"] = (result.report.residency or {}).get("line")
        if result.ok:
            entry["gpu_ms"] = _latency_ms(Path(result.path), repeats)
        row[mode] = entry
        print(f"  {name:28s} {mode:9s} {entry['verdict']:14s} ops={entry.get('ops')} ms={entry.get('gpu_ms')}",
              flush=True)
    for mode in ("pass", "handlers"):
        a, b = row["both"].get("gpu_ms"), row[mode].get("gpu_ms")
        row[f"{mode}_over_both"] = round(b / a, 3) if a and b else None
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="", help="comma-separated zoo rows (default: the --fast CI subset)")
    p.add_argument("--repeats", type=int, default=20, help="timed runs per file (median; default %(default)s)")
    p.add_argument("--record", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    args = p.parse_args(argv)
    from litert_zoo.runner import ZOO, _toolkit_commit

    import litert_gpu_toolkit.legalize  # noqa: F401 - loaded now: the commit below is the code every row runs
    commit = _toolkit_commit()
    names = [n for n in args.only.split(",") if n] or [n for n, m in ZOO.items() if m.fast]
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        p.error(f"unknown rows: {', '.join(unknown)} (zoo/run.py --list names them)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="legalize-ablation-") as tmp:
        for i, name in enumerate(names, 1):
            print(f"[{i}/{len(names)}] {name}", flush=True)
            rows.append(measure_row(name, Path(tmp), args.repeats))
    for mode in MODES:
        ok = sum(r[mode].get("verdict") == "PASS" for r in rows)
        print(f"{mode:9s} PASS {ok}/{len(rows)}")
    if args.record:
        from litert_gpu_toolkit.runtime.residency import runtime_version

        device = f"{', '.join(sorted(ADAPTERS)) or 'no GPU run'}, ai-edge-litert {runtime_version()}"
        OUT.write_text(json.dumps({"command": "scripts/measure_legalize.py " + " ".join(argv or sys.argv[1:]),
                                   "device": device, "toolkit_commit": commit, "rows": rows}, indent=1) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
