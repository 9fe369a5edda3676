"""Side-by-side latency of the three transposed-conv lowerings, on the GPU accelerator and on the CPU, in one run.

For each of polyphase / zerostuff / native it exports the graph if artifacts/ lacks it (export_vocoder.py), runs one
`--frames` window of real speech (from the mel in artifacts/reference.npz) `--gpu-repeats` / `--cpu-repeats` times
per device on one compile, in `--rounds` passes that visit the graphs in rotated order, and reports the median run
time, the real-time factor (run time / audio duration of the window; < 1 is faster than real time), the compile time,
and the correlation with the torch generator on the same window. Writes converted/bench_<frames>f.json and prints
a Markdown table.

    python bench_vocoder.py                                  # 64 frames, host-gpu and cpu
    python bench_vocoder.py --frames 128 --devices cpu
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

import numpy as np
import torch

from hifigan import load_generator
from litert_gpu_toolkit.core.metrics import compare
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.recipe import device_label, run_on_device, verify_main

MODES = ("polyphase", "zerostuff", "native")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=64,
                        help="mel frames per graph (default 64: a 128-frame zero-stuff run outlasts the software "
                             "GPU's completion wait on a loaded 2-core machine)")
    parser.add_argument("--start", type=int, default=100, help="first mel frame of the speech window")
    parser.add_argument("--gpu-repeats", type=int, default=2, help="timed GPU runs per graph (median kept)")
    parser.add_argument("--cpu-repeats", type=int, default=10, help="timed CPU runs per graph (median kept)")
    parser.add_argument("--rounds", type=int, default=3, help="passes over all graphs, in rotated order")
    parser.add_argument("--devices", nargs="+", default=["host-gpu", "cpu"], metavar="DEVICE",
                        help="devices to time (default: host-gpu cpu)")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES,
                        help="transposed-conv forms to time (default: all)")
    parser.add_argument("--ref", type=Path, default=HERE / "artifacts" / "reference.npz",
                        help="the reference from dump_vocoder_ref.py (default: artifacts/reference.npz)")
    parser.add_argument("--out", type=Path, help="default: converted/bench_<frames>f.json")
    args = parser.parse_args(argv)
    out_path = args.out or HERE / f"bench_{args.frames}f.json"

    ref = np.load(args.ref)
    chunk = np.ascontiguousarray(ref["mel"][None, :, args.start:args.start + args.frames])
    if chunk.shape[2] != args.frames:
        sys.exit(f"the reference mel has no {args.frames} frames from frame {args.start}")
    with torch.no_grad():
        expected = load_generator()(torch.from_numpy(chunk)).numpy().reshape(-1)
    audio_s = args.frames * int(ref["hop"]) / int(ref["sample_rate"])

    models = {}
    for mode in args.modes:
        models[mode] = HERE / "artifacts" / f"vocoder_{mode}_{args.frames}f.tflite"
        if not models[mode].exists():
            subprocess.run([sys.executable, str(HERE / "export_vocoder.py"), "--convt", mode,
                            "--frames", str(args.frames)], check=True)

    # rounds, each visiting the graphs in a rotated order, so load drift on a shared machine hits all alike
    load_before = os.getloadavg()[0]
    rows = {(m, d): {"convt": m, "device": d, "run_s_rounds": []} for m in args.modes for d in args.devices}
    for r in range(args.rounds):
        for mode in args.modes[r % len(args.modes):] + args.modes[:r % len(args.modes)]:
            info = read_model_info(models[mode])
            sig = info.signatures[0]
            for device in args.devices:
                row = rows[(mode, device)]
                repeats = args.cpu_repeats if device == "cpu" else args.gpu_repeats
                run = run_on_device(models[mode], {sig.key: {next(iter(sig.inputs)): chunk}}, device,
                                    repeats=repeats)
                row.update(status=run.status, repeats=repeats, ops=info.num_ops,
                           transpose_conv_ops=info.op_histogram().get("TRANSPOSE_CONV", 0))
                if run.ok:
                    out = next(iter(run.outputs[sig.key].values())).reshape(-1)
                    row["run_s_rounds"].append(run.run_s[sig.key])
                    row.update(device_label=device_label(device, run), compile_s=run.compile_s,
                               corr_vs_torch=compare(out, expected).corr)
                else:
                    row["error"] = (run.error or "").splitlines()[0] if run.error else run.status
                print(f"round {r + 1}: {mode} on {device}: {run.status} {run.run_s.get(sig.key, float('nan')):.3f} s",
                      flush=True)
    rows = list(rows.values())
    for row in rows:
        if row["run_s_rounds"]:
            row["run_s"] = statistics.median(row["run_s_rounds"])
            row["rtf"] = row["run_s"] / audio_s

    record = {"frames": args.frames, "start_frame": args.start, "audio_s_per_chunk": audio_s, "rounds": args.rounds,
              "load_average_before_after": [load_before, os.getloadavg()[0]],
              "date": dt.date.today().isoformat(), "host": f"{platform.machine()}, {platform.python_version()}",
              "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "rows": rows}
    out_path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\n{args.frames} frames = {audio_s:.3f} s of audio per run; median over {args.rounds} rounds of the median "
          f"of {args.gpu_repeats} GPU / {args.cpu_repeats} CPU runs\n")
    print("| transposed conv | device | ops (TRANSPOSE_CONV) | compile s | run s | real-time factor | corr vs torch |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "run_s" in r:
            print(f"| {r['convt']} | {r['device_label']} | {r['ops']} ({r['transpose_conv_ops']}) "
                  f"| {r['compile_s']:.2f} | {r['run_s']:.3f} | {r['rtf']:.3f} | {r['corr_vs_torch']:.6f} |")
        else:
            print(f"| {r['convt']} | {r['device']} | {r['ops']} ({r['transpose_conv_ops']}) | {r['status']}: "
                  f"{r['error']} | | | |")
    print(f"\nwrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(verify_main(main))  # an unknown device: exit 2; no usable GPU: exit 3, nothing written
