#!/usr/bin/env python
"""Run the MTCNN pipeline with the three exported graphs on a device and compare with the torch pipeline.

The host code (pyramid, NMS, box regression, crops, landmarks; mtcnn.py) is the same for both pipelines;
only the networks differ. One stage runs for every photo at once, so each network is compiled once:
P-Net (all pyramid levels of all photos), R-Net (all crops, in chunks of its fixed batch), O-Net (same).

Reported: the residency line of each network, per photo the faces found by torch and by the device, the IoU
of each face's box, the landmark error in pixels, and the P-Net probability maps' error on identical inputs.
Gates (exit status 1 if any fails): strict GPU residency for all three networks (GPU devices), the same
number of faces in every photo, IoU >= 0.95 for every face. Results are merged into results.json (here, or
in --results-dir). Exit 2: unknown device or a missing / corrupt artifact; exit 3: no usable GPU.

    python verify_mtcnn.py                 # software/host GPU, fp16
    python verify_mtcnn.py --device cpu
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.recipe import (LATENCY_METRIC, ArtifactError, add_quantize_argument, add_ref_argument,
                                       finish_verify, latency_ms, load_model, load_reference, print_failure,
                                       quantized_path, residency, run_on_device, strict_gates, verify_main,
                                       verify_parser)

HERE = Path(__file__).resolve().parent
NETS = ("pnet", "rnet", "onet")

MIN_IOU = 0.95


class StageFailed(RuntimeError):
    def __init__(self, name: str, run):
        super().__init__(f"{name}: {run.status}: {run.error}")
        self.name, self.run = name, run


def device_runners(paths: dict, device: str, runs: dict):
    """Runners (see mtcnn.detect) that send one stage of all photos to `device` in one compile each
    (`paths`: net name -> its .tflite)."""
    def call(name, inputs):
        start = time.perf_counter()
        run = run_on_device(paths[name], inputs, device)
        runs[name] = (run, time.perf_counter() - start)
        if not run.ok:
            raise StageFailed(name, run)
        return run.outputs

    def run_pnet(per_photo):
        out = call("pnet", {sig: [{"args_0": d[sig]} for d in per_photo] for sig in per_photo[0]})
        return [{sig: (o["output_0"][i], o["output_1"][i]) for sig, o in out.items()} for i in range(len(per_photo))]

    def batched(name):  # fixed-batch graph: concatenate all photos' crops, pad to whole batches, split back
        batch = read_model_info(paths[name]).signatures[0].inputs["args_0"].shape[0]

        def run(per_photo):
            counts = [len(x) for x in per_photo]
            x = np.concatenate(per_photo)
            pad = batch if len(x) == 0 else -len(x) % batch  # always one run, so residency is measured
            x = np.concatenate([x, np.zeros((pad,) + x.shape[1:], np.float32)])
            out = call(name, {"serving_default": [{"args_0": c} for c in np.split(x, len(x) // batch)]})
            names = sorted(out["serving_default"], key=lambda n: int(n.split("_")[1]))
            flat = [out["serving_default"][n].reshape(len(x), -1) for n in names]
            ends = np.cumsum(counts)
            return [tuple(f[e - c:e] for f in flat) for c, e in zip(counts, ends)]
        return run

    return run_pnet, batched("rnet"), batched("onet")


def main() -> int:
    p = verify_parser(__doc__, HERE)
    p.add_argument("--model", type=Path, default=HERE / "artifacts", metavar="DIR",
                   help="the folder holding pnet.tflite, rnet.tflite and onet.tflite (default: artifacts)")
    add_quantize_argument(p, verify=True)
    add_ref_argument(p, HERE / "artifacts" / "mtcnn_ref.npz", writes=False)
    args = p.parse_args()
    paths = {n: quantized_path(args.model / f"{n}.tflite", args) for n in NETS}
    from mtcnn import detect, load_photo, match_faces, pnet_signature, pyramid_sizes   # imports torch

    infos = {n: load_model(paths[n], "export_mtcnn.py") for n in NETS}
    ref = load_reference(args.ref, "dump_mtcnn_ref.py")
    photos = [str(s) for s in ref["photos"]]
    images = [load_photo(ph) for ph in photos]
    have = {s.key for s in infos["pnet"].signatures}
    need = {pnet_signature(size) for img in images for size in pyramid_sizes(*img.shape[:2])}
    if need - have:
        raise ArtifactError(f"pnet.tflite lacks pyramid levels {sorted(need - have)}: export with the photos' "
                            "--image-size")

    runs: dict = {}
    start = time.perf_counter()
    print(f"running {len(photos)} photos through P-Net, R-Net and O-Net on {args.device} ...")
    try:
        found = detect(images, *device_runners(paths, args.device, runs))
    except StageFailed as exc:
        print_failure(exc.run, exc.name)
        found = None
    wall = time.perf_counter() - start

    res = {name: residency(infos[name], runs[name][0]) for name in NETS if name in runs}
    lines = {name: res[name].line if name in res else "not run (an earlier stage failed)" for name in NETS}
    for name in NETS:
        print(f"{name}: {lines[name]}")
    # every network must have run and be strict: a stage that never ran fails the gate
    gates = strict_gates(args.device, *res.values())
    if gates and len(res) < len(NETS):
        gates = {k: False for k in gates}

    metrics: dict = {}
    per_photo: dict = {}
    if found is None:
        gates.update({"same number of faces in every photo": False, f"IoU >= {MIN_IOU} for every face": False})
    else:
        ious, marks_err, prob_err, same_count = [], [], [], True
        print(f"{'photo':<18} {'torch':>5} {'dev':>4}  IoU per face     landmark error px (max)   boxes per stage")
        for ph, faces in zip(photos, found):
            want = ref[f"{ph}/boxes"]
            pairs = match_faces(faces.boxes, want)
            iou = [round(v, 4) for _, _, v in pairs]
            err = [float(np.abs(faces.landmarks[j] - ref[f"{ph}/landmarks"][i]).max()) for i, j, _ in pairs if j >= 0]
            prob_err += [float(np.abs(prob[0, 1] - ref[f"{ph}/{sig}/prob"][0, 1]).max())
                         for sig, (_, prob) in faces.pnet_maps.items()]
            same_count &= len(faces.boxes) == len(want)
            ious += iou
            marks_err += err
            per_photo[ph] = {"faces_torch": len(want), "faces_device": len(faces.boxes), "iou": iou,
                             "landmark_max_err_px": [round(e, 2) for e in err],
                             "boxes_device": np.round(faces.boxes, 1).tolist(),
                             "stage_counts_torch": ref[f"{ph}/stage_counts"].tolist(),
                             "stage_counts_device": list(faces.stage_counts)}
            print(f"{ph:<18} {len(want):>5} {len(faces.boxes):>4}  {str(iou):<16} "
                  f"{str([round(e, 2) for e in err]):<25} torch {tuple(ref[f'{ph}/stage_counts'].tolist())} "
                  f"device {faces.stage_counts}")
        metrics = {"min_iou": min(ious) if ious else None,
                   "faces_torch_device": [sum(v["faces_torch"] for v in per_photo.values()),
                                          sum(v["faces_device"] for v in per_photo.values())],
                   "max_landmark_err_px": round(max(marks_err), 3) if marks_err else None,
                   "pnet_prob_max_abs_err": float(f"{max(prob_err):.3g}"), "photos": len(photos)}
        for n, (r, w) in runs.items():  # timings: compile, median run of the slowest signature, whole call
            metrics.update({f"{n}_compile_s": round(r.compile_s or 0.0, 3),
                            f"{n}_{LATENCY_METRIC}": latency_ms(max(r.run_s.values(), default=0.0)),
                            f"{n}_call_s": round(w, 1)})
        metrics["verify_wall_s"] = round(wall, 1)
        print(f"min IoU {metrics['min_iou']}, max landmark error {metrics['max_landmark_err_px']:.2f} px, "
              f"P-Net face-probability max abs error {metrics['pnet_prob_max_abs_err']:.3g} (same inputs)")
        for n in runs:
            print(f"  {n}: compile {metrics[n + '_compile_s']:.2f} s, run {metrics[f'{n}_{LATENCY_METRIC}']:.0f} ms "
                  f"(median, slowest signature), whole call {metrics[n + '_call_s']:.1f} s")
        gates["same number of faces in every photo"] = bool(same_count)
        gates[f"IoU >= {MIN_IOU} for every face"] = bool(ious) and min(ious) >= MIN_IOU

    return finish_verify(args, graph="mtcnn", run=runs.get("pnet", (None,))[0],
                         residency="; ".join(f"{n}: {line}" for n, line in lines.items()), metrics=metrics,
                         gates=gates, headline=["min_iou", "faces_torch_device", "max_landmark_err_px"],
                         models=paths, extra={"per_photo": per_photo}, startup=[r for r, _ in runs.values()])


if __name__ == "__main__":
    sys.exit(verify_main(main))
