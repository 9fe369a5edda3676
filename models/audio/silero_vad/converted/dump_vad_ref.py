"""Make the test recording and the reference speech probabilities: artifacts/speech_16k.wav, artifacts/vad_ref.npz.

The recording is real synthetic speech: three English sentences spoken by espeak-ng (offline; install it with
`apt-get install -y espeak-ng`), resampled to 16 kHz, separated and padded by digital silence and by low-level
Gaussian noise (std 0.003, about -50 dBFS; fixed seed), zero-padded to whole 512-sample chunks. About 16 s.

The reference is the wheel's TorchScript model fed 512 samples at a time from a fresh state. The recipe's own torch
definition (vad_net.py, the network that gets converted) runs the same loop and must match it to fp32 rounding:
the script exits 1 if the largest per-chunk difference exceeds --tolerance. Its state entering every step (h_in,
c_in) is saved too, for verify_vad.py's teacher-forced check.

    python dump_vad_ref.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import soundfile as sf

from litert_gpu_toolkit.recipe import (add_ref_argument, add_weights_argument, script_main, script_parser,
                                       WRITE_INTERRUPTED)
from litert_gpu_toolkit.recipe.speech import espeak

HERE = Path(__file__).resolve().parent
WEIGHTS = ("the silero-vad package's data/ folder (silero_vad.jit, silero_vad_16k.safetensors); "
           "or a folder holding those two files")

SENTENCES = [
    "Voice activity detection finds the parts of a recording that contain speech.",
    "Everything else is silence, or noise.",
    "The quick brown fox jumps over the lazy dog.",
]


def speak(text: str, sample_rate: int) -> np.ndarray:
    """espeak-ng speech (22.05 kHz) resampled to `sample_rate` by FFT truncation, peak 0.5."""
    x, rate = espeak(text, dtype="float64")
    n = round(len(x) * sample_rate / rate)
    spectrum = np.fft.rfft(x)[: n // 2 + 1]
    y = np.fft.irfft(spectrum, n) * (n / len(x))
    return (0.5 * y / np.abs(y).max()).astype(np.float32)


def main() -> int:
    parser = script_parser(__doc__)
    add_weights_argument(parser, WEIGHTS)
    add_ref_argument(parser, HERE / "artifacts" / "vad_ref.npz", writes=True)
    parser.add_argument("--wav", type=Path, default=HERE / "artifacts" / "speech_16k.wav",
                        help="the test recording as a WAV, to listen to (default: artifacts/speech_16k.wav)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the noise sections")
    parser.add_argument("--tolerance", type=float, default=1e-5,
                        help="largest allowed |torch definition - TorchScript| per chunk (default 1e-5)")
    args = parser.parse_args()
    from vad_net import (CHUNK, SAMPLE_RATE, load_net, load_reference, reference_state_dict,  # imports torch
                         safetensors_state_dict, stream_net, stream_reference)

    rng = np.random.default_rng(args.seed)
    silence = lambda s: np.zeros(int(s * SAMPLE_RATE), np.float32)
    noise = lambda s: (0.003 * rng.standard_normal(int(s * SAMPLE_RATE))).astype(np.float32)
    said = [speak(text, SAMPLE_RATE) for text in SENTENCES]
    parts = [("silence", silence(1.0)), ("speech", said[0]), ("silence", silence(1.0)), ("speech", said[1]),
             ("noise", noise(1.5)), ("speech", said[2]), ("noise", noise(1.0))]
    audio = np.concatenate([p for _, p in parts])
    audio = np.concatenate([audio, np.zeros(-len(audio) % CHUNK, np.float32)])
    assert len(audio) >= 10 * SAMPLE_RATE, "the recording must be at least 10 s"
    layout, t = [], 0.0
    for kind, p in parts:
        layout.append(f"{kind} {t:.2f}-{t + len(p) / SAMPLE_RATE:.2f} s")
        t += len(p) / SAMPLE_RATE
    print(f"recording: {len(audio) / SAMPLE_RATE:.2f} s, {len(audio) // CHUNK} chunks of {CHUNK}; " + ", ".join(layout))

    ref = load_reference(args.weights)
    ref_prob = stream_reference(ref, audio)
    net_prob, h_in, c_in = stream_net(load_net(reference_state_dict(ref)), audio)
    diff = float(np.abs(net_prob - ref_prob).max())
    print(f"torch definition vs TorchScript on this recording: max |dprob| = {diff:.3g} over {len(ref_prob)} chunks")
    print(
        f"reference: {int((ref_prob >= 0.5).sum())} chunks >= 0.5, "
        f"prob range {ref_prob.min():.3f}..{ref_prob.max():.3f}"
    )
    other_prob = stream_net(load_net(safetensors_state_dict(args.weights)), audio)[0]
    print(
        f"for comparison, the wheel's silero_vad_16k.safetensors weights: max |dprob| = "
        f"{np.abs(other_prob - ref_prob).max():.3g} (a different weight set; not used)"
    )

    args.ref.parent.mkdir(parents=True, exist_ok=True)
    args.wav.parent.mkdir(parents=True, exist_ok=True)
    sf.write(args.wav, audio, SAMPLE_RATE, subtype="FLOAT")
    np.savez(
        args.ref,
        audio=audio,
        ref_prob=ref_prob,
        net_prob=net_prob,
        h_in=h_in,
        c_in=c_in,
        sample_rate=SAMPLE_RATE,
        layout=np.array(layout),
        sentences=np.array(SENTENCES),
    )
    print(f"wrote {args.ref} and {args.wav}")
    if diff > args.tolerance:
        print(f"FAIL: the torch definition differs from the TorchScript model by {diff:.3g} > {args.tolerance:g}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
