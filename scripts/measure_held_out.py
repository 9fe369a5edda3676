"""Run issue 41's held-out set once: `convert_for_gpu` with the defaults, then the `export` command where it applies.

    .venv-zoo/bin/python scripts/measure_held_out.py                       # every named row (resumes)
    .venv-zoo/bin/python scripts/measure_held_out.py --set held_out_41b    # the second set, into zoo/held_out_41b/
    .venv-zoo/bin/python scripts/measure_held_out.py --set held_out_41c    # the third, into zoo/held_out_41c/
    .venv-zoo/bin/python scripts/measure_held_out.py --set held_out_41d    # the fourth, into zoo/held_out_41d/
    .venv-zoo/bin/python scripts/measure_held_out.py --set held_out_41e    # the fifth, into zoo/held_out_41e/
    .venv-zoo/bin/python scripts/measure_held_out.py --set held_out_41f    # the sixth, into zoo/held_out_41f/
    .venv-zoo/bin/python scripts/measure_held_out.py --wait-for FILE --wait-until 03:10 --stop-at 04:00
    .venv-zoo/bin/python scripts/measure_held_out.py --rows distilbert --out /tmp/try   # try it on another row
    .venv-zoo/bin/python scripts/measure_held_out.py --readme-only          # regenerate the README

To measure one commit exactly while others edit the checkout, run it from a clean worktree of that commit
(`git worktree add DIR HEAD`) with `--out` pointing back into the checkout and `--export-python` at the
checkout's `.venv/bin/python`: the runner's child processes and the export command then import the worktree's
toolkit (PYTHONPATH comes before the editable install's path).

The rows are the ones `zoo/litert_zoo/models/SET.py` names (`--set`: held_out_41, the default, held_out_41b or
held_out_41c, held_out_41d, held_out_41e or held_out_41f), in its order, and the results go to zoo/SET/. Two passes:

1. `convert_for_gpu` with the defaults, through the zoo's runner (`litert_zoo.runner.run_isolated`: the row is
   built in a child process, converted, checked strictly GPU-only against torch; when the defaults do not PASS
   the runner converts plain too), every row first, so that a run cut short has the most architectures measured;
2. for each row `EXPORT` names a task for: the row's model (same seeded build, same weights) saved with
   `save_pretrained` into a temporary folder, then `python -m litert_gpu_toolkit export --model DIR --task TASK
   -o OUT` with the command's defaults, run with the project's `.venv` python (the toolkit's own environment,
   without the zoo's libraries); its exit status and the verdicts in OUT/export.json are recorded.

Results go to OUT/results.json after every step (atomic write) and OUT/README.md is regenerated from it; a step
already recorded is skipped (resume), one recorded as not run is tried again. After --stop-at (UTC, HH:MM) no new
step starts: the remaining steps are recorded as NOT_RUN with that reason. The toolkit commit of every step is
recorded (`git rev-parse --short HEAD`, "+dirty" when tracked files differ from it).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "zoo"))
sys.path.insert(0, str(ROOT / "utilities"))

from litert_gpu_toolkit.core.atomic_file import write_text_atomic  # noqa: E402
from litert_zoo.models import EVERY  # noqa: E402
from litert_zoo.models import (held_out_41, held_out_41b, held_out_41c, held_out_41d, held_out_41e,  # noqa: E402
                               held_out_41f)
from litert_zoo.rows import scrub  # noqa: E402

SETS = {"held_out_41": (held_out_41, "Issue 41's held-out set"),
        "held_out_41b": (held_out_41b, "Issue 41's second held-out set"),
        "held_out_41c": (held_out_41c, "Issue 41's third held-out set"),
        "held_out_41d": (held_out_41d, "Issue 41's fourth held-out set"),
        "held_out_41e": (held_out_41e, "Issue 41's fifth held-out set"),
        "held_out_41f": (held_out_41f, "Issue 41's sixth held-out set")}
ROWS, EXPORT = held_out_41.ROWS, held_out_41.EXPORT     # the set measured (`use_set`)
DEFAULT_OUT = ROOT / "zoo" / "held_out_41"
SET_FILE, TITLE = "zoo/litert_zoo/models/held_out_41.py", SETS["held_out_41"][1]


def use_set(name: str) -> None:
    """Measure the set `name` names (a module of litert_zoo.models): its rows, export tasks, output folder."""
    global ROWS, EXPORT, DEFAULT_OUT, SET_FILE, TITLE
    module, TITLE = SETS[name]
    ROWS, EXPORT = module.ROWS, module.EXPORT
    DEFAULT_OUT = ROOT / "zoo" / name
    SET_FILE = f"zoo/litert_zoo/models/{name}.py"


def _own_output(path: str) -> bool:
    return path.startswith(DEFAULT_OUT.relative_to(ROOT).as_posix() + "/")
DEVICE = "llvmpipe (software Vulkan), ai-edge-litert 2.3.0"
NOT_RUN = "NOT_RUN"
WEAK_SHARE = 0.05                  # the zoo's line: below it a PASS barely sees the network's arithmetic
EXPORT_PYTHON = ROOT / ".venv" / "bin" / "python"


def log(text: str) -> None:
    print(f"[{dt.datetime.now(dt.timezone.utc):%H:%M:%S}] {text}", flush=True)


def git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    return out.stdout.strip("\n") if out.returncode == 0 else ""    # porcelain lines start with a space


def tracked_changes() -> list[str]:
    """Tracked files that differ from HEAD, this run's own output folder aside."""
    changed = [ln[3:] for ln in git("status", "--porcelain", "--untracked-files=no").splitlines()]
    return [p for p in changed if not _own_output(p)]


