"""Export a Hugging Face model for a task to a checked GPU .tflite in one command.

    python -m litert_gpu_toolkit export --model DIR_OR_ID --task TASK -o OUT/

The model comes from a local folder or a hub id (fetched only when needed; HF_HUB_OFFLINE=1 keeps to the local
cache; remote code is never run). It is wrapped for the task at the fixed shapes the flags give, converted
with `convert_for_gpu` (the toolkit's rewrites, then the GPU check against torch) and OUT/ receives, per graph:
GRAPH.tflite, its provenance sidecar GRAPH.tflite.provenance.json, the check report GRAPH.check.txt and
GRAPH.check.json; and export.json, the record of the whole run (task, source, shapes, per graph the verdict,
residency, rewrites kept and the worst correlation with torch). text-generation writes two graphs, prefill
and decode; every other task writes one, model.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

from ..core.arguments import add_verbose_argument, positive_floats, positive_int, positive_ints, seed


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..export.tasks import TASKS, task_table

    p.description = f"{p.description}\nTasks:\n{task_table()}"
    p.add_argument("--model", required=True, metavar="DIR_OR_ID",
                   help="a model folder (config.json + safetensors, as save_pretrained writes it) or a hub id "
                        "'owner/name' (HF_HUB_OFFLINE=1: the local cache only)")
    p.add_argument("--task", required=True, choices=list(TASKS), metavar="TASK",
                   help="what the graph computes (listed above)")
    p.add_argument("-o", "--output", required=True, type=Path, metavar="OUT",
                   help="the folder that receives the files (made if missing)")
    p.add_argument("--seq-len", type=positive_ints, default=(128,), metavar="N[,N...]",
                   help="text: the fixed sequence length (default: 128), or shape buckets '32,64,128': one file "
                        "with a signature seq_N per length, weights shared, each checked (pick a bucket at run "
                        "time with litert_gpu_toolkit.runtime.buckets); text-generation: the prefill length")
    p.add_argument("--image-size", type=positive_ints, default=None, metavar="N[,N...]",
                   help="image tasks: the square input's side (default: the config's image_size, else 224), or "
                        "shape buckets '224,320': one file with a signature img_N per side, each checked "
                        "(padding is not masked: runtime/buckets.py)")
    p.add_argument("--audio-seconds", type=positive_floats, default=(1.0,), metavar="S[,S...]",
                   help="audio tasks: the fixed clip length in seconds (default: 1.0), or shape buckets '1,2.5': "
                        "a signature audio_<ms>ms per length, each checked")
    p.add_argument("--cache-len", type=positive_int, default=256,
                   help="text-generation: the decode graph's KV-cache rows (default: 256)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the example inputs (default: 0)")
    from ..quantize.plan import MODES

    p.add_argument("--weights", choices=list(MODES), default="fp32",
                   help="store the weights as fp16 / int8 / int4 after the float graph PASSes; each quantized try is "
                        "checked on the GPU against torch and what fails stays float (default: fp32)")
    p.add_argument("--no-check", action="store_true",
                   help="convert only: no GPU check (the verdict is UNCHECKED, exit 0 when every graph converted)")
    add_verbose_argument(p)


class Progress:
    """A one-line bar over the export's stages, on stderr (stdout keeps the summary)."""

    WIDTH = 20

    def __init__(self, total: int, stream=None):
        self.total, self.done, self.stream = total, 0, stream or sys.stderr
        self.start = time.perf_counter()

    def step(self, text: str) -> None:
        filled = self.WIDTH * self.done // max(1, self.total)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        elapsed = time.perf_counter() - self.start
        print(f"[{bar}] {self.done}/{self.total} {elapsed:5.0f} s  {text}", file=self.stream, flush=True)
        self.done += 1

    def finish(self, text: str) -> None:
        self.done = self.total
        self.step(text)


def _report_text(report) -> str:
    from ..check.report import print_report

    buffer = io.StringIO()
    print_report(report, full=True, file=buffer)
    return buffer.getvalue()


def _worst_corr(report) -> float | None:
    corrs = [c.get("corr") for outs in (getattr(report, "signatures", None) or {}).values() for e in outs.values()
             for label, c in e.get("vs_reference", {}).items() if label != "cpu" and c.get("corr") is not None]
    return min(corrs) if corrs else None


