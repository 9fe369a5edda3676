"""A public zoo of tiny `transformers` architectures, each run plain and through `convert_for_gpu`.

    python zoo/run_zoo.py                  # the full zoo (slow: minutes per model)
    python zoo/run_zoo.py --fast           # the CI subset
    python zoo/run_zoo.py --only vit,bert  # some models; results merge into the file
    python zoo/run_zoo.py --list           # the models, no conversion
    python zoo/run_zoo.py --table-only     # regenerate README.md from results.json

Each model is built from a small seeded config with its weights redrawn by the rule in `architectures.py`
(nothing is downloaded: HF_HUB_OFFLINE=1).

Each model runs in its own child process (a crash or a hang is that model's row, not the run's) and
is converted twice: plain (`convert_for_gpu(..., patches=False)`) and with the defaults
(`convert_for_gpu(...)`). Per row: verdict, residency, corr vs torch on the strict GPU at fp16,
rewrites kept, seconds. Results are written to `zoo/results.json` after every model (atomic write),
so an interrupted run resumes where it stopped (`--rerun` to redo finished rows), and `zoo/README.md`
is generated from that file. GPU numbers are from this machine's accelerator: on the project's CI
that is llvmpipe (software Vulkan), ai-edge-litert 2.3.0 -- a proxy, never a phone.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from architectures import _ZOO, ZOO  # the zoo is a folder of scripts, not a package

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from gen_docs import splice

DEFAULT_OUT = Path(__file__).resolve().parent
TIMEOUT_S = 1500.0


@dataclass
class RunSummary:
    """One conversion of one model (plain or with rewrites)."""
    verdict: str
    residency: str = ""
    corr_fp16: float | None = None        # strict GPU fp16 vs torch (None when it did not run GPU-only)
    corr_fp32: float | None = None        # strict GPU fp32 (enforce_f32) vs torch: tells fp16 precision from a GPU bug
    rewrites: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    note: str = ""
    seconds: float = 0.0
    attempts: list[str] = field(default_factory=list)   # convert_for_gpu's conversions tried


@dataclass
class ZooRow:
    name: str
    domain: str
    params: int = 0
    plain: RunSummary | None = None
    gpu: RunSummary | None = None         # convert_for_gpu with defaults
    error: str = ""                       # the row could not be produced (build failure, crash, timeout)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.gpu is not None and self.gpu.verdict == "PASS"



# ------------------------------------------------------------------------------------ one model

def _summarise(result, seconds: float) -> RunSummary:
    report = result.report

    def worst(label):
        found = None
        for outs in (getattr(report, "signatures", None) or {}).values():
            for entry in outs.values():
                c = entry.get("vs_reference", {}).get(label, {}).get("corr")
                if c is not None:
                    found = c if found is None else min(found, c)
        return found
    corr, corr32 = worst("gpu_fp16"), worst("gpu_fp32")
    residency = ""
    if report is not None and getattr(report, "residency", None):
        residency = report.residency.get("line", "")
    note = ""
    if result.error:
        lines = [ln.strip() for ln in result.error.strip().splitlines() if ln.strip()]
        telling = [ln for ln in lines if "data-dependent" in ln or "guard" in ln.lower() or "Lowering not found" in ln]
        note = (telling[0] if telling else lines[0] if lines else "conversion failed")[:300]
    elif report is not None and not report.ok:
        note = report.summary[:300]
    kept = list(dict.fromkeys(c.rewrite for c in result.changes))
    dropped = list(getattr(result, "dropped", {}) or {})
    if report is not None and getattr(report, "unsupported_ops", None):
        reasons = "; ".join(f"{u['op']}: {u['reason']}" for u in report.unsupported_ops)
        note = f"{note} [{reasons}]"[:400]
    return RunSummary(result.verdict, residency, corr, corr32, kept, dropped, note, round(seconds, 1),
                      list(getattr(result, "attempts", []) or []))


def run_one(name: str, workdir: Path) -> ZooRow:
    """Build, convert plain and with rewrites, check; in this process."""
    from litert_gpu_toolkit import convert_for_gpu

    entry = ZOO[name]
    row = ZooRow(name, entry.domain)
    t0 = time.perf_counter()
    try:
        model, inputs = entry.build()
    except Exception as e:                                    # noqa: BLE001 - a row, not a crash
        row.error = f"build failed: {type(e).__name__}: {e}"[:400]
        return row
    row.params = sum(p.numel() for p in model.parameters())
    for label in ("plain", "gpu"):
        t = time.perf_counter()
        try:
            result = convert_for_gpu(model, inputs, workdir / f"{name}_{label}.tflite", patches=label == "gpu")
            summary = _summarise(result, time.perf_counter() - t)
        except Exception as e:                                # noqa: BLE001 - convert_for_gpu should not raise
            summary = RunSummary("RAISED", note=f"{type(e).__name__}: {e}"[:300],
                                 seconds=round(time.perf_counter() - t, 1))
        setattr(row, label, summary)
    row.seconds = round(time.perf_counter() - t0, 1)
    return row


def _known(cls, d: dict) -> dict:
    """Only the fields `cls` has (a results file from another version of this module still loads)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def _row_from_dict(d: dict) -> ZooRow:
    row = ZooRow(**_known(ZooRow, {k: v for k, v in d.items() if k not in ("plain", "gpu")}))
    row.plain = RunSummary(**_known(RunSummary, d["plain"])) if d.get("plain") else None
    row.gpu = RunSummary(**_known(RunSummary, d["gpu"])) if d.get("gpu") else None
    return row