def toolkit_commit() -> str:
    """HEAD, "+dirty" when a tracked file outside this run's own output folder differs from it."""
    return git("rev-parse", "--short", "HEAD") + ("+dirty" if tracked_changes() else "")


def dirty_files() -> list[str]:
    return [ln[3:] for ln in git("status", "--porcelain").splitlines() if not _own_output(ln[3:])]


def utc_today_at(hhmm: str | None) -> dt.datetime | None:
    if not hhmm:
        return None
    h, m = (int(x) for x in hhmm.split(":"))
    now = dt.datetime.now(dt.timezone.utc)
    return now.replace(hour=h, minute=m, second=0, microsecond=0)


def past(when: dt.datetime | None) -> bool:
    return when is not None and dt.datetime.now(dt.timezone.utc) >= when


# ---------------------------------------------------------------- results file


def load(path: Path) -> dict:
    if path.exists():
        return json.loads(path.read_text())
    return {"device": DEVICE, "rows": {}}


def save(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(data, indent=1, default=str) + "\n")
    write_readme(path.parent, data)


def _done(step: dict | None) -> bool:
    return bool(step) and step.get("verdict") != NOT_RUN


# ---------------------------------------------------------------- pass 1: convert_for_gpu (the zoo's runner)


def run_convert(name: str, timeout: float) -> dict:
    from litert_zoo.runner import run_isolated

    commit = toolkit_commit()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="h41_") as tmp:
        row = run_isolated(name, Path(tmp), timeout)
    seconds = round(time.perf_counter() - t0, 1)
    g, p = row.gpu, row.plain
    corrs = [c for c in ((g.corr_fp16, g.corr_fp32) if g else ()) if c is not None]
    return {
        "verdict": g.verdict if g else ("TIMEOUT" if "timed out" in row.error else "ERROR"),
        "residency": g.residency if g else "",
        "min_corr": min(corrs) if corrs else None,
        "corr_fp16": g.corr_fp16 if g else None,
        "corr_fp32": g.corr_fp32 if g else None,
        "rewrites_kept": list(g.rewrites) if g else [],
        "rewrites_dropped": list(g.dropped) if g else [],
        "attempts": list(g.attempts) if g else [],
        "reason": scrub(g.note if g and g.verdict != "PASS" else row.error),
        "plain_verdict": p.verdict if p else "-",
        "plain_corr_fp16": p.corr_fp16 if p else None,
        "plain_reason": scrub(p.note) if p and p.verdict not in ("PASS", NOT_RUN) else "",
        "params": row.params,
        "input_share": row.input_share,
        "seconds": seconds,
        "toolkit_commit": row.toolkit_commit or commit,
        "tracked_files_changed": tracked_changes(),
    }


