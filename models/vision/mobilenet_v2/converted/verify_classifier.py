#!/usr/bin/env python
"""Check the exported MobileNetV2 against torch's logits on real photos, on a device.

Runs every photo of artifacts/classifier_ref.npz (written by dump_classifier_ref.py) through the .tflite --
one compile, one run per photo -- and reports the residency line, per photo the logits' correlation with
torch, whether top-1 and the top-5 list (in order, and as a set) are identical, and the predicted class names.

Gates (exit status 1 if any fails): strict GPU residency N/N (GPU devices), top-1 identical on every photo,
min logits correlation >= 0.999. Results are merged into results.json next to this script (or in
--results-dir). Exit 2: unknown device or a missing / corrupt artifact; exit 3: no usable GPU.

    python verify_classifier.py                  # software/host GPU, fp16
    python verify_classifier.py --device cpu
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.core.metrics import compare
from litert_gpu_toolkit.recipe import (LATENCY_METRIC, add_model_argument, add_ref_argument, finish_verify,
                                       latency_ms, load_model, load_reference, print_failure, residency,
                                       run_on_device, strict_gates, verify_main, verify_parser)

HERE = Path(__file__).resolve().parent

MIN_CORR = 0.999


def main() -> int:
    p = verify_parser(__doc__, HERE)
    add_model_argument(p, HERE / "artifacts" / "classifier.tflite", writes=False)
    add_ref_argument(p, HERE / "artifacts" / "classifier_ref.npz", writes=False)
    args = p.parse_args()
    info = load_model(args.model, "export_classifier.py")
    ref = load_reference(args.ref, "dump_classifier_ref.py")

    photos, inputs, expected = [str(s) for s in ref["photos"]], ref["inputs"], ref["logits"]
    sig = info.signatures[0]
    print(f"running {len(photos)} photos through {args.model.name} on {args.device} (one compile) ...")
    start = time.perf_counter()
    run = run_on_device(args.model, {sig.key: [{"args_0": inputs[i:i + 1]} for i in range(len(photos))]},
                        args.device)
    wall = time.perf_counter() - start
    res = residency(info, run)
    print(res.line)

    gates = strict_gates(args.device, res)
    metrics: dict = {}
    per_photo: dict = {}
    if not run.ok:
        print_failure(run)
        gates.update({"top-1 identical on every photo": False, f"min logits corr >= {MIN_CORR}": False})
    else:
        from mobilenet_v2 import class_names   # the recipe's model module imports torch: only when needed

        names = class_names()
        got = run.outputs[sig.key]["output_0"].reshape(len(photos), -1)
        corr, top1, top5, top5_set = [], [], [], []
        print(f"{'photo':<18} {'corr':>9} top1 top5  prediction (device) / torch")
        for i, ph in enumerate(photos):
            c = compare(got[i], expected[i])
            t5_dev, t5_ref = np.argsort(-got[i])[:5], np.argsort(-expected[i])[:5]
            corr.append(c.corr)
            top1.append(bool(t5_dev[0] == t5_ref[0]))
            top5.append(bool(np.array_equal(t5_dev, t5_ref)))
            top5_set.append(set(t5_dev.tolist()) == set(t5_ref.tolist()))
            per_photo[ph] = {"corr": round(c.corr, 6), "max_abs": round(c.max_abs, 4),
                             "top5_device": [names[k] for k in t5_dev], "top5_torch": [names[k] for k in t5_ref]}
            print(f"{ph:<18} {c.corr:.6f} {'yes' if top1[-1] else 'NO':>4} {'yes' if top5[-1] else 'no':>4}  "
                  f"{names[t5_dev[0]]} ({t5_dev[0]}) / {names[t5_ref[0]]} ({t5_ref[0]})")
        metrics = {"min_logits_corr": float(min(corr)), "top1_agreement": float(np.mean(top1)),
                   "top5_identical": float(np.mean(top5)), "top5_same_set": float(np.mean(top5_set)),
                   "photos": len(photos),
                   "max_abs_logit_error": float(np.abs(got - expected).max()),
                   "nonfinite": int((~np.isfinite(got)).sum()),
                   "compile_s": round(run.compile_s or 0.0, 3),
                   LATENCY_METRIC: latency_ms(run.run_s.get(sig.key, 0.0)),  # per photo
                   "verify_wall_s": round(wall, 1)}
        print(f"min corr {metrics['min_logits_corr']:.6f}, top-1 {sum(top1)}/{len(photos)}, "
              f"top-5 identical in order {sum(top5)}/{len(photos)} (same five classes {sum(top5_set)}/{len(photos)}), "
              f"max abs logit error {metrics['max_abs_logit_error']:.3g}")
        print(f"compile {metrics['compile_s']:.2f} s, run {metrics[LATENCY_METRIC]:.0f} ms per photo (median), "
              f"{wall:.0f} s in all")
        gates["top-1 identical on every photo"] = all(top1)
        gates[f"min logits corr >= {MIN_CORR}"] = bool(min(corr) >= MIN_CORR)

    return finish_verify(args, graph=args.model.stem, run=run, residency=res.line, metrics=metrics, gates=gates,
                         headline=["min_logits_corr", "top1_agreement", "top5_identical"],
                         extra={"model_file": args.model.name, "ops": info.num_ops, "per_photo": per_photo})


if __name__ == "__main__":
    sys.exit(verify_main(main))
