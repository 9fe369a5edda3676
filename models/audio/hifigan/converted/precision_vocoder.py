"""Where does fp16 precision go? GPU vs torch, stage by stage, on single-output graphs.

For each boundary -- the first upsampler's output, the output of each of the 4 upsample + multi-receptive-field
stages, and the waveform -- it exports the generator *prefix* ending there as its own graph (one output, so taps do
not change how the GPU fuses ops), runs it on the GPU accelerator (fp16, and fp32 with --fp32) on a window of the real
speech mel, and compares with torch in fp32: correlation, SNR, max |diff| relative to the tensor's range. Run it for
each transposed-conv lowering to see whether the lowering itself loses precision.

Torch-side checks come first (CPU, seconds; `--torch-only` stops there and writes precision_torch.json): the largest
values inside each stage (residual streams included), the waveform with every weight rounded to fp16 but computed in
fp32, and the whole generator in torch's own fp16 on the CPU.

    python precision_vocoder.py                                  # polyphase and native, 32 frames from frame 100
    python precision_vocoder.py --convt polyphase --fp32
    python precision_vocoder.py --torch-only
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

import numpy as np
import torch
import torch.nn.functional as F

from export_vocoder import rewrite_upsamplers
from hifigan import LRELU_SLOPE, load_generator
from litert_gpu_toolkit.core.metrics import snr_db
from litert_gpu_toolkit.lowering.export import gpu_vs_torch
from litert_gpu_toolkit.recipe import device_label

BOUNDARIES = ("ups.0", "stage 0", "stage 1", "stage 2", "stage 3", "waveform")


class Prefix(torch.nn.Module):
    """The generator up to `boundary`, returning only that tensor."""

    def __init__(self, generator, boundary: str):
        super().__init__()
        self.g, self.boundary = generator, boundary

    def forward(self, mel):
        g = self.g
        x = g.conv_pre(mel)
        if self.boundary == "ups.0":
            return g.ups[0](F.leaky_relu(x, LRELU_SLOPE))
        for i in range(len(g.ups)):
            x = g.stage(x, i)
            if self.boundary == f"stage {i}":
                return x
        return g.head(x)


def torch_side(x) -> dict:
    """Where fp16 could hurt, seen from torch: value ranges per stage, fp16 weights, torch's fp16 compute."""
    g = load_generator()
    stages = []
    with torch.no_grad():
        h = g.conv_pre(x)
        for i in range(len(g.ups)):
            u = g.ups[i](F.leaky_relu(h, LRELU_SLOPE))
            inner = 0.0
            for block in g.resblocks[i * g.num_kernels:(i + 1) * g.num_kernels]:
                z = u
                for dilated, plain in zip(block.convs1, block.convs2):
                    a = dilated(F.leaky_relu(z, LRELU_SLOPE))
                    b = plain(F.leaky_relu(a, LRELU_SLOPE))
                    z = z + b
                    inner = max(inner, a.abs().max().item(), b.abs().max().item(), z.abs().max().item())
            h = g.stage(h, i)
            stages.append({"stage": i, "channels": h.shape[1], "output_absmax": h.abs().max().item(),
                           "output_rms": h.std().item(), "max_abs_inside_residual_blocks": inner})
        pre_tanh = g.conv_post(F.leaky_relu(h))
        ref = g(x).numpy()
        for p in g.parameters():
            p.copy_(p.half().float())
        fp16_weights = g(x).numpy()
        fp16_compute = g.half()(x.half()).float().numpy()
    return {"stages": stages, "pre_tanh_rms": pre_tanh.std().item(),
            "fp16_weights_fp32_compute": {"corr": float(np.corrcoef(fp16_weights.ravel(), ref.ravel())[0, 1]),
                                          "snr_db": snr_db(fp16_weights, ref)},
            "torch_fp16_on_cpu": {"corr": float(np.corrcoef(fp16_compute.ravel(), ref.ravel())[0, 1]),
                                  "snr_db": snr_db(fp16_compute, ref)}}



