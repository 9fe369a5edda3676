"""Verify the exported vocoder on a device against the torch generator, chunk by chunk, on real speech.

Reads artifacts/reference.npz (dump_vocoder_ref.py) and the exported graph (export_vocoder.py), runs every chunk on
`--device` (strict GPU-only compile on the GPU devices), stitches the chunk cores and compares with torch:
waveform correlation, SNR, max |diff|, log-mel L1 distance (GPU vs torch, and both vs the input mel as the task
check). Writes artifacts/vocoder_{torch,<device>}.wav and artifacts/spectrograms_<device>.png to listen and look,
and records the run in converted/results.json.

Gates: strict GPU residency N/N ops on every chunk (GPU devices); waveform correlation >= 0.999. Exit status:
0 passed, 1 a gate failed, 2 unknown device or a missing / corrupt artifact, 3 no usable GPU (nothing recorded).

    python verify_vocoder.py                          # polyphase graph, this machine's GPU (fp16)
    python verify_vocoder.py --convt native --device cpu
    python verify_vocoder.py --plan artifacts/vocoder_polyphase_128f_fp32-ups.1/plan.json   # the precision plan

--plan runs a two-graph plan from `export_vocoder.py --fp32-until MODULE` on a GPU device: every chunk through
part0 with fp32 arithmetic, then part1 in the device's own precision (fp16 on host-gpu), each graph strictly on
the GPU; it is recorded as its own row (graph `<folder>`), with each graph's residency and latency.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from litert_gpu_toolkit.core.metrics import compare, snr_db
from litert_gpu_toolkit.recipe import (LATENCY_METRIC, add_model_argument, add_ref_argument, finish_verify,
                                       latency_ms, load_model, load_reference, print_failure, residency,
                                       run_on_device, strict_gates, verify_main, verify_parser)
from litert_gpu_toolkit.recipe.plans import FP32_DEVICE, run_plan

HERE = Path(__file__).resolve().parent

CORR_GATE = 0.999



def save_spectrograms(path: Path, mels: dict[str, np.ndarray]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(mels), 1, figsize=(10, 2.2 * len(mels)), sharex=True)
    for ax, (title, mel) in zip(axes, mels.items()):
        diff = title.startswith("|")
        image = ax.imshow(mel, origin="lower", aspect="auto", cmap="magma" if diff else "viridis",
                          vmin=0 if diff else -11.5, vmax=2 if diff else 2)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("mel bin")
        fig.colorbar(image, ax=ax, pad=0.01)
    axes[-1].set_xlabel("frame (hop 256 at 22.05 kHz)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = verify_parser(__doc__, HERE)
    parser.add_argument("--convt", default="polyphase", choices=("polyphase", "zerostuff", "native"),
                        help="which export to verify (picks artifacts/vocoder_<convt>_<frames>f.tflite)")
    add_model_argument(parser, None, writes=False, default_text="artifacts/vocoder_<convt>_<frames>f.tflite")
    add_ref_argument(parser, HERE / "artifacts" / "reference.npz", writes=False)
    parser.add_argument("--artifacts", type=Path, default=HERE / "artifacts",
                        help="where the WAVs and the spectrogram PNG go (default: artifacts)")
    parser.add_argument("--plan", type=Path, metavar="PLAN_JSON",
                        help="verify a precision plan (export_vocoder.py --fp32-until) instead of one graph")
    args = parser.parse_args(argv)
    if args.plan is not None and args.device not in FP32_DEVICE:
        parser.error(f"--plan runs on a GPU device that also runs fp32 ({', '.join(FP32_DEVICE)}), not {args.device}")
    if args.plan is not None and not args.plan.is_file():
        parser.error(f"--plan {args.plan}: no such file (export_vocoder.py --fp32-until MODULE writes it)")
    from hifigan import load_config, log_mel, stitch_chunks   # imports torch

    # a bad --model is reported before a missing reference (the recipes' contract)
    info = load_model(args.model, "export_vocoder.py") if args.model and args.plan is None else None
    ref = load_reference(args.ref, "dump_vocoder_ref.py")
    frames, context, hop, sr = (int(ref[k]) for k in ("frames", "context", "hop", "sample_rate"))
    chunks, torch_chunks = ref["chunks"], ref["torch_chunks"]
    if args.plan is not None:
        plan = run_plan(args.plan, [(c[None],) for c in chunks], args.device, "export_vocoder.py --fp32-until MODULE")
        model, run, res, graphs = plan.folder, plan.runs[-1], plan.residencies, plan.models
        cold = plan.runs                                        # an app compiles and first-runs every part
        outputs = np.stack(plan.outputs).reshape(len(chunks), -1) if plan.ok else None
        run_s = plan.run_s if plan.ok else 0.0
    else:
        model = args.model or HERE / "artifacts" / f"vocoder_{args.convt}_{frames}f.tflite"
        info = info or load_model(model, f"export_vocoder.py --convt {args.convt} --frames {frames}")
        signature = info.signatures[0]
        (input_name,) = signature.inputs
        print(f"{model.name}: {info.num_ops} ops; {len(chunks)} chunks of {frames} frames on {args.device}")
        start = time.perf_counter()
        run = run_on_device(model, {signature.key: [{input_name: chunk[None]} for chunk in chunks]}, args.device)
        print(f"ran {len(chunks)} chunks on one compile in {time.perf_counter() - start:.0f} s")
        res = residency(info, run)
        cold = [run]
        print(res.line)
        if not run.ok:
            print_failure(run)
        outputs = next(iter(run.outputs[signature.key].values())).reshape(len(chunks), -1) if run.ok else None
        graphs = {model.stem: model}
        res, run_s = [res], run.run_s[signature.key] if run.ok else 0.0

    metrics: dict = {}
    if outputs is not None:
        config = load_config()
        gpu_wave = stitch_chunks(outputs, frames, context, hop, ref["mel"].shape[1])
        torch_wave = ref["torch_wave"]
        c = compare(gpu_wave, torch_wave)
        mel_in, mel_torch, mel_dev = ref["mel"], log_mel(torch_wave, config), log_mel(gpu_wave, config)
        metrics = {
            "waveform_corr": c.corr,
            "min_chunk_corr": min(compare(o, t).corr for o, t in zip(outputs, torch_chunks)),
            "snr_db": snr_db(gpu_wave, torch_wave),
            "max_abs": c.max_abs,
            "nonfinite": c.nonfinite,
            "logmel_l1_vs_torch": float(np.abs(mel_dev - mel_torch).mean()),
            "logmel_l1_input_vs_torch": float(np.abs(mel_in - mel_torch).mean()),
            "logmel_l1_input_vs_device": float(np.abs(mel_in - mel_dev).mean()),
            "chunks": len(chunks),
            "frames_per_graph": frames,
            LATENCY_METRIC: latency_ms(run_s),  # per chunk (a plan: the sum of its graphs' medians)
            "real_time_factor": run_s / (frames * hop / sr),
        }
        for k, v in metrics.items():
            print(f"  {k}: {v:.6g}" if isinstance(v, float) else f"  {k}: {v}")
        out_dir = args.artifacts
        out_dir.mkdir(parents=True, exist_ok=True)
        sf.write(out_dir / "vocoder_torch.wav", torch_wave, sr)
        sf.write(out_dir / f"vocoder_{args.device}.wav", gpu_wave, sr)
        png = out_dir / f"spectrograms_{args.device}.png"
        save_spectrograms(png, {"input log-mel (espeak-ng speech)": mel_in, "torch generator output": mel_torch,
                                f"{model.name} on {args.device}": mel_dev,
                                "|device - torch| log-mel": np.abs(mel_dev - mel_torch)})
        print(f"wrote {out_dir.name}/vocoder_torch.wav, vocoder_{args.device}.wav, {png.name}")

    gates = strict_gates(args.device, *res)
    gates[f"waveform corr >= {CORR_GATE}"] = bool(metrics.get("waveform_corr", 0) >= CORR_GATE)
    args.model = model
    graph = model.name if args.plan is not None else model.stem   # a plan's folder name keeps its dots
    return finish_verify(args, graph=graph, run=run, residency="; ".join(r.line for r in res), metrics=metrics,
                         startup=cold,
                         gates=gates, models=graphs, headline=["waveform_corr", "min_chunk_corr", "snr_db"])


if __name__ == "__main__":
    sys.exit(verify_main(main))
