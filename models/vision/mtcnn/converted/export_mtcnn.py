"""Export MTCNN's three networks (facenet-pytorch weights, offline) to artifacts/{pnet,rnet,onet}.tflite.

  pnet.tflite  one signature per pyramid level of a fixed image size (default 512x512, smallest face 20 px),
               named pnet_<h>x<w>; input args_0 1x3xhxw, outputs (regression 1x4xh'xw', probability 1x2xh'xw')
  rnet.tflite  input Bx3x24x24 (fixed batch, default 128) -> (regression Bx4, probability Bx2)
  onet.tflite  input Bx3x48x48 (fixed batch, default 16)  -> (regression Bx4, landmarks Bx10, probability Bx2)

Inputs are NCHW float32 pixels scaled to [-1, 1]. Each network goes through the toolkit's front door,
`convert_for_gpu`, which finds no rewrite to apply here (README.md lists what was checked: PReLU, ceil-mode
max-pool, channel softmax) and checks each file strictly GPU-only against torch.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from litert_gpu_toolkit.recipe import (add_quantize_argument, add_weights_argument, script_main, script_parser,
                                       WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent
WEIGHTS = "facenet-pytorch's pnet.pt, rnet.pt, onet.pt (the wheel's data/ folder); or a folder holding those"


def main() -> int:
    parser = script_parser(__doc__)
    add_quantize_argument(parser)
    add_weights_argument(parser, WEIGHTS)
    parser.add_argument("--model", type=Path, default=HERE / "artifacts", metavar="DIR",
                        help="the folder the three .tflite (pnet, rnet, onet) are written to (default: artifacts)")
    parser.add_argument("--net", choices=["pnet", "rnet", "onet", "all"], default="all",
                        help="which network to export (default: all three)")
    parser.add_argument("--image-size", type=int, nargs=2, default=[512, 512], metavar=("H", "W"),
                        help="image size the P-Net pyramid is exported for (photos are used at this size)")
    parser.add_argument("--rnet-batch", type=int, default=128, help="R-Net's fixed batch of candidates (default 128)")
    parser.add_argument("--onet-batch", type=int, default=16, help="O-Net's fixed batch of candidates (default 16)")
    args = parser.parse_args()

    import torch
    from mtcnn import load_net, pnet_signature, pyramid_sizes

    from litert_gpu_toolkit import ConvertOptions
    from litert_gpu_toolkit.recipe import export_graph

    def pixels(*shape):  # a fixed-seed image in [-1, 1]: the check's input (zeros make every activation constant)
        return (torch.rand(*shape, generator=torch.Generator().manual_seed(0)) * 2 - 1,)

    # numerics are judged by verify on real photos; the check's bisect budget is not spent here
    options = ConvertOptions(diagnose_budget_s=0)
    args.model.mkdir(parents=True, exist_ok=True)
    manifest_path = args.model / "mtcnn_graphs.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for name in ["pnet", "rnet", "onet"] if args.net == "all" else [args.net]:
        net, path, start = load_net(name, args.weights), args.model / f"{name}.tflite", time.perf_counter()
        if name == "pnet":  # one signature per pyramid level, all in one file
            sizes = pyramid_sizes(*args.image_size)
            signatures = {pnet_signature(size): pixels(1, 3, *size) for size in sizes}
            status = export_graph(net, None, path, args, graph=name, options=options, signatures=signatures)
            manifest[name] = {"image_size": args.image_size, "levels": [list(s) for s in sizes]}
        else:
            batch, side = (args.rnet_batch, 24) if name == "rnet" else (args.onet_batch, 48)
            status = export_graph(net, pixels(batch, 3, side, side), path, args, graph=name, options=options)
            manifest[name] = {"batch": batch, "size": side}
        print(f"{path.name}: exported in {time.perf_counter() - start:.1f} s")
        if status:
            return status
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
