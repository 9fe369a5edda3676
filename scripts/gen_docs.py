#!/usr/bin/env python3
"""The one docs generator: every generated block in the repository's Markdown, from the data it comes from.

A generated block sits between two markers, one style everywhere:

    <!-- BEGIN GENERATED <name>: scripts/gen_docs.py from <source>; do not edit -->
    ...
    <!-- END GENERATED <name> -->

Blocks (name: source -> where):
  results   models/*/*/converted/results.json -> each recipe's README.md and converted/README.md, the top README
  symptoms  utilities/litert_gpu_toolkit/symptoms.py -> the toolkit's REFERENCE.md
  bench     docs/data/bench_rewrites.json (python scripts/bench_rewrites.py --record) -> the toolkit's REFERENCE.md
  zoo       zoo/results.json (python -m litert_gpu_toolkit zoo) -> zoo/README.md

  python scripts/gen_docs.py          # rewrite every stale block
  python scripts/gen_docs.py --check  # write nothing; exit 1 naming the stale files (the test suite runs this)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "utilities"))   # the toolkit, vendored or installed
from litert_gpu_toolkit.generated import splice

TOOLKIT_REFERENCE = ROOT / "utilities" / "litert_gpu_toolkit" / "REFERENCE.md"
BENCH_DATA = ROOT / "docs" / "data" / "bench_rewrites.json"
ZOO = ROOT / "zoo"


# ----------------------------------------------------------------------------------------- results

def fmt(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value == 0 or 1e-3 <= abs(value) < 1e5:
            return f"{value:.6g}" if 0.99 <= abs(value) <= 1.0 else f"{value:.4g}"
        return f"{value:.3e}"
    if isinstance(value, list):
        return ", ".join(fmt(v) for v in value[:6]) + (" …" if len(value) > 6 else "")
    return str(value)


def load_recipes() -> list[tuple[Path, dict]]:
    files = sorted(ROOT.glob("models/*/*/converted/results.json"))
    return [(p.parent.parent, json.loads(p.read_text())) for p in files]


def provenance_cell(record: dict) -> str:
    """Which file each number came from: its sha256 prefix and the export command (from the export's sidecar)."""
    found = record.get("provenance") or {}
    if not found:
        return "not recorded"
    cells = []
    for name, p in found.items():
        p = p if isinstance(p, dict) else {}
        how = f"`{p['command']}`" if p.get("command") else p.get("note", "no export record")
        cells.append(f"`{p.get('file', name)}` `{p.get('sha256', '?')[:12]}`<br>{how}")
    return "<br>".join(cells)


def recipe_table(records: dict) -> str:
    lines = ["| graph | device | residency | metrics | gates | graph file (sha256, export) | date, commit |",
             "|---|---|---|---|---|---|---|"]
    for key in sorted(records):
        r = records[key]
        metrics = "<br>".join(f"{k}: {fmt(v)}" for k, v in r.get("metrics", {}).items())
        gates = "<br>".join(f"{'✅' if ok else '❌'} {name}" for name, ok in r.get("gates", {}).items())
        when = f"{r.get('date', '')}, `{r.get('git_commit') or '-'}`"
        lines.append(f"| {r.get('graph', key)} | {r.get('device_label', r.get('device'))} | {r.get('residency', '')} "
                     f"| {metrics} | {gates} | {provenance_cell(r)} | {when} |")
    commands = sorted({r.get("command", "") for r in records.values() if r.get("command")})
    lines += ["", "Re-run: `" + "`, `".join(commands) + "` (in `converted/`)."]
    return "\n".join(lines)


def headline_metrics(record: dict) -> list[tuple[str, object]]:
    """The metrics the top table shows: those the verify script declared in `headline`, in that order;
    records written before `headline` existed show their first three metrics."""
    metrics = record.get("metrics", {})
    names = record.get("headline") or list(metrics)[:3]
    return [(k, metrics[k]) for k in names if k in metrics]


def top_table(recipes: list[tuple[Path, dict]]) -> str:
    lines = ["Rows whose graph ends in `_plain` (or marks another deliberately unrewritten variant) record what the "
             "conversion hit before the recipe's rewrites; their failing gates are the evidence, not a broken recipe.",
             "", "| recipe | graph | device | residency | headline metrics | gates |", "|---|---|---|---|---|---|"]
    for recipe_dir, records in recipes:
        rel = recipe_dir.relative_to(ROOT).as_posix()
        for key in sorted(records):
            r = records[key]
            headline = ", ".join(f"{k} {fmt(v)}" for k, v in headline_metrics(r))
            passed = r.get("gates", {})
            verdict = f"{sum(passed.values())}/{len(passed)} pass" if passed else "-"
            lines.append(f"| [{recipe_dir.name}]({rel}/) | {r.get('graph', key)} | {r.get('device_label', '')} "
                         f"| {r.get('residency', '')} | {headline} | {verdict} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- symptoms

def symptom_table() -> str:
    from litert_gpu_toolkit.symptoms import SYMPTOMS

    rows = ["| what you see | cause | rewrites | upstream | desktop GPU reproduces it |", "|---|---|---|---|---|"]
    for s in SYMPTOMS:
        rewrites = ", ".join(f"`{r}`" for r in s.rewrites)
        note = f" ({s.phone_only_note})" if s.phone_only_note else ""
        rows.append(f"| {s.seen} | {s.cause} | {rewrites} | {s.upstream or '-'} | "
                    f"{'yes' if s.desktop_reproduces else 'no'}{note} |")
    return "\n".join(rows)


# ------------------------------------------------------------------------------------------- bench

def _ms(r: dict) -> str:
    return f"{r['ms']:.3f}" if r.get("ms") is not None else str(r.get("status", "-"))


def _ratio(a: dict, b: dict) -> str:
    return f"{a['ms'] / b['ms']:.2f}x" if a.get("ms") and b.get("ms") else "-"


def _macs(m) -> str:
    return "-" if m is None else f"{m / 1e6:.1f}M"


def render_bench(data: dict) -> str:
    """The benchmark tables of `scripts/bench_rewrites.py`'s JSON (ratios: original / rewrite, above 1 = faster)."""
    conv, other, kernel = ([c for c in data["cases"] if c.get("kind") == k] for k in ("conv", "other", "kernel"))
    out = [f"Measured with `{data['command']}` on {data['machine']}.", "",
           "| transposed conv | MACs native / zero-stuff / polyphase | CPU ms native / zero-stuff / polyphase "
           "| GPU ms native / zero-stuff / polyphase | GPU zero-stuff / polyphase | GPU native / polyphase |",
           "|---|---|---|---|---|---|"]
    for c in conv:
        m, (n, z, p) = c["macs"], (c["results"][f] for f in ("native", "zerostuff", "polyphase"))
        out.append(f"| {c['case']} | {_macs(m['native'])} / {_macs(m['zerostuff'])} / {_macs(m['polyphase'])} "
                   f"| {_ms(n['cpu'])} / {_ms(z['cpu'])} / {_ms(p['cpu'])} "
                   f"| {_ms(n['gpu'])} / {_ms(z['gpu'])} / {_ms(p['gpu'])} "
                   f"| {_ratio(z['gpu'], p['gpu'])} | {_ratio(n['gpu'], p['gpu'])} |")
    out += ["", "| rewrite | CPU ms original / rewrite | CPU ratio | GPU ms original / rewrite | GPU ratio |",
            "|---|---|---|---|---|"]
    for c in other:
        o, r = c["results"]["original"], c["results"]["rewrite"]
        out.append(f"| {c['case']} | {_ms(o['cpu'])} / {_ms(r['cpu'])} | {_ratio(o['cpu'], r['cpu'])} "
                   f"| {_ms(o['gpu'])} / {_ms(r['gpu'])} | {_ratio(o['gpu'], r['gpu'])} |")
    if kernel:
        out += ["", "| GPU kernel probe | MACs | GPU ms | GMAC/s |", "|---|---|---|---|"]
        for c in kernel:
            r = c["results"]["gpu"]
            rate = f"{c['macs'] / (r['ms'] * 1e6):.2f}" if r.get("ms") else "-"
            out.append(f"| {c['case']} | {_macs(c['macs'])} | {_ms(r)} | {rate} |")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------- zoo

def zoo_page() -> str | None:
    results = ZOO / "results.json"
    if not results.exists():
        return None
    from litert_gpu_toolkit.zoo.rows import row_from_dict
    from litert_gpu_toolkit.zoo.table import render_table

    data = json.loads(results.read_text())
    rows = {d["name"]: row_from_dict(d) for d in data["rows"]}
    return render_table(rows, data["environment"])


# -------------------------------------------------------------------------------------------- main

def targets() -> dict[Path, str]:
    """Every file that holds a generated block -> its text with the blocks up to date."""
    out: dict[Path, str] = {}

    def update(path: Path, name: str, source: str, body: str, heading: str) -> None:
        text = out.get(path, path.read_text() if path.exists() else "")
        out[path] = splice(text, name, source, body, heading)

    recipes = load_recipes()
    for recipe_dir, records in recipes:
        for readme in (recipe_dir / "README.md", recipe_dir / "converted" / "README.md"):
            if readme.exists():
                update(readme, "results", "results.json", recipe_table(records), "## Results")
    if recipes:
        update(ROOT / "README.md", "results", "models/*/*/converted/results.json", top_table(recipes), "## Recipes")
    update(TOOLKIT_REFERENCE, "symptoms", "symptoms.py", symptom_table(), "## Symptom table")
    if BENCH_DATA.exists():
        update(TOOLKIT_REFERENCE, "bench", "docs/data/bench_rewrites.json",
               render_bench(json.loads(BENCH_DATA.read_text())), "### Benchmark")
    page = zoo_page()
    if page is not None:
        update(ZOO / "README.md", "zoo", "zoo/results.json", page, "")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if any generated block is stale")
    args = parser.parse_args(argv)
    stale = []
    for path, text in targets().items():
        if not path.exists() or path.read_text() != text:
            stale.append(path.relative_to(ROOT).as_posix())
            if not args.check:
                path.write_text(text)
    if args.check and stale:
        print("stale generated blocks (run python scripts/gen_docs.py): " + ", ".join(stale))
        return 1
    print(("updated: " + ", ".join(stale)) if stale and not args.check else "generated blocks up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