def _write_graph(out: Path, name: str, result, args, extra: dict) -> dict:
    """The sidecar and the check report of one converted graph; its entry in export.json."""
    from ..recipe.provenance import write_provenance

    entry = {"graph": name, "verdict": result.verdict, "rewrites": result.kept, "dropped": result.dropped,
             "attempts": result.attempts}
    if result.quantized is not None:
        entry["weights"] = result.quantized.to_dict()
        entry["weights"].pop("check", None)             # the check report is written beside it
    if result.error:
        entry["error"] = result.error_line
        if result.log_path is not None:
            entry["converter_log"] = str(result.log_path)
        return entry
    path = out / f"{name}.tflite"
    sidecar = write_provenance(path, args, graph=name, extra=extra)
    entry.update(file=path.name, provenance=json.loads(sidecar.read_text()))
    if result.report is not None:
        (out / f"{name}.check.txt").write_text(_report_text(result.report))
        result.report.to_json(out / f"{name}.check.json")
        entry.update(residency=(result.report.residency or {}).get("line"), summary=result.report.summary,
                     min_corr_vs_torch=_worst_corr(result.report), check=f"{name}.check.json")
    return entry


def _where(exc: BaseException) -> str:
    """`Type: message (file.py:LINE)` of an exception, at the innermost frame that raised it."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    at = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}{at}"


def _exit_status(verdicts: list[str], checked: bool) -> int:
    if not checked:
        return 0 if all(v == "UNCHECKED" for v in verdicts) else 1
    if all(v == "PASS" for v in verdicts):
        return 0
    return 3 if "NO_GPU" in verdicts else 1


def run(args: argparse.Namespace) -> int:
    from ..core.weights import WeightsError, resolve_model_dir

    out: Path = args.output
    if out.exists() and not out.is_dir():
        print(f"error: -o {out} exists and is not a folder", file=sys.stderr)
        return 2
    steps = 4 if args.task != "text-generation" else 5
    progress = Progress(steps)
    progress.step(f"resolving {args.model}")
    try:
        model_dir = resolve_model_dir(args.model)
    except WeightsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    progress.step(f"loading {model_dir.name} for {args.task}")
    from ..export.tasks import ExportError, Shapes, build_graphs

    images, clips = args.image_size or (), args.audio_seconds
    shapes = Shapes(seq_len=max(args.seq_len), image_size=max(images) if images else None,
                    audio_seconds=max(clips), cache_len=args.cache_len, seed=args.seed,
                    buckets=args.seq_len if len(args.seq_len) > 1 else (),
                    image_buckets=images if len(images) > 1 else (), audio_buckets=clips if len(clips) > 1 else ())
    try:
        graphs = build_graphs(args.task, model_dir, shapes)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:                    # noqa: BLE001 - a model this command does not know: say so, exit 2
        print(f"error: cannot build the {args.task} graph of {model_dir.name}: {_where(exc)}\n"
              f"  this model's call or config is one `export --task` does not handle; convert_for_gpu(model, "
              "example_inputs, path) takes any call", file=sys.stderr)
        return 2
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: cannot make {out}: {exc}", file=sys.stderr)
        return 2
    from ..convert.pipeline import convert_for_gpu

    record = {"task": args.task, "model": args.model, "model_dir": model_dir.name, "shapes": vars(shapes),
              "check": not args.no_check, "graphs": []}
    extra = {"task": args.task, "source_model": args.model}
    for graph in graphs:
        for note in graph.notes:
            print(f"{graph.name}: {note}")
        progress.step(f"converting + checking {graph.name}" if not args.no_check else f"converting {graph.name}")
        try:
            result = convert_for_gpu(graph.module, graph.inputs, out / f"{graph.name}.tflite",
                                     check=not args.no_check, weights="fp32" if args.no_check else args.weights,
                                     signatures=graph.signatures)
        except Exception as exc:                # noqa: BLE001 - never a traceback: the reason and exit 2
            print(f"error: converting {graph.name} failed unexpectedly: {_where(exc)}", file=sys.stderr)
            return 2
        print(result.summary(command=True))
        entry = _write_graph(out, graph.name, result, args, extra)
        entry["notes"] = graph.notes
        record["graphs"].append(entry)
    verdicts = [g["verdict"] for g in record["graphs"]]
    record["exit_status"] = status = _exit_status(verdicts, not args.no_check)
    (out / "export.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    done = ", ".join(f"{g['graph']} {g['verdict']}" for g in record["graphs"])
    progress.finish(f"{done}; wrote {out}")
    return status
