"""Run the zoo: small architectures from five libraries, each converted plain and through `convert_for_gpu`.

    ./zoo/setup.sh                                     # once: .venv-zoo with the zoo's libraries
    .venv-zoo/bin/python zoo/run.py                    # every row (resumes; about an hour on 2 cores)
    .venv-zoo/bin/python zoo/run.py --fast             # the CI subset: at least one row of every library
    .venv-zoo/bin/python zoo/run.py --library timm     # one library
    .venv-zoo/bin/python zoo/run.py --only vit,bert --rerun
    .venv-zoo/bin/python zoo/run.py --list             # the rows, no conversion
    .venv-zoo/bin/python zoo/run.py --table-only       # regenerate README.md from results.json
    .venv-zoo/bin/python zoo/run.py --activations trained --fast   # trained ranges planted (zoo/trained/)
    .venv-zoo/bin/python zoo/run.py --weights int8 --fast          # int8 weights (zoo/weights_int8/)
    .venv-zoo/bin/python zoo/run.py --runtime 2.1.2 --fast --out DIR  # checked under another ai-edge-litert
    .venv-zoo/bin/python zoo/run.py --fast --also-runtime 2.1.2       # the same files checked under 2.1.2 too

Every model is built from a config with random weights redrawn by the rule in `litert_zoo/weights.py`; nothing
is downloaded (HF_HUB_OFFLINE=1). Each row runs in its own child process (a crash or a hang is that row's result,
not the run's) and is converted twice: plain (`convert_for_gpu(..., patches=False)`) and with the defaults. A
row PASSes when the defaults give a file that runs strict GPU-only with every output's fp16 and fp32 GPU corr
>= 0.999 vs torch; with --weights MODE, when the quantized file passes too (`quantize_for_gpu`: strict GPU-only,
GPU vs CPU and vs torch at the mode's corr floor), and the row says which weights stayed float and why. Results are
written to results.json after every row (atomic write), so an interrupted run
resumes where it stopped; README.md is generated from that file. GPU numbers come from this machine's
accelerator: on the project's CI that is llvmpipe (software Vulkan), ai-edge-litert 2.3.0 -- a proxy, never a
phone.

The guard: a selected row that PASSed in the baseline (default: results.json as it was before this run) and does
not PASS now is a regression, named on stderr.

Exit statuses: see EXIT_STATUS below (printed by --help).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from litert_gpu_toolkit.core.arguments import seconds  # the toolkit's timeout type: finite, >= 10 s

from .guard import describe, regressions
from .models import CALL_ROWS, HELD_OUT, LIBRARIES, ROWS, ZOO
from .rows import load_results, save_results
from .runner import ALSO_RUNTIMES_ENV, TIMEOUT_S, environment, run_isolated
from .weights import ACTIVATIONS, ACTIVATIONS_ENV, WEIGHTS_ENV, WEIGHTS_MODES
from .table import _fmt_corr, _why, write_readme

DEFAULT_OUT = Path(__file__).resolve().parents[1]          # zoo/: results.json and README.md live there

# the same contract as the toolkit's commands (litert_gpu_toolkit.cli.main.EXIT_STATUS): 0 all good, 1 a finding,
# 2 bad arguments, 130 interrupted; 3 is the zoo's own
EXIT_STATUS = """\
Exit status:
  0    every selected row PASSes (--list, --table-only: done)
  1    a row does not PASS (none regressed)
  2    bad arguments (an unknown row or library, no row selected, --timeout or --jobs out of range, a --runtime
       that cannot be installed, --out not a writable folder) or no results to work from
  3    a row that PASSed in the baseline no longer does (a regression)
  130  interrupted (Ctrl-C); each row's child process goes with it"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help="folder for results.json and README.md (default: the zoo/ folder of this checkout)")
    p.add_argument("--fast", action="store_true",
                   help="only the CI subset: " + ", ".join(m.name for m in ROWS if m.fast))
    p.add_argument("--library", default="", help=f"comma-separated libraries ({', '.join(LIBRARIES)})")
    p.add_argument("--only", default="", help="comma-separated row names (see --list)")
    p.add_argument("--held-out", action="store_true", help="run the held-out rows (litert_zoo/models/held_out.py: "
                   "architectures the toolkit was not developed on) instead; --out defaults to zoo/held_out")
    p.add_argument("--calls", action="store_true", help="run every text row called each way users call it "
                   "(litert_zoo/models/calls.py: input_ids only / + attention_mask / every input, batch 1 and 2) "
                   "instead; --only and --fast pick the text rows; --out defaults to zoo/calls")
    p.add_argument("--activations", choices=ACTIVATIONS, default="o1",
                   help="o1: weights redrawn so activations are O(1) (default); trained: the same, then trained "
                        "ranges planted (outlier stream channels x400, large BatchNorm channels, tiny layer scales; "
                        "litert_zoo/weights.py); --out then defaults to a trained/ folder beside the o1 results; "
                        "library: the library's own initialisation, untouched (--out: a library_init/ folder)")
    p.add_argument("--weights", choices=WEIGHTS_MODES, default="fp32",
                   help="store the weights as fp16 / int8 / int4 (convert_for_gpu(weights=...)); a row PASSes only "
                        "when its quantized file does; --out then defaults to a weights_MODE/ folder")
    p.add_argument("--runtime", metavar="VERSION",
                   help="check every conversion under this ai-edge-litert version (a side environment the toolkit "
                        "makes once; 'nightly' = the newest development build) instead of the installed one; "
                        "results.json names it")
    p.add_argument("--also-runtime", action="append", default=[], metavar="VERSION",
                   help="check each row's convert_for_gpu file under this ai-edge-litert version too (repeatable; "
                        "'nightly'), against the same torch outputs; a row PASSes only when every version does")
    p.add_argument("--rerun", action="store_true", help="redo rows already in results.json (default: resume)")
    p.add_argument("--jobs", type=int, default=1, help="rows converted at once (default %(default)s)")
    p.add_argument("--baseline", type=Path, help="results.json the guard compares with "
                   "(default: --out's results.json before this run)")
    p.add_argument("--list", action="store_true", help="list the rows and exit")
    p.add_argument("--table-only", action="store_true", help="regenerate README.md from results.json and exit")
    p.add_argument("--timeout", type=seconds, default=TIMEOUT_S, help="seconds per row, >= 10 (default %(default)s)")



