"""Export one Silero VAD streaming step (16 kHz) to artifacts/silero_vad_step.tflite, GPU-clean.

Graph (one call per 32 ms of audio; the caller carries the state and the context samples):
  inputs   audio [1, 576]  the last 64 samples of the previous chunk (zeros at the start) + 512 new samples
           h, c  [1, 128]  LSTM state from the previous call (zeros at the start)
           one   [1]       1.0 (a runtime input on purpose: see vad_net.GpuStep)
  outputs  prob [1, 1] speech probability of the chunk; h_next, c_next [1, 128] the state for the next call

Weights: the wheel's reference tensors (silero_vad.jit); the wheel's silero_vad_16k.safetensors holds a different
weight set, and this script prints by how much. Before converting, the graph's torch form is streamed over a
synthetic test signal next to the TorchScript model and must agree to fp32 rounding (--tolerance).

The step is re-authored for streaming (vad_net.GpuStep: explicit LSTM gates, the encoder referenced to its
response to silence for fp16 accuracy, state outputs emitted as `state * one`, see ../README.md) and handed to the
toolkit's front door, `convert_for_gpu`, which applies whatever default rewrite it finds and checks the file
strictly GPU-only. The converted file is then checked statically: no GATHER_ND or SPLIT, and no ADD that is both a
graph output and consumed further on (toolkit `find_aliased_outputs`).
  --pad exchange  (default) slice + exchange-matrix matmul + concatenation: 3 ops (vad_net.ReflectPadRight)
  --pad slices    nn.ReflectionPad1d left in, for the front door's patch_reflect_pad: 64 one-sample slices + concat
  --plain         convert the network as defined (nn.ReflectionPad1d, nn.LSTMCell; inputs audio, h, c): the walls
  --no-centre     all GPU rewrites except the silence referencing, to see its effect on fp16 accuracy

    python export_vad.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.recipe import (add_model_argument, add_quantize_argument, add_weights_argument, script_main,
                                       script_parser, WRITE_INTERRUPTED)

HERE = Path(__file__).resolve().parent


def test_signal(sample_rate: int, chunk: int, seconds: float = 3.0, seed: int = 0) -> np.ndarray:
    """Deterministic bursts (tones + noise) between quiet and silent stretches: exercises both states."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    envelope = (np.sin(2 * np.pi * 0.7 * t) > 0.2).astype(np.float64)
    voiced = 0.3 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) + 0.05 * rng.standard_normal(len(t))
    x = voiced * envelope + 0.002 * rng.standard_normal(len(t))
    x = x[: len(x) // chunk * chunk]
    return x.astype(np.float32)


def main() -> int:
    parser = script_parser(__doc__)
    add_quantize_argument(parser)
    add_weights_argument(parser, "the silero-vad package's data/ folder; or a folder holding silero_vad.jit and "
                                 "silero_vad_16k.safetensors")
    add_model_argument(parser, None, writes=True,
                       default_text="artifacts/silero_vad_step[_slicepad|_plain|_uncentred].tflite")
    parser.add_argument("--pad", choices=("exchange", "slices"), default="exchange",
                        help="reflect padding form: the exchange-matrix matmul (default) or one slice per sample")
    parser.add_argument("--plain", action="store_true", help="no rewrites (reproduces the GPU walls)")
    parser.add_argument("--no-centre", action="store_true", help="skip the silence-referenced encoder")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="largest allowed |graph in torch fp32 - TorchScript| per chunk on the test signal")
    args = parser.parse_args()

    import torch
    from vad_net import (CHUNK, CONTEXT, HIDDEN, SAMPLE_RATE, GpuStep, ReflectPadRight, load_net, load_reference,
                         reference_state_dict, safetensors_state_dict, stream_net, stream_reference)

    from litert_gpu_toolkit import ConvertOptions
    from litert_gpu_toolkit.core.model_info import read_model_info
    from litert_gpu_toolkit.recipe import export_graph
    from litert_gpu_toolkit.rewrites.output_aliasing import find_aliased_outputs, outputs_guarded_by_runtime_one

    suffix = "_plain" if args.plain else "_uncentred" if args.no_centre else "_slicepad" if args.pad == "slices" else ""
    out = args.model or HERE / "artifacts" / f"silero_vad_step{suffix}.tflite"

    ref = load_reference(args.weights)
    state = reference_state_dict(ref)
    other = safetensors_state_dict(args.weights)
    assert set(other) == set(state) and all(other[k].shape == state[k].shape for k in state), (
        "safetensors layout changed"
    )
    differ = [
        f"{k} {float((other[k] - state[k]).abs().max()):.3g}" for k in state if not torch.equal(other[k], state[k])
    ]
    print(
        "silero_vad_16k.safetensors vs the TorchScript reference's tensors, max |diff|: "
        + (", ".join(differ) if differ else "none (identical)")
    )

    net = load_net(state)
    if args.plain:
        module, extra = net, ()
    elif args.pad == "slices":
        module, extra = GpuStep(net, centre=not args.no_centre).eval(), (torch.ones(1),)
    else:
        # by hand: the toolkit's patch_reflect_pad (what --pad slices gets) is one slice per padded sample, 64
        # here; a right-only reflection of a fixed length is also an exchange-matrix product, 3 ops
        net.pad = ReflectPadRight(CONTEXT)
        module, extra = GpuStep(net, centre=not args.no_centre).eval(), (torch.ones(1),)

    audio = test_signal(SAMPLE_RATE, CHUNK)
    expected = stream_reference(ref, audio)
    got = stream_net(module, audio, *extra)[0]
    diff = float(np.abs(got - expected).max())
    print(f"graph in torch fp32 vs TorchScript, {len(expected)} chunks of a test signal: max |dprob| = {diff:.3g}")
    if diff > args.tolerance:
        print(f"FAIL: the graph to convert differs from the reference by {diff:.3g} > {args.tolerance:g}")
        return 1

    # the check's inputs: a chunk of the test signal and a state from streaming it (zeros make a constant graph)
    sample = {"audio": torch.from_numpy(audio[8 * CHUNK - CONTEXT: 9 * CHUNK])[None],
              "h": torch.full((1, HIDDEN), 0.1), "c": torch.full((1, HIDDEN), -0.1)}
    if not args.plain:
        sample["one"] = torch.ones(1)
    start = time.perf_counter()
    # --plain converts without rewrites (to show the walls); verify judges the numbers on the test signal
    options = ConvertOptions(patches=not args.plain, fallback=not args.plain, diagnose_budget_s=0)
    if export_graph(module, (), out, args, graph=out.stem, options=options, kwargs=sample):
        return 1
    info = read_model_info(out)
    sig = info.signatures[0]
    print(f"exported in {time.perf_counter() - start:.1f} s")
    print(
        f"inputs {', '.join(f'{n} {list(t.shape)}' for n, t in sig.inputs.items())}; "
        f"outputs {', '.join(f'{n} {list(t.shape)}' for n, t in sig.outputs.items())}"
    )
    aliased = find_aliased_outputs(info)
    for a in aliased:
        print(
            f"output-aliasing pattern: op {a.op_index} ADD({', '.join(a.operands)}) -> output {a.output.name}, "
            f"also consumed by {', '.join(a.consumers)}"
        )
    guarded = outputs_guarded_by_runtime_one(info)
    print(
        "outputs emitted as x * one: "
        + ", ".join(f"{n.removeprefix(sig.key + '_').split('_output')[0]} {g}" for n, g in guarded.items())
    )
    walls = [op for op in ("GATHER_ND", "SPLIT") if info.has_op(op)]
    if not args.plain and (aliased or walls):
        print(f"FAIL: the GPU step still has {', '.join(walls + ['an aliased ADD output'] * bool(aliased))}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
