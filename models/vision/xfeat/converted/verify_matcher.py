#!/usr/bin/env python3
"""Run the exported LighterGlue matcher on a device and compare with torch: assignment, matches, motion.

Every photo pair in the reference (dump_matcher_ref.py: torch's keypoints and descriptors of both images, torch's
log-assignment) runs through the .tflite on one compile. The host (lighterglue.py) takes the matches from the
device's assignment the same way as from torch's (mutual best, probability above 0.1), and fits a rotation +
shift to them (xfeat.py's seeded RANSAC). Reported per pair: the correlation of the N x N match-probability
matrix with torch's, the fraction of matches equal to torch's (shared / the larger count), and the fitted
motion's error against the true one (largest displacement over the image corners and centre). Gates (exit
status 1 if any fails): strict GPU residency N/N (GPU devices); probability-matrix corr >= 0.999 and matches
equal to torch's >= 0.95 on every pair; device motion error <= 2 px on every pair. Results are merged into
results.json (here, or in --results-dir). Exit 2: unknown device or a missing / corrupt artifact; exit 3: no
usable GPU (nothing recorded).

    python verify_matcher.py                            # host GPU (fp16), N=512
    python verify_matcher.py --device host-gpu-fp32
    python verify_matcher.py --fp32-from 2              # the precision plan of export_matcher.py --fp32-from 2
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.core.metrics import compare
from litert_gpu_toolkit.recipe import (LATENCY_METRIC, finish_verify, latency_ms, load_model, load_reference,
                                       print_failure, residency, run_on_device, strict_gates, verify_main,
                                       verify_parser)
from litert_gpu_toolkit.recipe.plans import FP32_DEVICE, run_plan

HERE = Path(__file__).resolve().parent
MIN_CORR = 0.999
MIN_SAME_MATCHES = 0.95
MAX_MOTION_ERR_PX = 2.0


def feeds(samples) -> list[dict]:
    """The one-graph matcher's inputs per sample (keypoints, descriptors)."""
    return [{"args_0": k, "args_1": d} for k, d in samples]


def one_graph_latency(whole: Path, device: str, samples, plan_ms: float) -> dict:
    """The one-graph matcher timed on the plan's two devices (`device` and its fp32 form) right after the plan ran
    (the machine's load moves latencies between runs minutes apart), and the plan's ratio to each."""
    if not whole.is_file():
        print(f"{whole.name} not found: no one-graph latency next to the plan")
        return {}
    info = load_model(whole, "export_matcher.py")
    sig = info.signatures[0]
    out = {}
    for where, kind in ((device, "fp16"), (FP32_DEVICE[device], "fp32")):
        run = run_on_device(whole, {sig.key: feeds(samples)}, where)
        if run.ok:
            out[f"latency_ms_one_graph_{kind}"] = latency_ms(run.run_s[sig.key])
            out[f"plan_vs_one_graph_{kind}"] = round(plan_ms / out[f"latency_ms_one_graph_{kind}"], 2)
    return out