def _split(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _select(args) -> list[str]:
    if args.held_out:
        return list(HELD_OUT)
    if args.calls:
        base = [m.name for m in ROWS if m.domain == "text" and (m.fast or not args.fast)]
        base = [n for n in base if n in _split(args.only)] if args.only else base
        if args.only and not base:
            raise SystemExit(_usage(f"no text rows among --only {args.only} (see --list)"))
        return [n for n in CALL_ROWS if n.split("@")[0] in base]
    names = [m.name for m in ROWS if m.fast or not args.fast]
    if args.library:
        libs = _split(args.library)
        unknown = [x for x in libs if x not in LIBRARIES]
        if unknown:
            raise SystemExit(_usage(f"unknown library: {', '.join(unknown)}; known: {', '.join(LIBRARIES)}"))
        names = [n for n in names if ZOO[n].library in libs]
    if args.only:
        only = _split(args.only)
        unknown = [n for n in only if n not in ZOO]
        if unknown:
            raise SystemExit(_usage(f"unknown zoo row(s): {', '.join(unknown)} (see --list)"))
        names = [n for n in only if n in names or not (args.fast or args.library)]
    if args.jobs < 1:
        raise SystemExit(_usage("--jobs must be at least 1"))
    if not names:                          # "0/0 PASS" would read as success
        raise SystemExit(_usage("no rows selected: --fast / --library / --only as given leave none (see --list)"))
    return names


def _out_problem(out: Path) -> str | None:
    """Why --out cannot hold results.json and README.md (checked before any row runs), or None."""
    import os

    if out.exists() and not out.is_dir():
        return f"--out {out}: not a folder"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"--out {out}: cannot create it ({exc.strerror or exc})"
    if not os.access(out, os.W_OK | os.X_OK):
        return f"--out {out}: the folder is not writable"
    return None


def _usage(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _progress(total: int):
    try:
        from tqdm import tqdm

        return tqdm(total=total, unit="row", file=sys.stderr, dynamic_ncols=True)
    except ImportError:                                        # tqdm is in requirements.txt; degrade anyway
        return None


def _report(bar, text: str) -> None:
    if bar is not None:
        bar.write(text)
    else:
        print(text, flush=True)


def _write_table(args, rows, env) -> None:
    if args.calls:
        from .models.calls import write_matrix

        write_matrix(args.out, rows, env)
    else:
        write_readme(args.out, rows, env, args.held_out)


def _runtimes(args) -> str | None:
    """--runtime and --also-runtime: each version's side environment made here, once (not by every row's child at
    once), and passed to the children through the environment; the reason when one cannot be used."""
    import os

    from litert_gpu_toolkit.runtime.versions import RuntimeVersionError, prepare, resolve

    try:
        if args.runtime:
            version = resolve([args.runtime])[0]
            prepare(version, print)
            os.environ["LITERT_GPU_RUNTIME"] = version          # every check of every row runs under it
        if args.also_runtime:
            also = resolve(args.also_runtime)
            for version in also:
                prepare(version, print)
            os.environ[ALSO_RUNTIMES_ENV] = ",".join(also)
    except RuntimeVersionError as e:
        return str(e)
    return None


def run(args: argparse.Namespace) -> int:
    if args.out == DEFAULT_OUT:
        args.out = DEFAULT_OUT / ("held_out" if args.held_out else "calls" if args.calls else "")
        args.out = args.out / {"trained": "trained", "library": "library_init"}.get(args.activations, "")
        args.out = args.out / (f"weights_{args.weights}" if args.weights != "fp32" else "")
    import os

    os.environ[ACTIVATIONS_ENV] = args.activations     # the rows' child processes build in this mode
    os.environ[WEIGHTS_ENV] = args.weights             # ... and convert with these weights
    problem = _runtimes(args)
    if problem:
        return _usage(problem)
    if args.list:
        for m in (HELD_OUT.values() if args.held_out else CALL_ROWS.values() if args.calls else ROWS):
            print(f"{m.name:32s} {m.library:12s} {m.domain:12s}{' (fast)' if m.fast else ''}")
        return 0
    results = args.out / "results.json"
    rows = load_results(results)
    baseline = load_results(args.baseline) if args.baseline else dict(rows)
    if args.baseline and not baseline:
        return _usage(f"no results in {args.baseline}")
    env = json.loads(results.read_text()).get("environment", {}) if results.exists() else {}
    if args.table_only:
        problem = _out_problem(args.out)
        if problem:
            return _usage(problem)
        if not rows:
            return _usage(f"no results in {results}; run the zoo first")
        _write_table(args, rows, env)
        print(f"wrote {args.out / 'README.md'}")
        return 0
    names = _select(args)
    problem = _out_problem(args.out)
    if problem:
        return _usage(problem)
    todo = [n for n in names if args.rerun or n not in rows or rows[n].error]
    env = environment()
    lock = threading.Lock()
    bar = _progress(len(todo))
    if len(todo) < len(names):
        _report(bar, f"{len(names) - len(todo)} of {len(names)} rows done before (--rerun redoes them)")
    with tempfile.TemporaryDirectory(prefix="zoo_") as tmp, ThreadPoolExecutor(args.jobs) as pool:
        futures = {}
        for name in todo:
            (Path(tmp) / name).mkdir()
            futures[pool.submit(run_isolated, name, Path(tmp) / name, args.timeout)] = name
        for fut in as_completed(futures):
            row = fut.result()
            with lock:
                rows[row.name] = row
                save_results(results, rows, env, list(CALL_ROWS if args.calls else ZOO))
                _write_table(args, rows, env)
            g = row.gpu
            _report(bar, f"{row.name}: plain {row.plain.verdict if row.plain else '-'}, convert_for_gpu "
                    f"{g.verdict if g else '-'} corr {_fmt_corr(g.corr_fp16 if g else None)} {row.seconds:.0f}s "
                    f"{_why(row)[:160]}")
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    selected = [rows[n] for n in names if n in rows]
    passed = sum(r.passed for r in selected)
    print(f"zoo: {passed}/{len(selected)} PASS through convert_for_gpu -> {results}")
    regressed = regressions(baseline, rows, todo)
    for name in regressed:
        print(f"REGRESSION {describe(baseline, rows, name)}", file=sys.stderr)
    if regressed:
        return 3
    return 0 if passed == len(selected) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="zoo/run.py", description=__doc__, epilog=EXIT_STATUS,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
