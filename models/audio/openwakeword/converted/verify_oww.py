"""Verify the three exported openWakeWord graphs on a device, chained as openWakeWord streams them, against two
references: the torch port (artifacts/oww_ref.npz, dump_oww_ref.py) and the .tflite files the wheel ships, run on
LiteRT's CPU through the same chain (an independent conversion of the same models).

Per clip: the mel graph on every 1760-sample chunk, features = mel / 10 + 2, the embedding graph on every 76-frame
window (step 8), the head on every 16 embeddings. The device's own outputs feed its next stage.

Gates: strict GPU residency N/N for each of the three graphs (GPU devices); wake-word score within 0.02 of torch
and of the shipped .tflite on every window; the task: every "hey jarvis" clip detected (max score >= 0.5) and no
other clip.

    python verify_oww.py                          # artifacts/{mel,embedding,hey_jarvis}.tflite, this GPU (fp16)
    python verify_oww.py --device cpu
    python verify_oww.py --fp32-graphs mel        # a precision plan: the mel graph compiled fp32, the rest fp16

--fp32-graphs compiles the named graphs with fp32 arithmetic on the GPU (still strictly GPU-only) and leaves the
others in fp16: the pipeline is already three graphs, so this plan needs no cut. It is recorded as its own row
(graph `pipeline_<names>-fp32`).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.core.metrics import compare
from litert_gpu_toolkit.recipe import (LATENCY_METRIC, add_model_argument, add_quantize_argument, add_ref_argument,
                                       finish_verify, latency_ms, load_model, load_reference, print_failure,
                                       quantized_path, residency, run_on_device, strict_gates, verify_main,
                                       verify_parser)

HERE = Path(__file__).resolve().parent
GRAPHS = ("mel", "embedding", "hey_jarvis")
SHIPPED = {"mel": "melspectrogram", "embedding": "embedding_model", "hey_jarvis": "hey_jarvis_v0.1"}
FP32_OF = {"host-gpu": "host-gpu-fp32", "host-native": "host-native-fp32"}   # the same device, fp32 arithmetic
MAX_SCORE_DIFF = 0.02
THRESHOLD = 0.5


def run_stage(path: Path, info, batch: list[np.ndarray], device: str):
    sig = info.signatures[0]
    (name,) = sig.inputs
    run = run_on_device(path, {sig.key: [{name: x[None]} for x in batch]}, device)
    if not run.ok:
        return run, None
    out = next(iter(run.outputs[sig.key].values()))
    return run, out.reshape(len(batch), *out.shape[1:]) if out.shape[0] == len(batch) else \
        out.reshape(len(batch), -1)


def chain(paths: dict, infos: dict, clips: np.ndarray, device: str | dict):
    """The pipeline on every clip with the given graphs: (runs by graph, mel, embeddings, scores) or a failed run.
    `device`: one for every graph, or graph -> device."""
    if isinstance(device, str):
        device = dict.fromkeys(GRAPHS, device)
    from dump_oww_ref import mel_chunks
    from oww import embedding_windows, head_windows, mel_to_features

    chunks = [mel_chunks(a) for a in clips]
    run_m, mel = run_stage(paths["mel"], infos["mel"], [c for cs in chunks for c in cs], device["mel"])
    if mel is None:
        return {"mel": run_m}, None
    mel = mel.reshape(len(clips), len(chunks[0]), 1, 8, 32)
    windows = [embedding_windows(mel_to_features(np.concatenate([m[0] for m in per_clip]))) for per_clip in mel]
    run_e, emb = run_stage(paths["embedding"], infos["embedding"], [w for ws in windows for w in ws],
                             device["embedding"])
    if emb is None:
        return {"mel": run_m, "embedding": run_e}, None
    emb = emb.reshape(len(clips), len(windows[0]), 96)
    heads = [head_windows(e) for e in emb]
    run_h, scores = run_stage(paths["hey_jarvis"], infos["hey_jarvis"], [h for hs in heads for h in hs],
                                 device["hey_jarvis"])
    runs = {"mel": run_m, "embedding": run_e, "hey_jarvis": run_h}
    if scores is None:
        return runs, None
    return runs, (mel, emb, scores.reshape(len(clips), -1))


def main(argv=None) -> int:
    parser = verify_parser(__doc__, HERE)
    add_model_argument(parser, HERE / "artifacts", writes=False,
                       default_text="artifacts (the folder of mel.tflite, embedding.tflite, hey_jarvis.tflite)")
    add_quantize_argument(parser, verify=True)
    add_ref_argument(parser, HERE / "artifacts" / "oww_ref.npz", writes=False)
    parser.add_argument("--shipped", type=Path, default=None, metavar="DIR",
                        help="folder of the wheel's own .tflite files (default: the installed openwakeword's)")
    parser.add_argument("--fp32-graphs", nargs="+", choices=GRAPHS, default=[], metavar="GRAPH",
                        help=f"compile these graphs ({', '.join(GRAPHS)}) with fp32 arithmetic on a GPU device "
                             f"({', '.join(FP32_OF)}); the others stay fp16")
    args = parser.parse_args(argv)
    if args.fp32_graphs and args.device not in FP32_OF:
        parser.error(f"--fp32-graphs needs a GPU device that also runs fp32 ({', '.join(FP32_OF)}), "
                     f"not {args.device}")
    devices = {g: FP32_OF[args.device] if g in args.fp32_graphs else args.device for g in GRAPHS}
    graph = "pipeline" + (f"_{'+'.join(g for g in GRAPHS if g in args.fp32_graphs)}-fp32" if args.fp32_graphs else "")
    paths = {g: quantized_path(args.model / f"{g}.tflite", args) for g in GRAPHS}
    infos = {g: load_model(p, "export_oww.py") for g, p in paths.items()}
    ref = load_reference(args.ref, "dump_oww_ref.py")
    from oww import shipped_tflite

    clips, positive = ref["clips"], ref["positive"]
    names = [str(n) for n in ref["names"]]
    print(f"{len(clips)} clips ({', '.join(names)}) on {args.device}"
          + (f" ({', '.join(args.fp32_graphs)} in fp32)" if args.fp32_graphs else ""))
    runs, got = chain(paths, infos, clips, devices)
    ress = [residency(infos[g], runs[g]) for g in GRAPHS if g in runs]
    lines = [f"{g}: {r.line}" + (" (fp32)" if g in args.fp32_graphs else "") for g, r in zip(GRAPHS, ress)]
    for line in lines:
        print(f"  {line}")
    failed = [g for g in GRAPHS if g in runs and not runs[g].ok]
    for g in failed:
        print_failure(runs[g], g)

    shipped_paths = {g: (args.shipped / f"{SHIPPED[g]}.tflite") if args.shipped else shipped_tflite(SHIPPED[g])
                     for g in GRAPHS}
    shipped_infos = {g: load_model(p, "pip install --no-deps openwakeword==0.5.1") for g, p in shipped_paths.items()}
    _, shipped = chain(shipped_paths, shipped_infos, clips, "cpu")

    metrics: dict = {}
    gates = strict_gates(args.device, *ress) if len(ress) == len(GRAPHS) else strict_gates(args.device)
    if got is not None and shipped is not None:
        mel, emb, scores = got
        detected = scores.max(axis=1) >= THRESHOLD
        metrics = {
            "score_max_abs_vs_torch": float(np.abs(scores - ref["scores"]).max()),
            "score_max_abs_vs_shipped": float(np.abs(scores - shipped[2]).max()),
            "shipped_vs_torch_score_max_abs": float(np.abs(shipped[2] - ref["scores"]).max()),
            "mel_max_abs_db_vs_torch": float(np.abs(mel - ref["mel"]).max()),
            "embedding_min_corr_vs_torch": float(min(compare(a, b).corr for a, b in zip(emb, ref["embeddings"]))),
            "detected_positives": f"{int(detected[positive].sum())}/{int(positive.sum())}",
            "detected_negatives": f"{int(detected[~positive].sum())}/{int((~positive).sum())}",
            "windows": int(scores.size),
            # one streaming step (80 ms of audio) costs one call of each graph: the sum of their medians
            LATENCY_METRIC: sum(latency_ms(runs[g].run_s[infos[g].signatures[0].key]) for g in GRAPHS),
        }
        for k, v in metrics.items():
            print(f"  {k}: {v:.6g}" if isinstance(v, float) else f"  {k}: {v}")
        gates[f"score within {MAX_SCORE_DIFF} of torch"] = metrics["score_max_abs_vs_torch"] <= MAX_SCORE_DIFF
        gates[f"score within {MAX_SCORE_DIFF} of the shipped .tflite"] = \
            metrics["score_max_abs_vs_shipped"] <= MAX_SCORE_DIFF
        gates["hey jarvis detected in every positive clip and no negative"] = bool(
            detected[positive].all() and not detected[~positive].any())
    else:
        gates["the three graphs ran"] = False
        if shipped is None:
            print("the shipped .tflite chain did not run on the CPU")
    run = runs.get("hey_jarvis") or runs["mel"]
    return finish_verify(args, graph=graph, run=run, residency="; ".join(lines),
                         metrics=metrics, gates=gates, models=paths, startup=list(runs.values()),
                         headline=["score_max_abs_vs_torch", "score_max_abs_vs_shipped", "detected_positives"])


if __name__ == "__main__":
    sys.exit(verify_main(main))