def run_isolated(name: str, workdir: Path, timeout: float = TIMEOUT_S) -> ZooRow:
    """`run_one` in a child process: a crash or hang becomes this model's row."""
    out = workdir / f"{name}.row.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_worker", name, "--_workdir", str(workdir)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ZooRow(name, ZOO[name].domain, error=f"timed out after {timeout:.0f} s",
                      seconds=round(time.perf_counter() - t0, 1))
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
        return ZooRow(name, ZOO[name].domain, error=f"worker exited {proc.returncode}: {tail[0][:300]}",
                      seconds=round(time.perf_counter() - t0, 1))
    return _row_from_dict(json.loads(out.read_text()))


# -------------------------------------------------------------------------------- results file

def load_results(path: Path) -> dict[str, ZooRow]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {d["name"]: _row_from_dict(d) for d in data.get("rows", [])}


def save_results(path: Path, rows: dict[str, ZooRow], environment: dict) -> None:
    """Atomic write (temp file + rename) so an interrupted run never leaves a half file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    order = [n for n in ZOO if n in rows] + [n for n in rows if n not in ZOO]
    data = {"environment": environment, "rows": [asdict(rows[n]) for n in order]}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".results.", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def environment() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    env = {}
    for pkg in ("ai-edge-litert", "litert-torch", "torch", "transformers"):
        try:
            env[pkg] = version(pkg)
        except PackageNotFoundError:
            env[pkg] = None
    try:
        from litert_gpu_toolkit import probe_gpu

        probe = probe_gpu()
        env["gpu"] = probe.gpu.adapter
        env["gpu_is_software"] = probe.gpu.is_software
    except Exception as e:                                    # noqa: BLE001 - an environment note only
        env["gpu"] = f"probe failed: {type(e).__name__}"
    return env


def write_readme(folder: Path, rows: dict[str, ZooRow], env: dict) -> None:
    """README.md in `folder`: the generated block (the same text `scripts/gen_docs.py` writes)."""
    readme = folder / "README.md"
    text = readme.read_text() if readme.exists() else ""
    readme.write_text(splice(text, "zoo", "zoo/results.json", render_table(rows, env), ""))


def _fmt_corr(c) -> str:
    return "-" if c is None else f"{c:.6f}"


def _why(row: ZooRow) -> str:
    if row.error:
        return row.error
    g = row.gpu
    if g is None:
        return "not run"
    parts = []
    if g.verdict != "PASS" and g.note:
        parts.append(g.note)
    if g.verdict == "NUMERICS_FAIL" and g.corr_fp32 is not None:
        parts.append(f"fp32 GPU corr {g.corr_fp32:.6f} ("
                     + ("fp16 precision" if g.corr_fp32 >= 0.999 else "wrong in fp32 too: a GPU miscompute") + ")")
    if g.dropped:
        parts.append(f"dropped (worse than without): {', '.join(g.dropped)}")
    return "; ".join(parts)


def render_table(rows: dict[str, ZooRow], env: dict) -> str:
    """The README: generated from results.json, never written by hand."""
    done = [r for r in rows.values()]
    passed = [r for r in done if r.passed]
    plain_passed = [r for r in done if r.plain is not None and r.plain.verdict == "PASS"]
    gpu = env.get("gpu") or "unknown GPU"
    label = (f"{str(gpu).split(' (')[0]} (software Vulkan), ai-edge-litert {env.get('ai-edge-litert')}"
             if env.get("gpu_is_software") else f"{gpu}, ai-edge-litert {env.get('ai-edge-litert')}")
    lines = [
        "# Transformers zoo: `convert_for_gpu` on architectures it was not written for",
        "",
        "Generated by `python scripts/gen_docs.py` (or `python zoo/run_zoo.py --table-only`) from `results.json` "
        "(produced by `python zoo/run_zoo.py`); do not edit by hand.",
        "",
        f"Device: {label} -- a proxy for a phone GPU, not one. "
        f"litert-torch {env.get('litert-torch')}, torch {env.get('torch')}, transformers {env.get('transformers')}.",
        "",
        f"**convert_for_gpu: {len(passed)}/{len(done)} PASS** (strict GPU-only, fp16 and fp32 GPU outputs "
        f"corr >= 0.999 vs torch); plain conversion: {len(plain_passed)}/{len(done)} PASS.",
        "",
        "Models: tiny seeded configs (hidden 16..64, 1..4 layers) with weights redrawn so activations are O(1) "
        "(see the docstring of `zoo/architectures.py`); text and LLM models take 16 token ids "
        "(no attention mask), vision models one 32x32 image (MobileViT 64x64, Depth-Anything 28x28).",
        "",
        "Columns: *plain* = `convert_for_gpu(..., patches=False)`; *convert_for_gpu* = the defaults (rewrites, "
        "with the never-worse-than-plain fallback); *corr fp16* = Pearson correlation of the strict-GPU fp16 output "
        "with torch (`-` when the file did not run GPU-only); *seconds* = both conversions and checks of the row, "
        "on a shared 2-core machine.",
        "",
        "Reproduce: `python zoo/run_zoo.py` (resumes; `--only NAME --rerun` redoes rows; `--fast` is "
        "the CI subset; `--table-only` regenerates this file).",
        "",
        "| model | domain | params | plain | plain corr fp16 | convert_for_gpu | residency | corr fp16 | rewrites kept "
        "| seconds | why not PASS |",
        "|---|---|---:|---|---:|---|---|---:|---|---:|---|",
    ]
    for r in done:
        p, g = r.plain, r.gpu
        res = (g.residency if g else "").replace("GPU residency: ", "").replace("|", "/")
        why = _why(r).replace("|", "/").replace("\n", " ")
        lines.append(
            f"| {r.name} | {r.domain} | {r.params:,} | {p.verdict if p else '-'} | "
            f"{_fmt_corr(p.corr_fp16 if p else None)} "
            f"| {g.verdict if g else '-'} | {res or '-'} | {_fmt_corr(g.corr_fp16 if g else None)} "
            f"| {', '.join(g.rewrites) if g and g.rewrites else '-'} | {r.seconds:.0f} | {why[:240]} |"
        )
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="folder for results.json and README.md (default: the repository's zoo/)",
    )
    p.add_argument(
        "--fast", action="store_true", help="only the CI subset: " + ", ".join(m.name for m in _ZOO if m.fast)
    )
    p.add_argument("--only", default="", help="comma-separated model names (see --list)")
    p.add_argument("--rerun", action="store_true", help="redo models already in results.json (default: resume)")
    p.add_argument("--list", action="store_true", help="list the models and exit")
    p.add_argument("--table-only", action="store_true", help="regenerate README.md from results.json and exit")
    p.add_argument(
        "--merge",
        type=Path,
        metavar="DIR",
        help="copy the rows of DIR/results.json (a parallel run, "
        "e.g. --only X --out DIR) into this results.json, regenerate README.md, and exit",
    )
    p.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per model (default %(default)s)")
    p.add_argument("--_worker", help=argparse.SUPPRESS)
    p.add_argument("--_workdir", type=Path, help=argparse.SUPPRESS)


def _select(args) -> list[str]:
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in ZOO]
        if unknown:
            print(f"error: unknown zoo model(s): {', '.join(unknown)}; known: {', '.join(ZOO)}", file=sys.stderr)
            raise SystemExit(2)
        return names
    return [m.name for m in _ZOO if m.fast or not args.fast]


def run(args: argparse.Namespace) -> int:
    if args._worker:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        row = run_one(args._worker, args._workdir)
        (args._workdir / f"{args._worker}.row.json").write_text(json.dumps(asdict(row)))
        return 0
    if args.list:
        for m in _ZOO:
            print(f"{m.name:18s} {m.domain:10s}{' (fast)' if m.fast else ''}")
        return 0
    results = args.out / "results.json"
    rows = load_results(results)
    env = json.loads(results.read_text()).get("environment", {}) if results.exists() else {}
    if args.merge:
        other = load_results(args.merge / "results.json")
        if not other:
            print(f"no results in {args.merge / 'results.json'}", file=sys.stderr)
            return 2
        rows.update(other)
        save_results(results, rows, env or json.loads((args.merge / "results.json").read_text())["environment"])
        write_readme(args.out, rows, env)
        print(f"merged {', '.join(other)} into {results}")
        return 0
    if args.table_only:
        if not rows:
            print(f"no results in {results}; run the zoo first", file=sys.stderr)
            return 2
        write_readme(args.out, rows, env)
        print(f"wrote {args.out / 'README.md'}")
        return 0
    names = _select(args)
    env = environment()
    with tempfile.TemporaryDirectory(prefix="zoo_") as tmp:
        for i, name in enumerate(names, 1):
            if name in rows and not args.rerun and not rows[name].error:
                print(f"[{i}/{len(names)}] {name}: done before ({rows[name].gpu.verdict if rows[name].gpu else '-'})")
                continue
            print(f"[{i}/{len(names)}] {name} ...", flush=True)
            row = run_isolated(name, Path(tmp), args.timeout)
            rows[name] = row
            save_results(results, rows, env)
            write_readme(args.out, rows, env)
            g = row.gpu
            print(
                f"    plain {row.plain.verdict if row.plain else '-'}  convert_for_gpu {g.verdict if g else '-'} "
                f"corr {_fmt_corr(g.corr_fp16 if g else None)}  {row.seconds:.0f}s  {_why(row)[:200]}",
                flush=True,
            )
    selected = [rows[n] for n in names if n in rows]
    passed = sum(r.passed for r in selected)
    print(f"zoo: {passed}/{len(selected)} PASS through convert_for_gpu -> {results}")
    return 0 if passed == len(selected) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python zoo/run_zoo.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