def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--convt", nargs="+", default=["polyphase", "native"],
                        choices=("polyphase", "zerostuff", "native"), help="transposed-conv forms to study")
    parser.add_argument("--frames", type=int, default=32, help="mel frames per graph (small: one graph per boundary)")
    parser.add_argument("--start", type=int, default=100, help="first mel frame of the window (speech, not silence)")
    parser.add_argument("--fp32", action="store_true", help="also run each graph with enforce_f32")
    parser.add_argument("--ref", type=Path, default=HERE / "artifacts" / "reference.npz",
                        help="the reference from dump_vocoder_ref.py (default: artifacts/reference.npz)")
    parser.add_argument("--torch-only", action="store_true", help="only the torch-side checks (no GPU)")
    parser.add_argument("--out", type=Path, help="default: precision.json (precision_torch.json with --torch-only)")
    args = parser.parse_args(argv)
    out_path = args.out or HERE / ("precision_torch.json" if args.torch_only else "precision.json")

    mel = np.load(args.ref)["mel"][:, args.start:args.start + args.frames]
    if mel.shape[1] != args.frames:
        sys.exit(f"the reference mel has no {args.frames} frames from frame {args.start}")
    x = torch.from_numpy(np.ascontiguousarray(mel))[None]
    torch_checks = torch_side(x)
    print(json.dumps(torch_checks, indent=1))
    header = {"frames": args.frames, "start_frame": args.start,
              "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "torch": torch_checks}
    if args.torch_only:
        out_path.write_text(json.dumps(header, indent=1) + "\n")
        print(f"wrote {out_path}")
        return 0
    rows, label = [], None
    with tempfile.TemporaryDirectory(prefix="hifigan-precision-") as tmp:
        for mode in args.convt:
            generator = load_generator()
            rewrite_upsamplers(generator, mode)
            for boundary in BOUNDARIES:
                prefix = Prefix(generator, boundary).eval()
                with torch.no_grad():
                    ref = prefix(x).numpy()
                path = Path(tmp) / f"{mode}_{boundary.replace(' ', '').replace('.', '')}.tflite"
                row = {"convt": mode, "boundary": boundary, "shape": list(ref.shape),
                       "ref_rms": float(ref.std()), "ref_absmax": float(np.abs(ref).max())}
                for precision in ("fp16", "fp32") if args.fp32 else ("fp16",):
                    start = time.perf_counter()
                    result = gpu_vs_torch(prefix, (x,), path, enforce_f32=precision == "fp32",
                                          convert=not path.exists())
                    if not result.ok:
                        row[precision] = {"status": result.run.status, "error": result.summary()}
                        continue
                    label = label or device_label("host-gpu", result.run)
                    out = next(iter(result.run.outputs.values()))
                    out = next(iter(out.values())).reshape(ref.shape)
                    c = result.comparisons[0]
                    row[precision] = {"corr": c.corr, "snr_db": snr_db(out, ref),
                                      "max_abs_over_absmax": c.max_abs / row["ref_absmax"], "nonfinite": c.nonfinite,
                                      "seconds": round(time.perf_counter() - start, 1)}
                print(json.dumps(row), flush=True)
                rows.append(row)

    out_path.write_text(json.dumps({"device": label, **header, "rows": rows}, indent=1) + "\n")
    print(f"\nGPU: {label}; {args.frames} mel frames of real speech from frame {args.start}\n")
    print("| transposed conv | boundary | tensor rms | " + " | ".join(
        f"{p} corr | {p} SNR dB" for p in (("fp16", "fp32") if args.fp32 else ("fp16",))) + " |")
    print("|---|---|---|" + "---|---|" * (2 if args.fp32 else 1))
    for r in rows:
        cells = []
        for p in ("fp16", "fp32") if args.fp32 else ("fp16",):
            m = r.get(p, {})
            cells += [f"{m['corr']:.6f}", f"{m['snr_db']:.1f}"] if "corr" in m else [m.get("status", "-"), ""]
        print(f"| {r['convt']} | {r['boundary']} | {r['ref_rms']:.3g} | " + " | ".join(cells) + " |")
    print(f"\nwrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
