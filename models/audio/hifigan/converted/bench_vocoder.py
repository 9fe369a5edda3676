"""Side-by-side latency of the three transposed-conv lowerings, on the GPU accelerator and on the CPU, in one run.

For each of polyphase / zerostuff / native it exports the graph if artifacts/ lacks it (export_vocoder.py), runs one
`--frames` chunk of real speech (the first chunk of artifacts/reference.npz) `--repeats` times per device, and reports
the median run time, the real-time factor (run time / audio duration of the chunk; < 1 is faster than real time), the
compile time, and the correlation with the torch chunk. Writes converted/bench.json and prints a Markdown table.

    python bench_vocoder.py                                  # 128 frames, host-gpu and cpu, 2 repeats
    python bench_vocoder.py --frames 32 --devices cpu --repeats 5
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3] / "utilities"))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

from litert_gpu_toolkit.metrics import compare  # noqa: E402
from litert_gpu_toolkit.model_info import read_model_info  # noqa: E402
from litert_gpu_toolkit.recipe import device_label, run_on_device  # noqa: E402

MODES = ("polyphase", "zerostuff", "native")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per (graph, device); the median is kept")
    parser.add_argument("--devices", nargs="+", default=["host-gpu", "cpu"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--reference", type=Path, default=HERE / "artifacts" / "reference.npz")
    parser.add_argument("--out", type=Path, default=HERE / "bench.json")
    args = parser.parse_args(argv)

    ref = np.load(args.reference)
    if int(ref["frames"]) != args.frames:
        sys.exit(f"{args.reference} has {int(ref['frames'])}-frame chunks; re-run dump_vocoder_ref.py --frames "
                 f"{args.frames} or pass --frames {int(ref['frames'])}")
    chunk, expected = ref["chunks"][0][None], ref["torch_chunks"][0]
    audio_s = args.frames * int(ref["hop"]) / int(ref["sample_rate"])

    rows = []
    for mode in args.modes:
        model = HERE / "artifacts" / f"vocoder_{mode}_{args.frames}f.tflite"
        if not model.exists():
            subprocess.run([sys.executable, str(HERE / "export_vocoder.py"), "--convt", mode,
                            "--frames", str(args.frames)], check=True)
        info = read_model_info(model)
        sig = info.signatures[0]
        for device in args.devices:
            run = run_on_device(model, {sig.key: {next(iter(sig.inputs)): chunk}}, device, repeats=args.repeats)
            row = {"convt": mode, "device": device, "status": run.status, "ops": info.num_ops,
                   "transpose_conv_ops": info.op_histogram().get("TRANSPOSE_CONV", 0),
                   "size_mb": round(model.stat().st_size / 1e6, 1)}
            if run.ok:
                out = next(iter(run.outputs[sig.key].values())).reshape(-1)
                row.update(device_label=device_label(device, run), compile_s=run.compile_s,
                           run_s=run.run_s[sig.key], rtf=run.run_s[sig.key] / audio_s,
                           corr_vs_torch=compare(out, expected).corr)
            else:
                row["error"] = (run.error or "").splitlines()[0] if run.error else run.status
            print(json.dumps(row))
            rows.append(row)

    record = {"frames": args.frames, "audio_s_per_chunk": audio_s, "repeats": args.repeats,
              "date": dt.date.today().isoformat(), "host": f"{platform.machine()}, {platform.python_version()}",
              "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "rows": rows}
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\n{args.frames} frames = {audio_s:.3f} s of audio per run; median of {args.repeats}\n")
    print("| transposed conv | device | ops (TRANSPOSE_CONV) | compile s | run s | real-time factor | corr vs torch |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["status"] == "ok":
            print(f"| {r['convt']} | {r['device_label']} | {r['ops']} ({r['transpose_conv_ops']}) "
                  f"| {r['compile_s']:.2f} | {r['run_s']:.3f} | {r['rtf']:.3f} | {r['corr_vs_torch']:.6f} |")
        else:
            print(f"| {r['convt']} | {r['device']} | {r['ops']} ({r['transpose_conv_ops']}) | {r['status']}: "
                  f"{r['error']} | | | |")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
