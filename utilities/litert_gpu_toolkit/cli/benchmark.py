"""Time a .tflite the way a phone app pays for it: GPU compile (init), the first run, then the steady latency.

One compile in a child process, then `--warmup` + `--runs` runs on seeded random inputs (or `--inputs`); the first
run after the compile is `first_inference`, the warm-up runs are left out of the steady figures. The result is one
JSON object per file in the field names of LiteRT's published device-farm leaderboard (`nodes_delegated`,
`nodes_total`, `partitions`, `latency_ms.{init, first_inference, median, avg, p5, p95, min, max, stddev}`,
`runtime_version`, `device`, ...), so a row from here and a row from there can be read side by side; `--jsonl OUT`
appends it to a JSON-lines file. `--runner native` times the C API runner a phone app's code path uses (built for
this machine); with `--cache DIR` it turns on the GPU program cache there (the first compile writes the model's
programs, the next reads them: `program_cache.read` says whether it did). Each figure is a wall time of this
machine: compare two files with ratios from one run (`benchmark A.tflite B.tflite` times them in turn, `--rounds`
times over), never bare numbers across runs.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
from pathlib import Path

import numpy as np

from ..core.arguments import seconds

FIELDS = ("model", "file", "model_size_mb", "platform", "device", "accelerator", "delegate", "nodes_delegated",
          "nodes_total", "partitions", "latency_ms", "runs", "warmup_runs", "runtime", "runtime_version", "runner",
          "status", "date", "program_cache")
LATENCY_FIELDS = ("init", "first_inference", "median", "avg", "p5", "p95", "min", "max", "stddev")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("models", nargs="+", metavar="MODEL", help="the .tflite file(s) to time, in turn")
    p.add_argument("--runs", type=int, default=20, help="timed steady runs after the warm-up (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="runs after the first, left out of the figures (default 3)")
    p.add_argument("--rounds", type=int, default=1, help="passes over the files, in turn (default 1); each row "
                                                        "keeps its round number")
    p.add_argument("--accelerator", choices=("gpu", "cpu"), default="gpu",
                   help="gpu: strict GPU-only (default); cpu: LiteRT's CPU")
    p.add_argument("--fp32", action="store_true", help="ask the GPU for fp32 (enforce_f32) instead of its default")
    p.add_argument("--inputs", metavar="NPZ", help="input arrays (.npz by input name); default: seeded random")
    p.add_argument("--runner", choices=("python", "native"), default="python",
                   help="python: the Python CompiledModel in a child process (default); native: the C API runner "
                        "(the phone's, built for this machine)")
    p.add_argument("--cache", metavar="DIR", type=Path,
                   help="with --runner native: the GPU program cache folder (made if missing); keyed by the model's "
                        "bytes and the precision, so a changed model never reads another's programs")
    p.add_argument("--runtime", metavar="VERSION", help="run under this ai-edge-litert version (a side environment, "
                                                        "as `check --runtime`)")
    p.add_argument("--timeout", type=seconds, default=600.0, help="seconds per file, at least 10 (default 600)")
    p.add_argument("--jsonl", metavar="OUT", help="append each row to this JSON-lines file")


def latency_ms(compile_s: float | None, times: list[float], warmup: int) -> dict:
    """The leaderboard's latency block from one compile and every run's seconds (first run first)."""
    steady = times[1 + warmup:] or times[1:] or times
    ms = [t * 1000.0 for t in steady]
    return {"init": None if compile_s is None else round(compile_s * 1000.0, 3),
            "first_inference": round(times[0] * 1000.0, 3) if times else None,
            "median": round(statistics.median(ms), 3), "avg": round(statistics.fmean(ms), 3),
            "p5": round(float(np.percentile(ms, 5)), 3), "p95": round(float(np.percentile(ms, 95)), 3),
            "min": round(min(ms), 3), "max": round(max(ms), 3),
            "stddev": round(statistics.stdev(ms), 3) if len(ms) > 1 else 0.0}


def benchmark_file(path: Path, *, runs: int, warmup: int, accelerator: str, fp32: bool, inputs, runtime,
                   timeout: float, runner: str = "python", cache: Path | None = None) -> dict:
    """One row for `path` (leaderboard field names; `status` "measured" or the failure). runner "native" runs the
    C API runner (installed runtime only), with the GPU program cache in `cache` when given."""
    from ..core.inputs import make_inputs
    from ..core.model_info import read_model_info
    from ..runtime.compiled import compile_and_run
    from ..runtime.residency import residency
    from ..runtime.versions import installed_version

    info = read_model_info(path)
    feeds = make_inputs(info, inputs, seed=0)[0]
    key = next(iter(feeds))
    if runner == "native":
        from ..phone.native import run_native

        run = run_native(path, {key: feeds[key]}, accelerator=accelerator, enforce_f32=fp32, timeout=timeout,
                         repeats=1 + warmup + runs, cache_dir=cache)
    else:
        run = compile_and_run(path, {key: feeds[key]}, accelerator=accelerator, enforce_f32=fp32, timeout=timeout,
                              repeats=1 + warmup + runs, runtime=runtime)
    res = residency(info, run)
    row = {"model": path.stem, "file": path.name, "model_size_mb": round(path.stat().st_size / 1e6, 4),
           "platform": platform.system().lower(), "device": run.gpu.adapter if accelerator == "gpu" else
           f"CPU ({platform.machine()})", "accelerator": accelerator,
           "delegate": (f"{run.gpu.backend or 'GPU'}{' fp32' if fp32 else ''}" if accelerator == "gpu"
                        else "XNNPACK"),
           "nodes_delegated": res.gpu_ops if accelerator == "gpu" else res.total_ops, "nodes_total": res.total_ops,
           "partitions": res.partitions if accelerator == "gpu" else 1, "latency_ms": None, "runs": runs,
           "warmup_runs": warmup, "runtime": "litert", "runtime_version": run.runtime or installed_version(),
           "runner": runner, "program_cache": run.cache, "status": "measured",
           "date": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d}",
           "signature": key, "software_gpu": run.gpu.is_software if accelerator == "gpu" else None}
    times = run.times.get(key) or []
    if not run.ok or not times:
        row["status"] = f"failed: {run.status}: {(run.error or '')[:200]}"
        return row
    row["latency_ms"] = latency_ms(run.compile_s, times, warmup)
    return row


def _line(row: dict) -> str:
    lat = row.get("latency_ms") or {}
    if not lat:
        return f"{row['file']}: {row['status']}"
    return (f"{row['file']}: {row['accelerator']} {row['nodes_delegated']}/{row['nodes_total']} nodes, "
            f"{row['partitions']} partition(s); init {lat['init']} ms, first {lat['first_inference']} ms, "
            f"median {lat['median']} ms (p5 {lat['p5']}, p95 {lat['p95']}, n={row['runs']}); "
            f"{row['device']}, ai-edge-litert {row['runtime_version']}, {row['runner']} runner" +
            (f"; program cache {'read' if row['program_cache']['read'] else 'written'}" if row.get("program_cache")
             else ""))


def run(args: argparse.Namespace) -> int:
    """Exit 0: every file measured; 1: a file failed to compile or run; 2: bad arguments or files."""
    from ..core.arguments import refuse_output_path
    from ..core.inputs import InputError
    from ..core.model_info import InvalidModelError
    from ..phone.native import NativeRunnerError
    from ..runtime.versions import RuntimeVersionError, prepare

    if args.runs < 1 or args.warmup < 0 or args.rounds < 1:
        print("error: --runs and --rounds must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    if args.jsonl and refuse_output_path("--jsonl", args.jsonl, inputs=(*args.models, args.inputs)):
        return 2
    missing = [m for m in args.models if not Path(m).is_file()]
    if missing:
        print(f"error: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        runtime = prepare(args.runtime, lambda text: print(text, file=sys.stderr))
    except RuntimeVersionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.runner == "native" and runtime is not None:
        print("error: --runner native runs the installed runtime (its libLiteRt.so); leave out --runtime",
              file=sys.stderr)
        return 2
    if args.cache is not None:
        if args.runner != "native" or args.accelerator != "gpu":
            print("error: --cache needs --runner native and the GPU (the Python API has no program-cache option)",
                  file=sys.stderr)
            return 2
        args.cache.mkdir(parents=True, exist_ok=True)
    failed = False
    for round_ in range(1, args.rounds + 1):
        for model in args.models:
            try:
                row = benchmark_file(Path(model), runs=args.runs, warmup=args.warmup, accelerator=args.accelerator,
                                     fp32=args.fp32, inputs=args.inputs, runtime=runtime, timeout=args.timeout,
                                     runner=args.runner, cache=args.cache)
            except (InvalidModelError, InputError, NativeRunnerError) as exc:
                print(f"error: {model}: {exc}", file=sys.stderr)
                return 2
            row["round"] = round_
            failed |= row["status"] != "measured"
            print(_line(row), flush=True)
            if args.jsonl:
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps(row) + "\n")
    return 1 if failed else 0