def main() -> int:
    p = verify_parser(__doc__, HERE)
    p.add_argument("--n", type=int, default=512, help="keypoints per image, as exported (default 512)")
    p.add_argument("--model", type=Path, default=None, metavar="TFLITE",
                   help="the .tflite to verify (default: artifacts/matcher_n<N>.tflite), or with --fp32-from the "
                        "plan's folder (default: artifacts/matcher_n<N>_plan<LAYER>)")
    p.add_argument("--ref", type=Path, default=None, metavar="NPZ",
                   help="the reference to compare with (default: artifacts/matcher_n<N>_ref.npz)")
    p.add_argument("--fp32-from", type=int, default=None, metavar="LAYER",
                   help="run the precision plan cut before this layer (export_matcher.py --fp32-from LAYER): its "
                        "first graph on --device, the second on that device's fp32 form ("
                        + ", ".join(f"{a} -> {b}" for a, b in FP32_DEVICE.items() if a != b) + ")")
    args = p.parse_args()
    if args.fp32_from is not None and args.device not in FP32_DEVICE:
        p.error(f"--fp32-from needs a GPU device that also runs fp32 ({', '.join(FP32_DEVICE)}), not {args.device}")
    name = f"matcher_n{args.n}"
    how = f"export_matcher.py --n {args.n}" + (f" --fp32-from {args.fp32_from}" if args.fp32_from else "")
    if args.fp32_from is None:
        args.model = args.model or HERE / "artifacts" / f"{name}.tflite"
        info = load_model(args.model, how)        # a missing or corrupt graph is a usage error before anything runs
        graph = args.model.stem
    else:
        plan_json = (args.model or HERE / "artifacts" / f"{name}_plan{args.fp32_from}") / "plan.json"
        if not plan_json.is_file():
            p.error(f"{plan_json}: no such file ({how} writes it)")
        graph = f"{name}_layers{args.fp32_from}-5-fp32"
    ref = load_reference(args.ref or HERE / "artifacts" / f"{name}_ref.npz", f"dump_matcher_ref.py --n {args.n}")
    import lighterglue  # the host side (imports torch)
    import xfeat

    photos = [str(n) for n in ref["photos"]]
    samples = [(ref[f"{n}/keypoints"], ref[f"{n}/descriptors"]) for n in photos]
    if args.fp32_from is None:
        key = info.signatures[0].key
        run = run_on_device(args.model, {key: feeds(samples)}, args.device)
        res = residency(info, run)
        runs, ress, lines, models = [run], [res], [res.line], {graph: args.model}
        outs = list(next(iter(run.outputs[key].values()))) if run.ok else None
        ms = [latency_ms(run.run_s[key])] if run.ok else []
    else:
        plan = run_plan(plan_json, samples, args.device, how)
        runs, ress, outs = plan.runs, plan.residencies, plan.outputs
        lines = [r.line for r in ress]
        models = {f"{graph}/{Path(path).stem}": path for path in plan.models.values()}
        ms = [latency_ms(next(iter(r.run_s.values()))) for r in runs] if plan.ok else []
    print("; ".join(lines))
    gates = strict_gates(args.device, *ress)
    gate_names = (f"probability matrix corr >= {MIN_CORR} on every pair",
                  f"matches equal to torch's >= {MIN_SAME_MATCHES} on every pair",
                  f"device motion error <= {MAX_MOTION_ERR_PX} px on every pair")
    metrics: dict = {}
    per_pair: dict = {}
    if outs is None:
        if args.fp32_from is None:       # run_plan has said which part failed and why
            print_failure(runs[-1])
        gates.update(dict.fromkeys(gate_names, False))
    else:
        height, width = (int(v) for v in ref["size"])
        for i, pname in enumerate(photos):
            got, want = outs[i][0], ref[f"{pname}/log_assignment"][0]
            corr = compare(np.exp(got[:-1, :-1]), np.exp(want[:-1, :-1])).corr
            pairs, torch_pairs = lighterglue.matches(got), ref[f"{pname}/matches"]
            shared = len({tuple(m) for m in pairs} & {tuple(m) for m in torch_pairs})
            same = shared / max(1, len(pairs), len(torch_pairs))
            motion, _ = xfeat.fit_motion(ref[f"{pname}/pixels0"][pairs[:, 0]], ref[f"{pname}/pixels1"][pairs[:, 1]])
            truth = xfeat.Motion(float(ref[f"{pname}/truth"][0]), ref[f"{pname}/truth"][1:])
            torch_motion = xfeat.Motion(float(ref[f"{pname}/motion"][0]), ref[f"{pname}/motion"][1:])
            per_pair[pname] = {
                "prob_corr": round(float(corr), 6),
                "matches_same_fraction": round(same, 4),
                "matches_torch_device": [len(torch_pairs), len(pairs)],
                "motion_err_px_torch": round(torch_motion.error_px(truth, height, width), 3),
                "motion_err_px_device": round(motion.error_px(truth, height, width), 3),
                "device_vs_torch_motion_px": round(motion.error_px(torch_motion, height, width), 3),
            }
            v = per_pair[pname]
            print(f"{pname}: prob corr {v['prob_corr']:.6f}; matches torch/device {v['matches_torch_device']}, "
                  f"equal {same:.4f}; motion error torch {v['motion_err_px_torch']:.2f} px, device "
                  f"{v['motion_err_px_device']:.2f} px (device vs torch {v['device_vs_torch_motion_px']:.2f} px)")
        pv = per_pair.values()
        # one matching step costs one call of each graph: the sum of their medians
        metrics = {"min_prob_corr": min(v["prob_corr"] for v in pv),
                   "min_matches_same": min(v["matches_same_fraction"] for v in pv),
                   "max_motion_err_px": max(v["motion_err_px_device"] for v in pv),
                   "max_device_vs_torch_motion_px": max(v["device_vs_torch_motion_px"] for v in pv),
                   "min_matches_device": min(v["matches_torch_device"][1] for v in pv),
                   "n": args.n, "pairs": len(photos), LATENCY_METRIC: round(sum(ms), 1)}
        if len(ms) > 1:
            metrics["latency_ms_graphs"] = " + ".join(f"{m:g}" for m in ms)
            metrics.update(one_graph_latency(plan_json.parent.parent / f"{name}.tflite", args.device, samples,
                                             metrics[LATENCY_METRIC]))
        gates[gate_names[0]] = metrics["min_prob_corr"] >= MIN_CORR
        gates[gate_names[1]] = metrics["min_matches_same"] >= MIN_SAME_MATCHES
        gates[gate_names[2]] = metrics["max_motion_err_px"] <= MAX_MOTION_ERR_PX
    # a plan is labelled by its fp16 graph (the residency line marks the fp32 one), as verify_oww.py does
    label_run = runs[0] if runs[-1].ok else runs[-1]
    return finish_verify(args, graph=graph, run=label_run, residency="; ".join(lines), metrics=metrics, gates=gates,
                         headline=["min_prob_corr", "min_matches_same", "max_motion_err_px"], models=models,
                         extra={"per_pair": per_pair}, startup=runs)


if __name__ == "__main__":
    sys.exit(verify_main(main))
