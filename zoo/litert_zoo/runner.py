"""One zoo model, built, converted plain and through `convert_for_gpu`, and checked -- in a child process.

    python -m litert_zoo.runner NAME WORKDIR     (what `run_isolated` starts, with zoo/ on PYTHONPATH;
                                                  writes WORKDIR/NAME.row.json)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from .models import EVERY as ZOO
from .rows import RunSummary, ZooRow, row_from_dict

TIMEOUT_S = 1500.0
NOT_RUN = "NOT_RUN"
ALWAYS_PLAIN = os.environ.get("LITERT_ZOO_ALWAYS_PLAIN") == "1"     # plain for every row (twice the time)
ALSO_RUNTIMES_ENV = "LITERT_ZOO_ALSO_RUNTIMES"    # zoo/run.py --also-runtime: comma-separated versions


def _also_runtimes(result) -> dict:
    """The file convert_for_gpu kept, checked again under each --also-runtime version with the same inputs and
    torch's outputs as the reference: what an app pinning that version gets from the same file."""
    from litert_gpu_toolkit.check.checker import check_under_runtime

    out = {}
    for version in filter(None, os.environ.get(ALSO_RUNTIMES_ENV, "").split(",")):
        if result.path is None or not Path(result.path).exists():
            out[version] = {"verdict": "NOT_RUN", "note": "no file to check"}
            continue
        rep = check_under_runtime(version, result.path, inputs=result.inputs, reference=result.reference)
        out[version] = {"verdict": rep.verdict, "residency": (rep.residency or {}).get("line", ""),
                        "corr_fp16": _worst(rep, "gpu_fp16"), "note": "" if rep.ok else rep.summary[:300]}
    return out


def _worst(report, label: str) -> float | None:
    """The lowest corr vs torch of `label`'s run ("gpu_fp16", "gpu_fp32") over every output; None when none."""
    found = None
    for outs in (getattr(report, "signatures", None) or {}).values():
        for entry in outs.values():
            c = entry.get("vs_reference", {}).get(label, {}).get("corr")
            if c is not None:
                found = c if found is None else min(found, c)
    return found


def _summarise(result, seconds: float) -> RunSummary:
    report = result.report
    corr, corr32 = _worst(report, "gpu_fp16"), _worst(report, "gpu_fp32")
    residency = ""
    if report is not None and getattr(report, "residency", None):
        residency = report.residency.get("line", "")
    note = ""
    if result.error:
        line = getattr(result, "error_line", None)            # the toolkit's telling line, where it has one
        lines = [ln.strip() for ln in result.error.strip().splitlines() if ln.strip()]
        telling = [ln for ln in lines if "data-dependent" in ln or "guard" in ln.lower() or "Lowering not found" in ln]
        note = (line or (telling[0] if telling else lines[0] if lines else "conversion failed"))[:300]
    elif report is not None and not report.ok:
        note = report.summary[:300]
    kept = list(dict.fromkeys(c.rewrite for c in result.changes))
    dropped = list(getattr(result, "dropped", {}) or {})
    if report is not None and getattr(report, "unsupported_ops", None):
        reasons = "; ".join(f"{u['op']}: {u['reason']}" for u in report.unsupported_ops)
        note = f"{note} [{reasons}]"[:400]
    return RunSummary(result.verdict, residency, corr, corr32, kept, dropped, note, round(seconds, 1),
                      list(getattr(result, "attempts", []) or []))


def _weights(summary: RunSummary, result) -> None:
    """In a weights mode the row PASSes only when the quantized file does: a float file kept instead is
    QUANT_FAIL, with the reason; the quantize line is kept either way."""
    q = result.quantized
    summary.weights = q.line() if q is not None else ""
    if q is not None and q.ok:              # the file is the quantized one: its GPU (fp16) corr vs torch
        summary.corr_fp16 = min(q.fidelity.values()) if q.fidelity else None
        summary.corr_fp32 = None
    if summary.verdict == "PASS" and not (q is not None and q.ok):
        summary.verdict = "QUANT_FAIL"
        summary.note = summary.weights[:400]


def _toolkit_commit() -> str:
    """The checkout's commit, "+dirty" when a tracked file other than the zoo's own results and tables differs
    from it (a zoo run writing results.json must not mark the next row, in this mode or the other, as dirty)."""
    try:
        import litert_gpu_toolkit
        from litert_gpu_toolkit.recipe.results import git_commit, git_dirty

        where = Path(litert_gpu_toolkit.__file__).parent
        commit = git_commit(where) or ""
        dirty = git_dirty(where, ignore=lambda p: p.startswith("zoo/") and p.endswith(("results.json", "README.md")))
        return commit + ("+dirty" if commit and dirty is not False else "")
    except Exception:                                         # noqa: BLE001 - provenance only
        return ""


