"""Run the zoo: tiny `transformers` architectures, each converted plain and through `convert_for_gpu`.

    python -m litert_gpu_toolkit zoo                  # the full zoo (slow: minutes per model)
    python -m litert_gpu_toolkit zoo --fast           # the CI subset
    python -m litert_gpu_toolkit zoo --only vit,bert  # some models; results merge into the file
    python -m litert_gpu_toolkit zoo --list           # the models, no conversion
    python -m litert_gpu_toolkit zoo --table-only     # regenerate README.md from results.json

Each model is built from a small seeded config with its weights redrawn by the rule in
`litert_gpu_toolkit/zoo/weights.py` (nothing is downloaded: HF_HUB_OFFLINE=1).

Each model runs in its own child process (a crash or a hang is that model's row, not the run's) and
is converted twice: plain (`convert_for_gpu(..., patches=False)`) and with the defaults
(`convert_for_gpu(...)`). Per row: verdict, residency, corr vs torch on the strict GPU at fp16,
rewrites kept, seconds. Results are written to `results.json` after every model (atomic write),
so an interrupted run resumes where it stopped (`--rerun` to redo finished rows), and `README.md`
is generated from that file. GPU numbers are from this machine's accelerator: on the project's CI
that is llvmpipe (software Vulkan), ai-edge-litert 2.3.0 -- a proxy, never a phone.

Exit status: 0 every selected model PASSes through convert_for_gpu; 1 one does not; 2 bad arguments
or no results to work from.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from .architectures import _ZOO, ZOO
from .rows import load_results, save_results
from .runner import TIMEOUT_S, environment, run_isolated
from .table import _fmt_corr, _why, write_readme


def _default_out() -> Path:
    """The repository's zoo/ when the toolkit runs from a checkout (utilities/ beside zoo/), else ./zoo."""
    repo_zoo = Path(__file__).resolve().parents[3] / "zoo"
    return repo_zoo if (repo_zoo / "results.json").exists() else Path("zoo")


DEFAULT_OUT = _default_out()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="folder for results.json and README.md (default: the repository's zoo/ in a checkout, else ./zoo)",
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
        env = env or json.loads((args.merge / "results.json").read_text())["environment"]
        save_results(results, rows, env, list(ZOO))
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
            save_results(results, rows, env, list(ZOO))
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
        prog="python -m litert_gpu_toolkit zoo", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
