"""print_report: a check's `Report` as text. A passing model fits on one screen; a failing one shows it all.

Failing reports list, in order: the problems, every op the GPU delegate rejected with its reason,
the GPU/CPU split, the graph (op histogram, tensors above rank 4 and who makes them, constants),
signatures and how each input was made, every output's metrics per precision, the suggested
rewrites from the symptom table with their evidence, warnings, environment, timings, and the
last lines of the native log.
"""
from __future__ import annotations

import sys
from typing import TextIO

from .verdicts import PASS, Report

_MAX_PASS_OUTPUTS = 8  # outputs listed for a passing model before summarising the rest


def _fmt(v, spec: str = ".3g") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def _metrics_line(label: str, c: dict) -> str:
    if "error" in c:
        return f"{label:<14} ERROR {c['error']}"
    state = "ok" if c["within_tolerance"] else f"FAIL ({c['symptom'].replace('_', '-')})"
    extra = []
    if c.get("nonfinite"):
        extra.append(f"nan/inf {c['nonfinite']}")
    if c.get("all_zero"):
        extra.append("ALL ZERO")
    if c.get("bit_identical"):
        extra.append("bit-identical")
    if c.get("suspected_cpu_fallback"):
        extra.append("suspected CPU fallback")
    return (f"{label:<14} corr {_fmt(c.get('corr'), '.6f')}  cos {_fmt(c.get('cosine'), '.6f')}  "
            f"max|d| {_fmt(c.get('max_abs'))}  max rel {_fmt(c.get('max_rel'))}  {state}"
            + (f"  [{', '.join(extra)}]" if extra else ""))


def _env_line(env: dict) -> str:
    text = f"ai-edge-litert {env.get('ai_edge_litert')}"
    if env.get("gpu_adapter"):
        text += f"; GPU {env['gpu_adapter']} via {env.get('gpu_backend')}"
        if env.get("software_gpu"):
            text += " (SOFTWARE GPU)"
    else:
        text += "; GPU adapter: none seen"
    return text


def _timings_line(t: dict) -> str:
    return ", ".join(f"{k} {v:.2f} s" for k, v in t.items())


def print_report(report: Report, *, full: bool = False, file: TextIO | None = None) -> None:
    """Print `report` to `file` (stdout). `full=True` prints every section even for a passing model."""
    out = file or sys.stdout

    def p(line: str = "") -> None:
        print(line, file=out)

    p(f"{report.verdict}  {report.model}")
    p(f"  {report.summary}")
    if report.phone_risk:
        p(f"  {report.phone_risk}  (python -m litert_gpu_toolkit lint MODEL for details)")
    if report.verdict == PASS and not full:
        _print_pass(report, p)
        return
    for section in _SECTIONS:
        section(report, p)


def _problems(report: Report, p) -> None:
    if report.problems:
        p("Problems:")
        for prob in report.problems:
            p(f"  - {prob}")
    if report.unsupported_ops:
        p("Ops the GPU delegate rejected (strict GPU-only compile):")
        for r in report.unsupported_ops:
            p(f"  {r['op']:<20} x{r['in_graph']} in graph   {r['reason']}")
            if "sites" in r:
                where = ", ".join(f"#{i}" for i in r["sites"][:12]) + (" ..." if len(r["sites"]) > 12 else "")
                p(f"  {'':<20} {len(r['sites'])} of them with {r['rule']}: {where or 'none'}")
    if report.residency:
        line = report.residency["line"]
        p(line if line.startswith("GPU residency") else f"Residency: {line}")


