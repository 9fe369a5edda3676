"""Stream the test recording through the converted step graph and check it against the TorchScript reference.

Two runs on the chosen device:
  1. teacher-forced, through the toolkit's `run_on_device` (a child process, one compile, strict GPU-only on GPU
     devices): every chunk gets the reference state (h_in, c_in from dump_vad_ref.py). Gives the residency line
     and the per-step error alone.
  2. streaming (host devices): the .tflite step runs once per 512-sample chunk, in order, carrying its OWN state:
     the h_next and c_next it returns are its next h and c (zeros at the start). This is the deployed loop, and
     the run the gates judge. Latency per chunk = write inputs + run + read outputs (reading waits for the GPU).
     A phone runner runs fixed inputs only, so on a phone the gates judge run 1 instead (recorded as such).

Task check: `vad_net.segments` (threshold + minimum durations) turns both probability curves into speech
segments. Gates: strict GPU residency (GPU devices); max |prob - reference| <= --max-error (0.01); same number of
segments, every start and end within one chunk. Writes a PNG of both curves; results go to results.json here
(or in --results-dir). Exit 2: unknown device or a missing / corrupt artifact; exit 3: no usable GPU.

    python verify_vad.py                   # host GPU, fp16 (default)
    python verify_vad.py --device cpu      # LiteRT CPU (XNNPACK), for the latency comparison
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.recipe import (LATENCY_METRIC, ArtifactError, add_model_argument, add_ref_argument,
                                       finish_verify, fixed_inputs_only, latency_ms, load_model, load_reference,
                                       open_session, print_failure, residency, run_on_device, strict_gates,
                                       verify_main, verify_parser)
from vad_signal import CHUNK, HIDDEN, SAMPLE_RATE, segments, steps_of

HERE = Path(__file__).resolve().parent

CHUNK_S = CHUNK / SAMPLE_RATE


def stream(model_path: Path, steps: np.ndarray, device: str) -> tuple[np.ndarray, list[float]]:
    """Run the step over all chunks in this process (a `runtime.Session`, strict like run_on_device), feeding its
    state back. Returns the probabilities and the seconds per chunk (write inputs + run + read outputs)."""
    h = c = np.zeros((1, HIDDEN), np.float32)
    probs = []
    from litert_gpu_toolkit.rewrites.output_aliasing import ONE_INPUT

    with open_session(model_path, device) as session:
        for k, step in enumerate(steps):
            once = {ONE_INPUT: np.ones((1,), np.float32)} if k == 0 else {}  # written once, never changes
            got = session.run({"audio": step[None], "h": h, "c": c, **once})
            h, c = got["h_next"], got["c_next"]
            probs.append(float(got["prob"].reshape(-1)[0]))
    return np.array(probs, np.float32), session.seconds


def plot(path: Path, audio, ref_prob, got_prob, ref_segs, got_segs, label: str, threshold: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = (np.arange(len(ref_prob)) + 0.5) * CHUNK_S
    fig, (ax0, ax1, ax2) = plt.subplots(3, 1, figsize=(11, 7), sharex=True, gridspec_kw={"height_ratios": [1, 2, 1]})
    ax0.plot(np.arange(len(audio)) / SAMPLE_RATE, audio, lw=0.3, color="0.3")
    ax0.set_ylabel("waveform")
    ax1.plot(t, ref_prob, lw=2.2, color="tab:blue", label="TorchScript reference")
    ax1.plot(t, got_prob, lw=1.0, color="tab:orange", label=f".tflite step, {label}")
    ax1.axhline(threshold, color="0.5", ls="--", lw=0.8, label="threshold")
    for segs, y, color in ((ref_segs, 1.06, "tab:blue"), (got_segs, 1.10, "tab:orange")):
        for s, e in segs:
            ax1.plot([s * CHUNK_S, e * CHUNK_S], [y, y], color=color, lw=3)
    ax1.set_ylabel("speech probability")
    ax1.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8, frameon=False)
    ax2.semilogy(t, np.abs(got_prob - ref_prob) + 1e-9, lw=0.8, color="tab:red")
    ax2.set_ylabel("|difference|")
    ax2.set_xlabel("time (s); bars above the curves: speech segments")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    p = verify_parser(__doc__, HERE)
    add_model_argument(p, HERE / "artifacts" / "silero_vad_step.tflite", writes=False)
    add_ref_argument(p, HERE / "artifacts" / "vad_ref.npz", writes=False)
    p.add_argument("--plot", type=Path, default=HERE / "artifacts" / "vad_probabilities.png",
                   help="the probability curves as a PNG (default: artifacts/vad_probabilities.png)")
    p.add_argument("--max-error", type=float, default=0.01, help="gate on max |dprob| (default 0.01)")
    p.add_argument("--threshold", type=float, default=0.5, help="speech when prob >= this (default 0.5)")
    p.add_argument("--min-speech-ms", type=float, default=250.0, help="drop shorter segments (default 250)")
    p.add_argument("--min-silence-ms", type=float, default=100.0, help="bridge shorter gaps (default 100)")
    args = p.parse_args()
    from litert_gpu_toolkit.rewrites.output_aliasing import ONE_INPUT, feed_one  # imports torch

    info = load_model(args.model, "export_vad.py")
    ref = load_reference(args.ref, "dump_vad_ref.py")

    audio, ref_prob = ref["audio"], ref["ref_prob"]
    steps = steps_of(audio)
    sig = info.signatures[0]
    if sorted(sig.inputs) != sorted(["audio", "c", "h", ONE_INPUT]):
        raise ArtifactError(
            f"{args.model.name} takes {sorted(sig.inputs)}: verify the GPU step (export_vad.py without --plain)"
        )
    samples = [
        feed_one({"audio": steps[k : k + 1], "h": ref["h_in"][k : k + 1], "c": ref["c_in"][k : k + 1]})
        for k in range(len(steps))
    ]
    print(
        f"{len(steps)} chunks of {CHUNK} samples ({len(audio) / SAMPLE_RATE:.2f} s) through {args.model.name} "
        f"on {args.device}"
    )
    run = run_on_device(args.model, {sig.key: samples}, args.device)
    res = residency(info, run)
    print(res.line)
    gates = strict_gates(args.device, res)
    err_gate, seg_gates = (
        f"max |dprob| <= {args.max_error:g}",
        ("same number of speech segments", "segment boundaries within 1 chunk"),
    )
    if not run.ok:
        print_failure(run)
        gates.update({err_gate: False, seg_gates[0]: False, seg_gates[1]: False})
        return finish_verify(args, graph=args.model.stem, run=run, residency=res.line, metrics={}, gates=gates)
    forced_prob = run.outputs[sig.key]["prob"].reshape(-1)
    forced_err = float(np.abs(forced_prob - ref_prob).max())
    print(f"teacher-forced (reference state into every step): max |dprob| = {forced_err:.3g}")

    if fixed_inputs_only(args.device):
        got_prob, judged = forced_prob, "teacher-forced (runner job: fixed inputs)"
        latency = [run.run_s.get(sig.key, float("nan"))]
    else:
        got_prob, latency = stream(args.model, steps, args.device)
        judged = "streaming, own state"
        latency = latency[3:]  # the first calls warm up
    err = np.abs(got_prob - ref_prob)
    min_speech = math.ceil(args.min_speech_ms / 1000 / CHUNK_S)
    min_silence = math.ceil(args.min_silence_ms / 1000 / CHUNK_S)
    ref_segs = segments(ref_prob, args.threshold, min_speech, min_silence)
    got_segs = segments(got_prob, args.threshold, min_speech, min_silence)
    same_count = len(ref_segs) == len(got_segs)
    shift = max((max(abs(a[0] - b[0]), abs(a[1] - b[1])) for a, b in zip(ref_segs, got_segs)), default=0)
    seconds = lambda segs: [[round(s * CHUNK_S, 3), round(e * CHUNK_S, 3)] for s, e in segs]
    median_ms = latency_ms(latency)
    p10_ms, p90_ms = (float(np.percentile(latency, q)) * 1e3 for q in (10, 90))

    print(f"{judged}: max |dprob| = {err.max():.3g} (chunk {int(err.argmax())}), mean {err.mean():.3g}")
    print(f"segments (s), reference: {seconds(ref_segs)}")
    print(f"segments (s), .tflite:   {seconds(got_segs)}  (largest boundary shift: {shift} chunk(s))")
    print(
        f"latency per chunk: median {median_ms:.3f} ms (p10 {p10_ms:.3f}, p90 {p90_ms:.3f}) "
        f"for {CHUNK_S * 1e3:.0f} ms of audio (compile {run.compile_s or 0:.2f} s)"
    )
    plot(args.plot, audio, ref_prob, got_prob, ref_segs, got_segs, f"{args.device}, {judged}", args.threshold)
    print(f"wrote {args.plot}")

    gates[err_gate] = bool(err.max() <= args.max_error)
    gates[seg_gates[0]] = same_count
    gates[seg_gates[1]] = bool(same_count and shift <= 1)
    metrics = {
        "max_abs_prob_error": float(err.max()),
        "segments_tflite_ref": f"{len(got_segs)}/{len(ref_segs)}",
        LATENCY_METRIC: median_ms,
        "latency_ms_p10": round(p10_ms, 2),  # per chunk
        "latency_ms_p90": round(p90_ms, 2),
        "max_boundary_shift_chunks": int(shift),
        "mean_abs_prob_error": float(err.mean()),
        "teacher_forced_max_abs_prob_error": forced_err,
        "chunks": len(steps),
        "compile_s": round(run.compile_s or 0.0, 3),
    }
    return finish_verify(
        args, graph=args.model.stem, run=run, residency=res.line, metrics=metrics, gates=gates,
        headline=["max_abs_prob_error", "segments_tflite_ref", LATENCY_METRIC],
        extra={
            "judged_run": judged,
            "audio_s": round(len(audio) / SAMPLE_RATE, 2),
            "segments_s": {"reference": seconds(ref_segs), "tflite": seconds(got_segs)},
            "segmenter": {"threshold": args.threshold, "min_speech_chunks": min_speech,
                          "min_silence_chunks": min_silence},
        },
    )


if __name__ == "__main__":
    sys.exit(verify_main(main))
