#!/usr/bin/env python3
"""Run the exported PP-OCRv4 text detector on a device and compare with the torch network.

Every image of the reference (dump_det_ref.py) runs through the .tflite on one compile. Reported per image:
the probability map's correlation and max abs error against torch, the text boxes the same host
post-processing finds in the device's map and in torch's, and the IoU of each box with its best match.
Gates (exit status 1 if any fails): strict GPU residency N/N (GPU devices); map correlation >= 0.999 on every
image; the same number of boxes as torch and IoU >= 0.9 for every box, both ways. Results are merged into
results.json (here, or in --results-dir). Exit 2: unknown device or a missing / corrupt artifact; exit 3: no
usable GPU (nothing recorded).

    python verify_det.py                          # host GPU (fp16), 480x640
    python verify_det.py --device host-gpu-fp32
    python verify_det.py --device cpu
"""
from __future__ import annotations

import sys
from pathlib import Path


from litert_gpu_toolkit.metrics import compare
from litert_gpu_toolkit.recipe import (LATENCY_METRIC, add_image_size_arguments, finish_verify, latency_ms,
                                       load_model, load_reference, print_failure, residency, run_on_device,
                                       strict_gates, verify_main, verify_parser)

HERE = Path(__file__).resolve().parent
MIN_CORR = 0.999
MIN_IOU = 0.9


def main() -> int:
    p = verify_parser(__doc__, HERE)
    add_image_size_arguments(p)
    p.add_argument("--model", type=Path, default=None, metavar="TFLITE",
                   help="the .tflite to verify (default: artifacts/det_<height>x<width>.tflite)")
    p.add_argument("--ref", type=Path, default=None, metavar="NPZ",
                   help="the reference outputs to compare with (default: artifacts/det_<height>x<width>_ref.npz)")
    args = p.parse_args()
    size = f"{args.height}x{args.width}"
    args.model = args.model or HERE / "artifacts" / f"det_{size}.tflite"
    info = load_model(args.model, f"export_det.py --height {args.height} --width {args.width}")
    ref = load_reference(args.ref or HERE / "artifacts" / f"det_{size}_ref.npz",
                         f"dump_det_ref.py --height {args.height} --width {args.width}")
    import ppocr_det  # the host post-processing (imports torch)

    sig = info.signatures[0]
    (in_name,) = sig.inputs
    images = [str(n) for n in ref["images"]]
    run = run_on_device(args.model, {sig.key: [{in_name: ref[f"{n}/input"]} for n in images]}, args.device)
    res = residency(info, run)
    print(res.line)
    gates = strict_gates(args.device, res)
    corr_gate, box_gate = f"map corr >= {MIN_CORR} on every image", f"same boxes as torch, IoU >= {MIN_IOU}"
    metrics: dict = {}
    per_image: dict = {}
    if not run.ok:
        print_failure(run)
        gates[corr_gate] = gates[box_gate] = False
    else:
        maps = next(iter(run.outputs[sig.key].values()))
        ious, corrs, counts = [], [], []
        for name, prob in zip(images, maps):
            c = compare(prob, ref[f"{name}/prob"])
            found = ppocr_det.boxes_from_map(prob)
            expected = ref[f"{name}/boxes"]
            both = ppocr_det.match(expected, found.boxes) + ppocr_det.match(found.boxes, expected)
            per_image[name] = {"map_corr": round(float(c.corr), 6), "map_max_abs": float(c.max_abs),
                               "boxes_torch": len(expected), "boxes_device": len(found.boxes),
                               "min_iou": round(min(both, default=1.0), 4)}
            print(f"{name}: map corr {c.corr:.6f}, max abs {c.max_abs:.4f}; boxes torch {len(expected)}, "
                  f"device {len(found.boxes)}, min IoU {per_image[name]['min_iou']:.4f}")
            ious.append(per_image[name]["min_iou"])
            corrs.append(float(c.corr))
            counts.append(len(expected) == len(found.boxes))
        metrics = {"min_map_corr": round(min(corrs), 6), "min_box_iou": min(ious),
                   "boxes_torch": sum(v["boxes_torch"] for v in per_image.values()),
                   "boxes_device": sum(v["boxes_device"] for v in per_image.values()),
                   "images": len(images), LATENCY_METRIC: latency_ms(run.run_s[sig.key])}
        gates[corr_gate] = metrics["min_map_corr"] >= MIN_CORR
        gates[box_gate] = all(counts) and metrics["min_box_iou"] >= MIN_IOU and metrics["boxes_torch"] > 0
    return finish_verify(args, graph=args.model.stem, run=run, residency=res.line, metrics=metrics, gates=gates,
                         headline=["min_box_iou", "min_map_corr", LATENCY_METRIC], extra={"per_image": per_image})


if __name__ == "__main__":
    sys.exit(verify_main(main))