def _graph(report: Report, p) -> None:
    st = report.static
    if st:
        hist = ", ".join(f"{op} x{n}" for op, n in st["op_histogram"].items())
        p(f"Graph: {st['num_ops']} ops in {st['subgraphs']} graph(s), {st['size_bytes'] / 1e6:.2f} MB: {hist}")
        for t in st["high_rank_tensors"]:
            made = f"{t['producer']} #{t['producer_index']}" if t["producer"] else "input/constant"
            p(f"  rank-{t['rank']} tensor {t['tensor']} {t['shape']} from {made}")
        c = st["constants"]
        if c["count"]:
            top = c["largest"][0]
            p(f"  constants: {c['count']}, {c['total_bytes'] / 1e6:.2f} MB; largest {top['name']} "
              f"{top['shape']} {top['dtype']} ({top['bytes'] / 1e6:.2f} MB)")
        for s in st["signatures"]:
            outs = ", ".join(f"{o['name']} {o['shape']} {o['dtype']}" for o in s["outputs"])
            p(f"  signature {s['key']} -> {outs}")
    for spec in report.inputs:
        p(f"  input {spec['signature']}/{spec['name']} {spec['shape']} {spec['dtype']}: {spec['source']}")


def _numerics(report: Report, p) -> None:
    if not report.signatures:
        return
    p(f"Numerics vs CPU fp32 (tolerance: {report.tolerance.get('text')}):")
    for sig, outs in report.signatures.items():
        for name, e in outs.items():
            p(f"  {sig}/{name} {e['shape']} {e['dtype']}")
            for label, c in e["vs_cpu"].items():
                p(f"    {_metrics_line(label, c)}")
            if e["vs_reference"]:
                p("    vs reference (source model):")
                for label, c in e["vs_reference"].items():
                    p(f"      {_metrics_line(label, c)}")


def _suggestions(report: Report, p) -> None:
    if not report.suggestions:
        return
    p("Suggested rewrites (from the symptom table):")
    for s in report.suggestions:
        p(f"  [{s['symptom'] or 'unknown'}] {s['seen']}")
        p(f"      -> {', '.join(s['rewrites']) if s['rewrites'] else 'no toolkit rewrite yet'}")
        if s.get("cause"):
            p(f"      why: {s['cause']}")
        for ev in s.get("evidence", []):
            p(f"      seen: {ev}")
        if s.get("upstream"):
            p(f"      upstream: {s['upstream']}")


def _context(report: Report, p) -> None:
    for w in report.warnings:
        p(f"Warning: {w}")
    env = report.environment
    if env:
        p(f"Environment: {_env_line(env)}")
        if env.get("gpu_note"):
            p(f"  {env['gpu_note']}")
    if report.timings:
        p(f"Timings: {_timings_line(report.timings)}")
    if report.log_tail:
        p("Last native log lines:")
        for line in report.log_tail.splitlines():
            p(f"  | {line}")


# a failing (or full) report, top to bottom
_SECTIONS = (_problems, _graph, _numerics, _suggestions, _context)


def _print_pass(report: Report, p) -> None:
    lines = []
    for sig, outs in report.signatures.items():
        for name, e in outs.items():
            cells = [f"{lbl} corr {_fmt(c.get('corr'), '.6f')} max|d| {_fmt(c.get('max_abs'))}"
                     for lbl, c in e["vs_cpu"].items()]
            cells += [f"{lbl} vs ref corr {_fmt(c.get('corr'), '.6f')}" for lbl, c in e["vs_reference"].items()]
            lines.append(f"  {sig}/{name}: " + "; ".join(cells))
    for line in lines[:_MAX_PASS_OUTPUTS]:
        p(line)
    if len(lines) > _MAX_PASS_OUTPUTS:
        p(f"  ... {len(lines) - _MAX_PASS_OUTPUTS} more outputs, all within tolerance (print_report(full=True))")
    p(f"  tolerance: {report.tolerance.get('text')}")
    for w in report.warnings:
        p(f"  warning: {w}")
    p(f"  {_env_line(report.environment)}")
    if report.environment.get("gpu_note"):
        p(f"  {report.environment['gpu_note']}")
    p(f"  timings: {_timings_line(report.timings)}")