def run_one(name: str, workdir: Path) -> ZooRow:
    """Build, convert with the defaults and check; convert plain too when the defaults do not PASS (when they do,
    plain cannot be better, and the row's plain column says "not run"). In this process."""
    from litert_gpu_toolkit import convert_for_gpu

    from .weights import weights_mode

    mode = weights_mode()
    entry = ZOO[name]
    row = ZooRow(name, entry.domain, library=entry.library, toolkit_commit=_toolkit_commit())
    t0 = time.perf_counter()
    try:
        model, inputs = entry.build()
    except Exception as e:                                    # noqa: BLE001 - a row, not a crash
        row.error = f"build failed: {type(e).__name__}: {e}"[:400]
        return row
    row.params = sum(p.numel() for p in model.parameters())
    for label in ("gpu", "plain"):
        if label == "plain" and row.gpu is not None and row.gpu.verdict == "PASS" and not ALWAYS_PLAIN:
            row.plain = RunSummary(NOT_RUN, note="the defaults PASS: plain cannot be better")
            continue
        t = time.perf_counter()
        try:
            result = convert_for_gpu(model, inputs, workdir / f"{name}_{label}.tflite", patches=label == "gpu",
                                     weights=mode if label == "gpu" else "fp32")
            summary = _summarise(result, time.perf_counter() - t)
            if label == "gpu" and mode != "fp32":
                _weights(summary, result)
            if label == "gpu":                                # measured once, by convert_for_gpu
                row.input_share = result.input_share
                row.runtimes = _also_runtimes(result)
        except Exception as e:                                # noqa: BLE001 - convert_for_gpu should not raise
            summary = RunSummary("RAISED", note=f"{type(e).__name__}: {e}"[:300],
                                 seconds=round(time.perf_counter() - t, 1))
        setattr(row, label, summary)
    row.seconds = round(time.perf_counter() - t0, 1)
    return row


def run_isolated(name: str, workdir: Path, timeout: float = TIMEOUT_S) -> ZooRow:
    """`run_one` in a child process: a crash or hang becomes this model's row."""
    out = workdir / f"{name}.row.json"
    zoo_root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join([zoo_root, *filter(None, [os.environ.get("PYTHONPATH")])])
    # offline and writing only into the work folder (ultralytics would write its settings under ~/.config)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "YOLO_OFFLINE": "1",
           "YOLO_CONFIG_DIR": str(workdir / "ultralytics"), "PYTHONPATH": path}
    cmd = [sys.executable, "-m", "litert_zoo.runner", name, str(workdir)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ZooRow(name, ZOO[name].domain, error=f"timed out after {timeout:.0f} s", library=ZOO[name].library,
                      seconds=round(time.perf_counter() - t0, 1))
    if proc.returncode != 0 or not out.exists():
        lines = [ln for ln in (proc.stderr or proc.stdout or "").strip().splitlines() if ln.strip()]
        tail = lines[-1:] or ["no output"]
        return ZooRow(name, ZOO[name].domain, error=f"worker exited {proc.returncode}: {tail[0][:300]}",
                      library=ZOO[name].library,
                      seconds=round(time.perf_counter() - t0, 1))
    return row_from_dict(json.loads(out.read_text()))


def environment() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    from .weights import activations_mode, weights_mode

    env = {"activations": activations_mode(), "weights": weights_mode()}
    for pkg in ("ai-edge-litert", "litert-torch", "torch", "transformers", "timm", "torchvision", "diffusers",
                "ultralytics"):
        try:
            env[pkg] = version(pkg)
        except PackageNotFoundError:
            env[pkg] = None
    from litert_gpu_toolkit.runtime.versions import chosen

    if chosen(None):                                      # zoo/run.py --runtime: the checks ran under that version
        env["ai-edge-litert"], env["ai-edge-litert (installed)"] = chosen(None), env["ai-edge-litert"]
    try:
        import litert_gpu_toolkit
        from litert_gpu_toolkit.recipe.results import git_commit, git_dirty

        where = Path(litert_gpu_toolkit.__file__).parent
        env["toolkit_commit"] = git_commit(where)
        env["toolkit_dirty"] = git_dirty(where)
    except Exception as e:                                    # noqa: BLE001 - an environment note only
        env["toolkit_commit"] = f"unknown ({type(e).__name__})"
    try:
        from litert_gpu_toolkit import probe_gpu

        probe = probe_gpu()
        env["gpu"] = probe.gpu.adapter
        env["gpu_is_software"] = probe.gpu.is_software
    except Exception as e:                                    # noqa: BLE001 - an environment note only
        env["gpu"] = f"probe failed: {type(e).__name__}"
    return env


def main(argv: list[str]) -> int:
    """The child's side of `run_isolated`: one row, written as JSON into the work folder."""
    name, workdir = argv[0], Path(argv[1])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    row = run_one(name, workdir)
    (workdir / f"{name}.row.json").write_text(json.dumps(asdict(row)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
