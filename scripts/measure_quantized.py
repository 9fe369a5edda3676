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
    "fcpe": dict(folder="audio/fcpe", model="artifacts/pitch_48000.tflite", export=["export_pitch.py"],
                 ref="artifacts/pitch_ref.npz", dump=["dump_pitch_ref.py"], verify=["verify_pitch.py"]),
    "hifigan": dict(folder="audio/hifigan", model="artifacts/vocoder_polyphase_128f.tflite",
                    export=["export_vocoder.py"], ref="artifacts/reference.npz", dump=["dump_vocoder_ref.py"],
                    verify=["verify_vocoder.py"]),
    "openwakeword": dict(folder="audio/openwakeword", model="artifacts", files=["mel", "embedding", "hey_jarvis"],
                         export=["export_oww.py"], ref="artifacts/oww_ref.npz", dump=["dump_oww_ref.py"],
                         verify=["verify_oww.py"]),
    "mtcnn": dict(folder="vision/mtcnn", model="artifacts", files=["pnet", "rnet", "onet"],
                  export=["export_mtcnn.py"], ref="artifacts/mtcnn_ref.npz", dump=["dump_mtcnn_ref.py"],
                  verify=["verify_mtcnn.py"]),
    "realesrgan": dict(folder="vision/realesrgan_animevideov3", model="artifacts/realesrgan_x4_t64.tflite",
                       export=["export_sr.py", "--scale", "4", "--tile", "64"], ref="artifacts/ref_x4_t64.npz",
                       dump=["dump_sr_ref.py", "--scale", "4", "--tile", "64"],
                       verify=["verify_sr.py", "--scale", "4", "--tile", "64"]),
    "xfeat_extractor": dict(folder="vision/xfeat", model="artifacts/extractor_480x640.tflite",
                            export=["export_extractor.py"], ref="artifacts/extractor_480x640_ref.npz",
                            dump=["dump_extractor_ref.py"], verify=["verify_extractor.py"]),
    "xfeat_matcher": dict(folder="vision/xfeat", model="artifacts/matcher_n512.tflite", export=["export_matcher.py"],
                          ref="artifacts/matcher_n512_ref.npz", dump=["dump_matcher_ref.py"],
                          verify=["verify_matcher.py"]),
}
# a recipe whose graphs are a folder of files (`files`) is verified with --quantize MODE (its verify picks
# NAME_MODE.tflite); the others get --model FILE


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


def mode_files(cfg: dict, converted: Path, mode: str) -> list[Path]:
    """The .tflite file(s) of `mode`: one file, or each of a folder recipe's graphs."""
    if "files" in cfg:
        return [converted / mode_path(f"{cfg['model']}/{name}.tflite", mode) for name in cfg["files"]]
    return [converted / mode_path(cfg["model"], mode)]


def measure(name: str, cfg: dict, modes: list[str], log: Path, collect: bool = False) -> dict:
    converted = ROOT / "models" / cfg["folder"] / "converted"
    print(f"[{name}]", flush=True)
    if not collect and not (converted / cfg["ref"]).exists():
        if not (converted / cfg["model"]).exists():
            run(cfg["export"], converted, log)
        run(cfg["dump"], converted, log)
    row = {"recipe": name, "modes": {}}
    for mode in modes:
        entry = row["modes"][mode] = {}
        code = 0 if collect else run(cfg["export"] + ([] if mode == "fp32" else ["--quantize", mode]), converted,
                                     log)
        paths = mode_files(cfg, converted, mode)
        if code or not all(p.exists() for p in paths):
            entry["error"] = f"export exit {code}"
            continue
        entry["bytes"] = sum(p.stat().st_size for p in paths)
        weights = {p.stem: _weights(p) for p in paths}
        if len(paths) == 1:
            entry["weights"] = weights[paths[0].stem]
        elif any(weights.values()):          # a folder recipe: one line, graph by graph
            entry["weights"] = {"line": "; ".join(f"{g}: {(w or {}).get('line', 'fp32')}" for g, w in weights.items()),
                                "graphs": weights}
        which = ["--quantize", mode] if "files" in cfg else ["--model", str(paths[0].relative_to(converted))]
        for device in DEVICES:
            before = time.time()
            if not collect:
                run(cfg["verify"] + which + ["--device", device], converted, log)
            entry[device] = _record(converted / "results.json", paths[0], device, before)
    return row


def _weights(path: Path) -> dict | None:
    """The quantization summary the export wrote into the file's provenance sidecar (None: fp32)."""
    sidecar = path.with_name(path.name + ".provenance.json")
    return json.loads(sidecar.read_text()).get("weights") if sidecar.exists() else None


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
            paths = mode_files(RECIPES[name], converted, mode)
            if all(p.exists() for p in paths):
                files[(name, mode)] = [(p, make_inputs(read_model_info(p))[0]) for p in paths]
    times: dict = {}
    for r in range(rounds):
        for (name, mode), graphs in files.items():
            for device, accel in (("host-gpu", "gpu"), ("cpu", "cpu")):
                runs = [compile_and_run(p, feeds, accelerator=accel, repeats=repeats) for p, feeds in graphs]
                if all(run.ok for run in runs):     # a folder recipe: its graphs' times added
                    times.setdefault(name, {}).setdefault(mode, {}).setdefault(device, []).append(
                        1000.0 * sum(sum(run.run_s.values()) for run in runs))
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
    parser.add_argument("--collect", action="store_true",
                        help="run nothing: read the files and verify records an interrupted run left")
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
            old = data.get("latency", {}).get("ms", {})     # recipes timed in another run keep their ratios
            data["latency"] = {"command": "python scripts/measure_quantized.py --latency-only --record",
                               "rounds": args.rounds, "repeats": 5, "ms": {**old, **latency}}
            OUT.write_text(json.dumps(data, indent=1) + "\n")
            print(f"wrote {OUT.relative_to(ROOT)}")
        return 0
    log = Path(tempfile.gettempdir()) / "measure_quantized.log"
    print(f"each command's output: {log}")
    rows = [measure(n, RECIPES[n], args.modes.split(","), log, args.collect) for n in args.recipes or RECIPES]
    rows = [{**r, "modes": {m: e for m, e in r["modes"].items() if "error" not in e or not args.collect}}
            for r in rows]
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