# ---------------------------------------------------------------- pass 2: the export command


_SAVE = """
import sys
sys.path.insert(0, {zoo!r})
from litert_zoo.models import EVERY
model, _ = EVERY[{name!r}].build()
model.model.save_pretrained({folder!r})
print("saved", type(model.model).__name__)
"""


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)                     # the command's own process group only
    except ProcessLookupError:
        pass


def _run(cmd: list[str], env: dict, timeout: float) -> tuple[int | None, str]:
    """(exit status, or None on a timeout; stdout + stderr), the command in its own process group."""
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, _ = proc.communicate()
        return None, out or ""
    except BaseException:
        _kill_group(proc)
        raise


def _error_line(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("error:"):
            return ln
    telling = [ln for ln in lines if any(k in ln for k in ("Error", "FAIL", "FALLBACK", "error", "rejected"))]
    return (telling[-1] if telling else lines[-1] if lines else "no output")[:400]


def run_export(name: str, task: str, timeout: float) -> dict:
    commit = toolkit_commit()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    python = str(EXPORT_PYTHON) if EXPORT_PYTHON.exists() else sys.executable
    where = "the project's .venv" if EXPORT_PYTHON.exists() else "the zoo's"
    t0 = time.perf_counter()
    entry = {"task": task, "exit_code": None, "verdict": "-", "graphs": [], "reason": "", "seconds": 0.0,
             "toolkit_commit": commit, "tracked_files_changed": tracked_changes(), "python": where}
    with tempfile.TemporaryDirectory(prefix="h41x_") as tmp:
        folder, out = Path(tmp) / "model", Path(tmp) / "out"
        code = _SAVE.format(zoo=str(ROOT / "zoo"), name=name, folder=str(folder))
        rc, output = _run([sys.executable, "-c", code], env, 600)
        if rc != 0:
            entry.update(verdict="SAVE_FAILED", reason=scrub(_error_line(output)),
                         seconds=round(time.perf_counter() - t0, 1))
            return entry
        cmd = [python, "-m", "litert_gpu_toolkit", "export", "--model", str(folder), "--task", task, "-o", str(out)]
        rc, output = _run(cmd, env, timeout)
        entry["exit_code"] = rc
        record = {}
        if (out / "export.json").exists():
            record = json.loads((out / "export.json").read_text())
        graphs = []
        for g in record.get("graphs", []):
            graphs.append({"graph": g.get("graph"), "verdict": g.get("verdict"), "residency": g.get("residency"),
                           "min_corr_vs_torch": g.get("min_corr_vs_torch"), "rewrites": g.get("rewrites", []),
                           "dropped": list(g.get("dropped") or []),
                           "reason": scrub(g.get("error") or (g.get("summary") if g.get("verdict") != "PASS"
                                                               else "") or "")[:600]})
        entry["graphs"] = graphs
        if rc is None:
            entry.update(verdict="TIMEOUT", reason=f"timed out after {timeout:.0f} s")
        elif graphs:
            bad = [g for g in graphs if g["verdict"] != "PASS"]
            entry["verdict"] = "PASS" if not bad else ", ".join(f"{g['graph']} {g['verdict']}" for g in graphs)
            entry["reason"] = "; ".join(f"{g['graph']}: {g['reason']}" for g in bad)[:800]
        else:
            entry.update(verdict="NO_GRAPH", reason=scrub(_error_line(output)))
        entry["output_tail"] = scrub("\n".join(output.strip().splitlines()[-15:]))[-3000:]
    entry["seconds"] = round(time.perf_counter() - t0, 1)
    return entry


# ---------------------------------------------------------------- the README


def _fmt(x, nd=6):
    return "-" if x is None else f"{x:.{nd}f}"


FALSE_PASS = " (counted above as PASS; not a PASS by the stated criterion)"


def write_readme(folder: Path, data: dict) -> None:
    rows = data.get("rows", {})
    named = [m.name for m in ROWS]
    names = named if set(rows) <= set(named) else list(rows)
    conv_run = [n for n in names if _done(rows.get(n, {}).get("convert"))]
    conv_pass = [n for n in conv_run if rows[n]["convert"]["verdict"] == "PASS"]
    exp_named = [n for n in names if n in EXPORT or (rows.get(n, {}).get("export") or {}).get("task")]
    exp_run = [n for n in exp_named if _done(rows.get(n, {}).get("export"))]
    exp_pass = [n for n in exp_run if rows[n]["export"]["verdict"] == "PASS" and rows[n]["export"]["exit_code"] == 0]
    after = data.get("after_run") or {}        # {row: {"note": ..., "false_pass": bool}}, written by hand after the run
    false_pass = {n for n, a in after.items() if a.get("false_pass")}
    commits = {}
    for n in names:
        for step in ("convert", "export"):
            c = (rows.get(n, {}).get(step) or {}).get("toolkit_commit")
            if c and _done(rows[n][step]):
                commits[c] = commits.get(c, 0) + 1
    first = folder.resolve() == DEFAULT_OUT.resolve()
    lines = [
        f"# {TITLE}: first run" if first else f"# {TITLE}: a later run",
        "",
        "Generated by `scripts/measure_held_out.py` from `results.json`; do not edit by hand.",
        "",
        f"The rows are named in `{SET_FILE}` (committed {data.get('named_in', '?')} "
        "before any of them was converted). Each was run once: `convert_for_gpu` with the defaults through the "
        "zoo's runner (strict GPU-only, every output's fp16 and fp32 GPU corr >= 0.999 vs torch), then, for the "
        "Hugging Face rows, `python -m litert_gpu_toolkit export --model DIR --task TASK -o OUT` on the same model "
        "saved with `save_pretrained` (the command's defaults). "
        + ("These are first-run results: nothing was changed for any row between naming it and running it."
           if first else "This is a LATER run, after changes made for what the first run found: not first-run "
           f"results (those are in {DEFAULT_OUT.relative_to(ROOT).as_posix()}/README.md)."),
        "",
        f"Device: {data.get('device', DEVICE)} -- a proxy for a phone GPU, not one. "
        + ", ".join(f"{k} {v}" for k, v in (data.get("environment") or {}).items()
                    if k in ("litert-torch", "torch", "transformers", "timm", "torchvision") and v)
        + ". Toolkit commit measured: " + (", ".join(f"{c} ({k} steps)" for c, k in commits.items()) or "-")
        + (f". Files that differed from it when the run started: {data['dirty_at_start']}"
           if data.get("dirty_at_start") else ": no file differed from it when the run started")
        + f". Run {data.get('started', '?')} to {data.get('finished', '(not finished)')}.",
        "",
        f"**convert_for_gpu: {len(conv_pass)}/{len(conv_run)} PASS** of the rows run ({len(names)} named, "
        f"{len(names) - len(conv_run)} not run). **export --task: {len(exp_pass)}/{len(exp_run)} PASS** (exit 0) "
        f"of the rows run ({len(exp_named)} Hugging Face rows have a task, {len(exp_named) - len(exp_run)} not run)."
        + (f" By the criterion stated above, after what was found on inspection (below): **convert_for_gpu "
           f"{len([n for n in conv_pass if n not in false_pass])}/{len(conv_run)}, export --task "
           f"{len([n for n in exp_pass if n not in false_pass])}/{len(exp_run)}**." if false_pass else ""),
        "",
        "| row | library | convert_for_gpu | residency | min corr (fp16, fp32) | input share | plain | export task "
        "| export exit | export verdict | seconds (convert + export) |",
        "|---|---|---|---|---:|---:|---|---|---:|---|---:|",
    ]
    why, weak = [], []
    for n in names:
        r = rows.get(n, {})
        c, e = r.get("convert") or {}, r.get("export") or {}
        task = e.get("task") or EXPORT.get(n, "-")
        secs = "+".join(f"{s.get('seconds', 0):.0f}" for s in (c, e) if s and _done(s))
        res = (c.get("residency") or "-").replace("GPU residency: ", "").replace(" (strict GPU)", "")
        share = c.get("input_share")
        if c.get("verdict") == "PASS" and share is not None and share < WEAK_SHARE:
            weak.append(f"{n} ({share:.1%})")
        lines.append(
            f"| {n} | {r.get('library', EVERY[n].library if n in EVERY else '-')} | {c.get('verdict', NOT_RUN)} "
            f"| {res} | {_fmt(c.get('min_corr'))} | {_fmt(share, 3)} | {c.get('plain_verdict', '-')} | {task} "
            f"| {'-' if not e or e.get('exit_code') is None else e['exit_code']} "
            f"| {e.get('verdict', NOT_RUN) if task != '-' else '-'} | {secs or '-'} |")
        reasons = []
        if c and c.get("verdict") != "PASS":
            reasons.append(f"convert_for_gpu {c.get('verdict')}: {c.get('reason') or '-'}")
            if c.get("plain_reason"):
                reasons.append(f"plain {c.get('plain_verdict')}: {c['plain_reason']}")
            reasons += [a for a in c.get("attempts", []) if a.startswith(("diagnosis", "legalize"))][:2]
        if e and e.get("verdict") != "PASS":
            reasons.append(f"export --task {task} exit {e.get('exit_code')}, {e.get('verdict')}: "
                           f"{e.get('reason') or '-'}")
        if reasons:
            why.append(f"- **{n}**: " + "; ".join(x.replace("|", "/").replace("\n", " ") for x in reasons))
    lines += ["", "Columns: *min corr* = the lower of the strict-GPU fp16 and fp32 output correlations with torch "
              "(every output; `-` when the file did not run GPU-only); *input share* = how much of the output the "
              "input drives (the zoo's measure; below 5% a PASS is a weak check); *plain* = `convert_for_gpu(..., "
              "patches=False)`, run by the zoo's runner only where the defaults do not PASS; *export verdict* = "
              "the verdicts in OUT/export.json (text-generation has two graphs: prefill and decode).", ""]
    if weak:
        lines += [f"Weak checks among the PASS rows (the input drives under 5% of the output): {', '.join(weak)}.", ""]
    if why:
        lines += ["## Why not PASS, as printed", "", *why, ""]
    if after:
        lines += ["## Found on inspection after the run", "",
                  "The verdicts above are as the run printed them; these notes were added afterwards (`after_run` in "
                  "results.json) and change no recorded verdict.", "",
                  *(f"- **{n}**{FALSE_PASS if a.get('false_pass') else ''}: {a.get('note', '')}"
                    for n, a in after.items()), ""]
    write_text_atomic(folder / "README.md", "\n".join(lines))


# ---------------------------------------------------------------- main


def wait(go_file: Path | None, until: dt.datetime | None) -> None:
    if go_file is None and until is None:
        return
    log(f"waiting for {go_file or '-'} or {until:%H:%M} UTC" if until else f"waiting for {go_file}")
    while not ((go_file is not None and go_file.exists()) or past(until)):
        time.sleep(30)
    log("go: " + (f"{go_file} exists" if go_file is not None and go_file.exists() else "the time has come"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", default="held_out_41", choices=sorted(SETS),
                   help="the named set to measure (default %(default)s; its rows in zoo/litert_zoo/models/SET.py)")
    p.add_argument("--out", type=Path, default=None, help="folder for results.json and README.md "
                   "(default: zoo/SET/)")
    p.add_argument("--rows", default="", help="comma-separated row names (default: the named set); any row the "
                   "zoo's runner knows, with its export task from EXPORT where it has one")
    p.add_argument("--export-task", default="", help="NAME=TASK pairs for --rows outside the named set")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per convert_for_gpu row (default 900)")
    p.add_argument("--export-timeout", type=float, default=900.0, help="seconds per export command (default 900)")
    p.add_argument("--wait-for", type=Path, help="start only once this file exists (polled every 30 s) ...")
    p.add_argument("--wait-until", help="... or at this UTC time, HH:MM, whichever comes first")
    p.add_argument("--stop-at", help="UTC time, HH:MM: no step starts after it; the rest are recorded as not run")
    p.add_argument("--export-python", type=Path, help="the python that runs the export command (default: "
                   "this checkout's .venv/bin/python, else this python)")
    p.add_argument("--readme-only", action="store_true", help="regenerate README.md from results.json and exit")
    args = p.parse_args(argv)
    use_set(args.set)
    args.out = args.out or DEFAULT_OUT

    global EXPORT_PYTHON
    if args.export_python:
        EXPORT_PYTHON = args.export_python
    # the runner's children and the export command import this checkout's toolkit and zoo, whatever is installed
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "utilities"), str(ROOT / "zoo"),
                                                *filter(None, [os.environ.get("PYTHONPATH")])])
    results = args.out / "results.json"
    data = load(results)
    if args.readme_only:
        write_readme(args.out, data)
        print(f"wrote {args.out / 'README.md'}")
        return 0
    names = [n.strip() for n in args.rows.split(",") if n.strip()] or [m.name for m in ROWS]
    unknown = [n for n in names if n not in EVERY]
    if unknown:
        print(f"error: unknown rows: {', '.join(unknown)}", file=sys.stderr)
        return 2
    tasks = dict(EXPORT)
    tasks.update(dict(pair.split("=", 1) for pair in args.export_task.split(",") if "=" in pair))
    stop = utc_today_at(args.stop_at)
    wait(args.wait_for, utc_today_at(args.wait_until))

    from litert_zoo.runner import environment

    data.setdefault("environment", environment())
    data.setdefault("named_in", git("log", "-1", "--format=%h", "--", SET_FILE))
    data.setdefault("started", f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
    data.setdefault("dirty_at_start", ", ".join(dirty_files()))
    data["device"] = DEVICE
    rows = data.setdefault("rows", {})
    for n in names:
        rows.setdefault(n, {"name": n, "library": EVERY[n].library, "domain": EVERY[n].domain})
    save(results, data)

    steps = [(n, "convert") for n in names] + [(n, "export") for n in names if n in tasks]
    for i, (n, step) in enumerate(steps, 1):
        row = rows[n]
        if _done(row.get(step)):
            log(f"[{i}/{len(steps)}] {n} {step}: done before ({row[step]['verdict']}), skipped")
            continue
        if past(stop):
            row[step] = {"verdict": NOT_RUN, "reason": f"not started: past the stop time {args.stop_at} UTC"}
            if step == "export":
                row[step]["task"] = tasks[n]
            save(results, data)
            log(f"[{i}/{len(steps)}] {n} {step}: NOT_RUN (past {args.stop_at} UTC)")
            continue
        log(f"[{i}/{len(steps)}] {n} {step}{' --task ' + tasks[n] if step == 'export' else ''} ...")
        row[step] = run_convert(n, args.timeout) if step == "convert" else run_export(n, tasks[n],
                                                                                        args.export_timeout)
        save(results, data)
        s = row[step]
        extra = (f"{s['residency']} min corr {_fmt(s['min_corr'])}" if step == "convert"
                 else f"exit {s['exit_code']}")
        log(f"[{i}/{len(steps)}] {n} {step}: {s['verdict']} {extra} {s['seconds']:.0f}s "
            f"{(s.get('reason') or '')[:200]}")
    data["finished"] = f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC"
    save(results, data)
    conv = [rows[n]["convert"] for n in names if _done(rows[n].get("convert"))]
    exp = [rows[n]["export"] for n in names if n in tasks and _done(rows[n].get("export"))]
    log(f"convert_for_gpu {sum(c['verdict'] == 'PASS' for c in conv)}/{len(conv)} PASS; export "
        f"{sum(e['verdict'] == 'PASS' and e['exit_code'] == 0 for e in exp)}/{len(exp)} PASS -> {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
