#!/usr/bin/env python3
"""Run the exported XFeat network on a device and compare with torch: dense maps, keypoints, matches, motion.

Both images of every photo pair in the reference (dump_extractor_ref.py) run through the .tflite on one
compile. The same host code (xfeat.py) turns the device's maps into keypoints, descriptors and mutual
nearest-neighbour matches, and fits a rotation + shift to them. Reported per pair: each map's correlation with
torch, the keypoints torch and the device agree on (same pixel), the match counts, and the fitted motion's
error against the true one (largest displacement error over the image corners and centre) for torch and for
the device. Gates (exit status 1 if any fails): strict GPU residency N/N (GPU devices); descriptor-map
correlation >= 0.999 on every image; device motion error <= 2 px on every pair. Results are merged into
results.json (here, or in --results-dir). Exit 2: unknown device or a missing / corrupt artifact; exit 3: no
usable GPU (nothing recorded).

    python verify_extractor.py                          # host GPU (fp16), 480x640
    python verify_extractor.py --device host-gpu-fp32
"""
from __future__ import annotations

import sys
from pathlib import Path


from litert_gpu_toolkit.core.metrics import compare
from litert_gpu_toolkit.recipe import (LATENCY_METRIC, add_image_size_arguments, finish_verify, latency_ms,
                                       load_model, load_reference, print_failure, residency, run_on_device,
                                       strict_gates, verify_main, verify_parser)

HERE = Path(__file__).resolve().parent
MIN_CORR = 0.999
MAX_MOTION_ERR_PX = 2.0


def main() -> int:
    p = verify_parser(__doc__, HERE)
    add_image_size_arguments(p)
    p.add_argument("--model", type=Path, default=None, metavar="TFLITE",
                   help="the .tflite to verify (default: artifacts/extractor_<height>x<width>.tflite)")
    p.add_argument("--ref", type=Path, default=None, metavar="NPZ",
                   help="the reference to compare with (default: artifacts/extractor_<height>x<width>_ref.npz)")
    args = p.parse_args()
    size = f"{args.height}x{args.width}"
    args.model = args.model or HERE / "artifacts" / f"extractor_{size}.tflite"
    info = load_model(args.model, f"export_extractor.py --height {args.height} --width {args.width}")
    ref = load_reference(args.ref or HERE / "artifacts" / f"extractor_{size}_ref.npz",
                         f"dump_extractor_ref.py --height {args.height} --width {args.width}")
    import xfeat  # the host side (imports torch)

    sig = info.signatures[0]
    (in_name,) = sig.inputs
    photos = [str(n) for n in ref["photos"]]
    samples = [{in_name: ref[f"{n}/input{side}"]} for n in photos for side in "01"]
    run = run_on_device(args.model, {sig.key: samples}, args.device)
    res = residency(info, run)
    print(res.line)
    gates = strict_gates(args.device, res)
    corr_gate = f"descriptor map corr >= {MIN_CORR} on every image"
    motion_gate = f"device motion error <= {MAX_MOTION_ERR_PX} px on every pair"
    metrics: dict = {}
    per_pair: dict = {}
    if not run.ok:
        print_failure(run)
        gates[corr_gate] = gates[motion_gate] = False
    else:
        out = run.outputs[sig.key]
        names = sorted(out, key=lambda n: int(n.split("_")[-1]) if n.split("_")[-1].isdigit() else n)
        top_k, (height, width) = int(ref["top_k"]), (int(v) for v in ref["size"])
        for i, name in enumerate(photos):
            feats, corr = [], {}
            for s, side in enumerate("01"):
                maps = [out[n][2 * i + s] for n in names]
                for key, got in zip(xfeat.MAP_NAMES, maps):
                    c = compare(got, ref[f"{name}/{key}{side}"]).corr
                    corr[key] = min(corr.get(key, 1.0), float(c))
                feats.append(xfeat.sparse(*maps, top_k=top_k))
            pairs = xfeat.mutual_matches(feats[0].descriptors, feats[1].descriptors)
            motion, _ = xfeat.fit_motion(feats[0].keypoints[pairs[:, 0]], feats[1].keypoints[pairs[:, 1]])
            truth = xfeat.Motion(float(ref[f"{name}/truth"][0]), ref[f"{name}/truth"][1:])
            torch_motion = xfeat.Motion(float(ref[f"{name}/motion"][0]), ref[f"{name}/motion"][1:])
            torch_kp = {tuple(k) for k in ref[f"{name}/keypoints0"].astype(int)}
            same_kp = len(torch_kp & {tuple(k) for k in feats[0].keypoints.astype(int)}) / max(1, len(torch_kp))
            per_pair[name] = {
                "map_corr": {k: round(v, 6) for k, v in corr.items()},
                "keypoints_same_fraction": round(same_kp, 4),
                "matches_torch_device": [len(ref[f"{name}/matches"]), len(pairs)],
                "motion_err_px_torch": round(torch_motion.error_px(truth, height, width), 3),
                "motion_err_px_device": round(motion.error_px(truth, height, width), 3),
                "device_vs_torch_motion_px": round(motion.error_px(torch_motion, height, width), 3),
                "rotation_deg_device_true": [round(motion.angle, 3), round(truth.angle, 3)],
            }
            v = per_pair[name]
            print(f"{name}: map corr {v['map_corr']}; keypoints as torch {same_kp:.3f}; matches torch/device "
                  f"{v['matches_torch_device']}; motion error torch {v['motion_err_px_torch']:.2f} px, device "
                  f"{v['motion_err_px_device']:.2f} px (device vs torch {v['device_vs_torch_motion_px']:.2f} px)")
        pv = per_pair.values()
        metrics = {"max_motion_err_px": max(v["motion_err_px_device"] for v in pv),
                   "min_feats_corr": min(v["map_corr"]["feats"] for v in pv),
                   "min_keypoints_same": min(v["keypoints_same_fraction"] for v in pv),
                   "max_device_vs_torch_motion_px": max(v["device_vs_torch_motion_px"] for v in pv),
                   "min_matches_device": min(v["matches_torch_device"][1] for v in pv),
                   "pairs": len(photos), LATENCY_METRIC: latency_ms(run.run_s[sig.key])}
        gates[corr_gate] = metrics["min_feats_corr"] >= MIN_CORR
        gates[motion_gate] = metrics["max_motion_err_px"] <= MAX_MOTION_ERR_PX
    return finish_verify(args, graph=args.model.stem, run=run, residency=res.line, metrics=metrics, gates=gates,
                         headline=["max_motion_err_px", "min_feats_corr", "min_keypoints_same"],
                         extra={"per_pair": per_pair})


if __name__ == "__main__":
    sys.exit(verify_main(main))
