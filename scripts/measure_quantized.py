#!/usr/bin/env python
"""Each recipe in each weights mode, side by side in one run: file size, residency, the recipe's own gates and
headline metric, and latency on the software GPU and on LiteRT's CPU as a ratio to the fp32 file.

    .venv/bin/python scripts/measure_quantized.py                       # the recipes below, every mode
    .venv/bin/python scripts/measure_quantized.py all_minilm_l6_v2 --modes fp32,int8
    .venv/bin/python scripts/measure_quantized.py --record              # writes docs/data/quantized_recipes.json
    .venv/bin/python scripts/measure_quantized.py --latency-only --record   # the latency ratios, one run

Per recipe: its dump script when the reference is missing, then per mode its export script with --quantize MODE
(fp32: none) and its verify script on the exported file, once per device (host-gpu: strict GPU-only fp16; cpu).
The verify runs record into the recipe's results.json as usual (a quantized file is its own record, `<graph>_MODE`);
this script reads them back. The modes of a recipe are measured one after the other in this run, so the ratios are
same-run comparisons on a shared machine; the absolute milliseconds are not a phone's.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "data" / "quantized_recipes.json"
MODES = ("fp32", "fp16", "int8", "int4")
DEVICES = ("host-gpu", "cpu")

# recipe -> its folder, the float file its export writes (relative to converted/), the reference, the dump and
# verify commands (the verify gets --model and --device)
RECIPES = {
    "all_minilm_l6_v2": dict(folder="text/all_minilm_l6_v2", model="artifacts/encoder.tflite",
                             export=["export_encoder.py"], ref="artifacts/encoder_ref.npz",
                             dump=["dump_encoder_ref.py"], verify=["verify_encoder.py"]),
    "mobilenet_v2": dict(folder="vision/mobilenet_v2", model="artifacts/classifier.tflite",
                         export=["export_classifier.py"], ref="artifacts/classifier_ref.npz",
                         dump=["dump_classifier_ref.py"], verify=["verify_classifier.py"]),
    "silero_vad": dict(folder="audio/silero_vad", model="artifacts/silero_vad_step.tflite", export=["export_vad.py"],
                       ref="artifacts/vad_ref.npz", dump=["dump_vad_ref.py"], verify=["verify_vad.py"]),
    "ppocr_det": dict(folder="vision/ppocr_det", model="artifacts/det_480x640.tflite",
                      export=["export_det.py", "--height", "480", "--width", "640"],
                      ref="artifacts/det_480x640_ref.npz",
                      dump=["dump_det_ref.py", "--height", "480", "--width", "640"],
                      verify=["verify_det.py", "--height", "480", "--width", "640"]),
}


def python() -> str:
    exe = Path(os.environ.get("LITERT_VENV", ROOT / ".venv")) / "bin" / "python"
    return str(exe) if exe.exists() else sys.executable


def run(argv: list[str], cwd: Path, log: Path) -> int:
    start = time.perf_counter()
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(argv)}\n")
        f.flush()
        code = subprocess.run([python(), *argv], cwd=cwd, stdout=f, stderr=subprocess.STDOUT).returncode
    print(f"  {' '.join(argv)}: exit {code} in {time.perf_counter() - start:.0f} s", flush=True)
    return code


def mode_path(model: str, mode: str) -> str:
    p = Path(model)
    return model if mode == "fp32" else str(p.with_name(f"{p.stem}_{mode}{p.suffix}"))


def measure(name: str, cfg: dict, modes: list[str], log: Path) -> dict:
    converted = ROOT / "models" / cfg["folder"] / "converted"
    print(f"[{name}]", flush=True)
    if not (converted / cfg["ref"]).exists():
        if not (converted / cfg["model"]).exists():
            run(cfg["export"], converted, log)
        run(cfg["dump"], converted, log)
    row = {"recipe": name, "modes": {}}
    for mode in modes:
        entry = row["modes"][mode] = {}
        code = run(cfg["export"] + ([] if mode == "fp32" else ["--quantize", mode]), converted, log)
        path = converted / mode_path(cfg["model"], mode)
        if code or not path.exists():
            entry["error"] = f"export exit {code}"
            continue
        entry["bytes"] = path.stat().st_size
        sidecar = path.with_name(path.name + ".provenance.json")
        entry["weights"] = json.loads(sidecar.read_text()).get("weights") if sidecar.exists() else None
        for device in DEVICES:
            before = time.time()
            run(cfg["verify"] + ["--model", str(path.relative_to(converted)), "--device", device], converted, log)
            entry[device] = _record(converted / "results.json", path, device, before)
    return row


def _record(results: Path, path: Path, device: str, since: float) -> dict:
    """The verify record of `path` on `device` written by this run (matched by file name and provenance sha)."""
    if not results.exists():
        return {"error": "no results.json"}
    for key, rec in json.loads(results.read_text()).items():
        if rec.get("device") == device and rec.get("model_file", path.name) == path.name and \
                any(p.get("file") == path.name for p in (rec.get("provenance") or {}).values()):
            metrics = rec.get("metrics", {})
            return {"record": key, "residency": rec.get("residency"), "passed": rec.get("passed"),
                    "gates": rec.get("gates"), "latency_ms": metrics.get("latency_ms_median"),
                    "headline": {k: metrics.get(k) for k in rec.get("headline") or []}}
    return {"error": "no record for this file"}


def time_modes(names: list[str], modes: list[str], rounds: int, repeats: int) -> dict:
    """{recipe: {mode: {"host-gpu": ms, "cpu": ms}}}: every mode's file timed round-robin in this one run (a round
    times each file once per device, `repeats` runs per compile; the median over rounds), so the ratios between
    modes are same-run comparisons. Seeded random inputs of the graph's shapes."""
    import statistics

    sys.path.insert(0, str(ROOT / "utilities"))
    from litert_gpu_toolkit.core.inputs import make_inputs
    from litert_gpu_toolkit.core.model_info import read_model_info
    from litert_gpu_toolkit.runtime.compiled import compile_and_run

    files = {}
    for name in names:
        converted = ROOT / "models" / RECIPES[name]["folder"] / "converted"
        for mode in modes:
            path = converted / mode_path(RECIPES[name]["model"], mode)
            if path.exists():
                files[(name, mode)] = (path, make_inputs(read_model_info(path))[0])
    times: dict = {}
    for r in range(rounds):
        for (name, mode), (path, feeds) in files.items():
            for device, accel in (("host-gpu", "gpu"), ("cpu", "cpu")):
                run = compile_and_run(path, feeds, accelerator=accel, repeats=repeats)
                if run.ok:
                    times.setdefault(name, {}).setdefault(mode, {}).setdefault(device, []).append(
                        1000.0 * sum(run.run_s.values()))
        print(f"  latency round {r + 1}/{rounds} done", flush=True)
    return {n: {m: {d: round(statistics.median(v), 3) for d, v in per.items()} for m, per in ms.items()}
            for n, ms in times.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipes", nargs="*", help=f"recipe names (default: {', '.join(RECIPES)})")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes (default: all)")
    parser.add_argument("--record", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    parser.add_argument("--latency-only", action="store_true",
                        help="export and verify nothing: time the files already exported, every mode round-robin in "
                             "this run (the table's latency ratios come from this)")
    parser.add_argument("--rounds", type=int, default=3, help="--latency-only: rounds (default 3)")
    args = parser.parse_args(argv)
    unknown = [r for r in args.recipes if r not in RECIPES]
    if unknown:
        parser.error(f"unknown recipe(s) {unknown}; have: {', '.join(RECIPES)}")
    if args.latency_only:
        latency = time_modes(args.recipes or list(RECIPES), args.modes.split(","), args.rounds, repeats=5)
        print(json.dumps(latency, indent=1))
        if args.record:
            data = json.loads(OUT.read_text()) if OUT.exists() else {"rows": []}
            data["latency"] = {"command": "python scripts/measure_quantized.py --latency-only --record",
                               "rounds": args.rounds, "repeats": 5, "ms": latency}
            OUT.write_text(json.dumps(data, indent=1) + "\n")
            print(f"wrote {OUT.relative_to(ROOT)}")
        return 0
    log = Path(tempfile.gettempdir()) / "measure_quantized.log"
    print(f"each command's output: {log}")
    rows = [measure(n, RECIPES[n], args.modes.split(","), log) for n in args.recipes or RECIPES]
    print(json.dumps(rows, indent=1))
    if args.record:
        import importlib.metadata as md

        versions = {p: md.version(p) for p in ("ai-edge-litert", "litert-quantizer", "litert-torch")}
        old = json.loads(OUT.read_text()) if OUT.exists() else {}
        merged = {r["recipe"]: r for r in old.get("rows", [])}
        for r in rows:                          # a mode measured again replaces only that mode's entry
            merged.setdefault(r["recipe"], {"recipe": r["recipe"], "modes": {}})["modes"].update(r["modes"])
        OUT.write_text(json.dumps({"command": "python scripts/measure_quantized.py --record", "versions": versions,
                                   "rows": list(merged.values()), **({"latency": old["latency"]}
                                                                     if "latency" in old else {})}, indent=1) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
