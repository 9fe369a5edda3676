#!/usr/bin/env python
"""Check the exported encoder against the source model's embeddings, on a device.

Runs every sentence of artifacts/encoder_ref.npz (written by dump_encoder_ref.py) through the
.tflite -- one compile, one run per sentence -- and compares with sentence-transformers' output:

  * the residency line (strict GPU-only compile: N/N ops, or which ops the GPU rejected)
  * cosine(tflite, reference) for every sentence, the minimum, and the max abs error
  * the task check: each sentence's nearest other sentence (by cosine) is the reference's

Gates (exit status 1 if any fails): strict GPU residency N/N (GPU devices), min cosine >= 0.999,
nearest-neighbour agreement 100%. Results are merged into results.json next to this script
(or in --results-dir). Exit 2: unknown device or a missing / corrupt artifact; exit 3: no usable GPU.

    python verify_encoder.py                          # software/host GPU, fp16
    python verify_encoder.py --device cpu
    python verify_encoder.py --model artifacts/encoder_fp16w.tflite
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.recipe import (LATENCY_METRIC, ArtifactError, add_model_argument, add_ref_argument,
                                       finish_verify, latency_ms, load_model, load_reference, print_failure,
                                       residency, run_on_device, strict_gates, verify_main, verify_parser)

HERE = Path(__file__).resolve().parent
MIN_COSINE = 0.999


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def nearest_other(emb: np.ndarray) -> np.ndarray:
    sim = unit(emb) @ unit(emb).T
    np.fill_diagonal(sim, -np.inf)
    return sim.argmax(1)


def main() -> int:
    p = verify_parser(__doc__, HERE)
    add_model_argument(p, HERE / "artifacts" / "encoder.tflite", writes=False)
    add_ref_argument(p, HERE / "artifacts" / "encoder_ref.npz", writes=False)
    args = p.parse_args()
    info = load_model(args.model, "export_encoder.py")
    ref = load_reference(args.ref, "dump_encoder_ref.py")

    sentences, expected = ref["sentences"], ref["embeddings"]
    sig = info.signatures[0]
    want = sig.inputs["input_ids"].shape
    if tuple(want) != (1, ref["input_ids"].shape[1]):
        raise ArtifactError(f"the model takes input_ids {want}, the dump has length {ref['input_ids'].shape[1]}: "
                            "export and dump with the same --seq-len")
    samples = [{"input_ids": ref["input_ids"][i:i + 1], "attention_mask": ref["attention_mask"][i:i + 1]}
               for i in range(len(sentences))]

    print(f"running {len(samples)} sentences through {args.model.name} on {args.device} (one compile) ...")
    start = time.perf_counter()
    run = run_on_device(args.model, {sig.key: samples}, args.device)
    wall = time.perf_counter() - start
    res = residency(info, run)
    print(res.line)

    gates = strict_gates(args.device, res)
    metrics: dict = {}
    if not run.ok:
        print_failure(run)
        gates.update({f"min cosine >= {MIN_COSINE}": False, "nearest-neighbour agreement 100%": False})
    else:
        got = run.outputs[sig.key]["embedding"].reshape(len(sentences), -1)
        cosine = np.sum(unit(got) * unit(expected), axis=1)
        nn_ref, nn_got = nearest_other(expected), nearest_other(got)
        print(f"{'#':>3} {'cosine':>9}  nn(ref) nn(got)  sentence")
        for i, s in enumerate(sentences):
            flag = "" if nn_ref[i] == nn_got[i] else "  <-- nearest neighbour differs"
            print(f"{i:>3} {cosine[i]:.6f}  {nn_ref[i]:>7} {nn_got[i]:>7}  {str(s)[:60]}{flag}")
        sim_err = np.abs(unit(got) @ unit(got).T - unit(expected) @ unit(expected).T).max()
        metrics = {"min_cosine": float(cosine.min()), "max_abs_error": float(np.abs(got - expected).max()),
                   "nn_agreement": float(np.mean(nn_ref == nn_got)),
                   "sentences": len(sentences), "mean_cosine": float(cosine.mean()),
                   "similarity_matrix_max_abs_error": float(sim_err),
                   "max_norm_error": float(np.abs(np.linalg.norm(got, axis=1) - 1.0).max()),  # unit length?
                   "nonfinite": int((~np.isfinite(got)).sum()),
                   "compile_s": round(run.compile_s or 0.0, 3),
                   LATENCY_METRIC: latency_ms(run.run_s.get(sig.key, 0.0)),  # per sentence
                   "verify_wall_s": round(wall, 1)}
        print(f"min cosine {metrics['min_cosine']:.6f} (mean {metrics['mean_cosine']:.6f}), "
              f"max abs error {metrics['max_abs_error']:.3g}, max |norm - 1| {metrics['max_norm_error']:.2g}, "
              f"similarity-matrix max error {sim_err:.3g}, "
              f"nearest-neighbour agreement {metrics['nn_agreement']:.0%} ({int(np.sum(nn_ref == nn_got))}/"
              f"{len(sentences)})")
        print(f"compile {metrics['compile_s']:.2f} s, run {metrics[LATENCY_METRIC]:.0f} ms "
              f"per sentence (median), {wall:.0f} s in all")
        gates[f"min cosine >= {MIN_COSINE}"] = bool(cosine.min() >= MIN_COSINE)
        gates["nearest-neighbour agreement 100%"] = bool(np.all(nn_ref == nn_got))

    return finish_verify(args, graph=args.model.stem, run=run, residency=res.line, metrics=metrics, gates=gates,
                         headline=["min_cosine", "max_abs_error", "nn_agreement"],
                         extra={"model_file": args.model.name, "model_mb": round(args.model.stat().st_size / 1e6, 1),
                                "seq_len": int(ref["input_ids"].shape[1]), "ops": info.num_ops})


if __name__ == "__main__":
    sys.exit(verify_main(main))
