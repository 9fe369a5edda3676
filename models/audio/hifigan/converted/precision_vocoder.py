"""Where does fp16 precision go? GPU vs torch, stage by stage, on single-output graphs.

For each boundary -- the first upsampler's output, the output of each of the 4 upsample + multi-receptive-field
stages, and the waveform -- it exports the generator *prefix* ending there as its own graph (one output, so taps do
not change how the GPU fuses ops), runs it on the GPU accelerator (fp16, and fp32 with --fp32) on a window of the real
speech mel, and compares with torch in fp32: correlation, SNR, max |diff| relative to the tensor's range. Run it for
each transposed-conv lowering to see whether the lowering itself loses precision.

    python precision_vocoder.py                                  # polyphase and native, 32 frames from frame 100
    python precision_vocoder.py --convt polyphase --fp32
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3] / "utilities"))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from export_vocoder import rewrite_upsamplers  # noqa: E402
from hifigan import LRELU_SLOPE, load_generator  # noqa: E402
from litert_gpu_toolkit.export import gpu_vs_torch  # noqa: E402
from litert_gpu_toolkit.recipe import device_label  # noqa: E402

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


def snr_db(out, ref) -> float:
    return float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / max(np.sum((out - ref) ** 2.0), 1e-30)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--convt", nargs="+", default=["polyphase", "native"],
                        choices=("polyphase", "zerostuff", "native"))
    parser.add_argument("--frames", type=int, default=32, help="mel frames per graph (small: one graph per boundary)")
    parser.add_argument("--start", type=int, default=100, help="first mel frame of the window (speech, not silence)")
    parser.add_argument("--fp32", action="store_true", help="also run each graph with enforce_f32")
    parser.add_argument("--reference", type=Path, default=HERE / "artifacts" / "reference.npz")
    parser.add_argument("--out", type=Path, default=HERE / "precision.json")
    args = parser.parse_args(argv)

    mel = np.load(args.reference)["mel"][:, args.start:args.start + args.frames]
    if mel.shape[1] != args.frames:
        sys.exit(f"the reference mel has no {args.frames} frames from frame {args.start}")
    x = torch.from_numpy(np.ascontiguousarray(mel))[None]
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

    args.out.write_text(json.dumps({"device": label, "frames": args.frames, "start_frame": args.start,
                                    "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
                                    "rows": rows}, indent=1) + "\n")
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
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
