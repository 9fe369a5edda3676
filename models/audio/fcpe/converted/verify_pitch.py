"""Verify the exported FCPE graph on a device: pitch salience vs torch, then the task check (pitch in Hz).

Reads artifacts/pitch_ref.npz (dump_pitch_ref.py) and the graph (export_pitch.py), runs every input (espeak-ng
speech and pure tones) on `--device` with one compile, decodes both saliences to f0 with the same host decoder
(fcpe.decode) and compares:
  * numerics: salience correlation per input: the gate takes the minimum over the speech inputs; the tones'
    minimum is recorded but not gated, because a pure tone's spectrum is mostly far below its peak and an fp16
    DFT has a noise floor there (the README has the recorded numbers), which moves the salience away from its
    peak without moving the decoded pitch;
  * task, device vs torch: voicing agreement (share of frames both call voiced or both unvoiced, all inputs) and
    the pitch error in cents on the speech frames both call voiced (p95 and max; the tones' p95 is recorded);
  * task, vs the truth on the tones: the median error in cents from the tone's frequency, device and torch (the
    source model's own error is not zero: it reads a 110 Hz sine as about 113 Hz).

Gates: strict GPU residency N/N (GPU devices); min salience corr on speech >= 0.999; voicing agreement >= 0.98;
p95 pitch error vs torch on speech <= 10 cents; every tone within 100 cents (a semitone) of its frequency on the device
(median over its voiced frames) and voiced on >= 90 % of frames.

    python verify_pitch.py                        # artifacts/pitch_48000.tflite on this machine's GPU (fp16)
    python verify_pitch.py --device host-gpu-fp32
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.core.metrics import compare
from litert_gpu_toolkit.recipe import (LATENCY_METRIC, add_model_argument, add_ref_argument, finish_verify,
                                       latency_ms, load_model, load_reference, print_failure, residency,
                                       run_on_device, strict_gates, verify_main, verify_parser)

HERE = Path(__file__).resolve().parent
MIN_CORR = 0.999
MIN_VOICING_AGREEMENT = 0.98
MAX_P95_CENTS = 10.0
MAX_TONE_CENTS = 100.0      # one semitone: the source model itself reads 110 Hz as 113.4 Hz (52 cents)
MIN_TONE_VOICED = 0.9


def task_metrics(got: np.ndarray, ref: dict) -> dict:
    """Decode device and torch saliences alike; compare them with each other and the tones with the truth."""
    from fcpe import cents_error, decode

    table = ref["cent_table"]
    agree, errors, tone_err, tone_err_torch, tone_voiced = [], [], [], [], []
    for sal_dev, sal_ref, hz in zip(got, ref["salience"], ref["tone_hz"]):
        f0_dev, v_dev = decode(sal_dev, table)
        f0_ref, v_ref = decode(sal_ref, table)
        agree.append(v_dev == v_ref)
        errors.append(cents_error(f0_dev, f0_ref, v_dev & v_ref))
        if hz > 0:
            tone_voiced.append(float(v_dev.mean()))
            truth = np.full_like(f0_dev, hz)
            tone_err.append(float(np.median(cents_error(f0_dev, truth, v_dev))) if v_dev.any() else float("inf"))
            tone_err_torch.append(float(np.median(cents_error(f0_ref, truth, v_ref))) if v_ref.any() else float("inf"))
    speech = ref["tone_hz"] == 0
    agree_all = np.concatenate(agree)
    err_speech = np.concatenate([e for e, s in zip(errors, speech) if s] or [np.zeros(0)])
    err_tones = np.concatenate([e for e, s in zip(errors, speech) if not s] or [np.zeros(0)])
    out = {"voicing_agreement": float(agree_all.mean()),
           "p95_cents_vs_torch": float(np.percentile(err_speech, 95)) if err_speech.size else 0.0,
           "max_cents_vs_torch": float(err_speech.max()) if err_speech.size else 0.0,
           "voiced_speech_frames": int(err_speech.size)}
    if err_tones.size:
        out["p95_cents_vs_torch_tones"] = float(np.percentile(err_tones, 95))
    if tone_err:
        out["max_tone_median_cents"] = max(tone_err)
        out["max_tone_median_cents_torch"] = max(tone_err_torch)
        out["min_tone_voiced"] = min(tone_voiced)
    return out


def main(argv=None) -> int:
    parser = verify_parser(__doc__, HERE)
    add_model_argument(parser, HERE / "artifacts" / "pitch_48000.tflite", writes=False)
    add_ref_argument(parser, HERE / "artifacts" / "pitch_ref.npz", writes=False)
    args = parser.parse_args(argv)
    info = load_model(args.model, "export_pitch.py")
    ref = dict(load_reference(args.ref, "dump_pitch_ref.py"))
    sig = info.signatures[0]
    (name,) = sig.inputs
    want = tuple(sig.inputs[name].shape)
    if want != (1, ref["audio"].shape[1]):
        print(f"error: the graph takes {want}, the reference holds {ref['audio'].shape[1]} samples per input: "
              f"run dump_pitch_ref.py --samples {want[-1]}")
        return 2
    names = [str(n) for n in ref["names"]]
    print(f"{args.model.name}: {info.num_ops} ops; {len(names)} inputs ({', '.join(names)}) on {args.device}")
    run = run_on_device(args.model, {sig.key: [{name: a[None]} for a in ref["audio"]]}, args.device)
    res = residency(info, run)
    print(res.line)
    if not run.ok:
        print_failure(run)

    metrics: dict = {}
    if run.ok:
        got = next(iter(run.outputs[sig.key].values())).reshape(ref["salience"].shape)
        corr = np.array([compare(g, e).corr for g, e in zip(got, ref["salience"])])
        speech = ref["tone_hz"] == 0
        for n, c in zip(names, corr):
            print(f"  salience corr, {n}: {c:.6f}")
        metrics = {"min_corr": float(corr[speech].min()) if speech.any() else float(corr.min()),
                   "min_corr_tones": float(corr[~speech].min()) if (~speech).any() else None,
                   "max_abs": float(np.abs(got - ref["salience"]).max()),
                   **task_metrics(got, ref), "inputs": len(names), "frames_per_graph": int(got.shape[1]),
                   LATENCY_METRIC: latency_ms(run.run_s[sig.key])}
        metrics = {k: v for k, v in metrics.items() if v is not None}
        for k, v in metrics.items():
            print(f"  {k}: {v:.6g}" if isinstance(v, float) else f"  {k}: {v}")

    gates = strict_gates(args.device, res)
    gates[f"min salience corr (speech) >= {MIN_CORR}"] = metrics.get("min_corr", 0.0) >= MIN_CORR
    gates[f"voicing agreement >= {MIN_VOICING_AGREEMENT}"] = metrics.get("voicing_agreement", 0.0) >= \
        MIN_VOICING_AGREEMENT
    gates[f"p95 pitch error vs torch (speech) <= {MAX_P95_CENTS:g} cents"] = metrics.get("p95_cents_vs_torch", 1e9) <= \
        MAX_P95_CENTS
    if (ref["tone_hz"] > 0).any():
        gates[f"tones within {MAX_TONE_CENTS:g} cents, voiced >= {MIN_TONE_VOICED:.0%}"] = (
            metrics.get("max_tone_median_cents", 1e9) <= MAX_TONE_CENTS
            and metrics.get("min_tone_voiced", 0.0) >= MIN_TONE_VOICED)
    return finish_verify(args, graph=args.model.stem, run=run, residency=res.line, metrics=metrics, gates=gates,
                         headline=["min_corr", "voicing_agreement", "p95_cents_vs_torch", "max_tone_median_cents"])


if __name__ == "__main__":
    sys.exit(verify_main(main))
