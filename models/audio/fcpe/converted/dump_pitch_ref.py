"""Reference dump: the source model (torch.stft front end, torch network) on real speech and on pure tones.

Samples, each exactly --samples long at 16 kHz (the graph's fixed length):
  * espeak-ng speech (two voices, so both a low and a higher pitch range are covered), resampled to 16 kHz with
    scipy and peak-normalised to 0.9, cut or zero-padded to the length;
  * sines at --tones Hz, amplitude 0.5 (their true pitch is known: the task check's ground truth).

Writes artifacts/pitch_ref.npz: audio [S, N], salience [S, frames, 360] (torch), cent_table, names, tone_hz
(0 for speech), sample_rate, samples.

    python dump_pitch_ref.py                      # 3 s per sample
    python dump_pitch_ref.py --samples 8000 --tones 220
"""
from __future__ import annotations

import sys
from math import gcd
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.recipe import (add_ref_argument, add_weights_argument, script_main, script_parser,
                                       WRITE_INTERRUPTED)
from litert_gpu_toolkit.recipe.speech import espeak

HERE = Path(__file__).resolve().parent
WEIGHTS = "the torchfcpe wheel's fcpe_c_v001.pt; or the path of a conv-only FCPE .pt checkpoint"
SPEECH = (("en-us", "The pitch of a voice rises and falls as we speak."),
          ("en-us+f3", "She asked whether the music was higher today."))


def speech_at(text: str, voice: str, rate: int, samples: int) -> np.ndarray:
    audio, sr = espeak(text, voice=voice, dtype="float32")
    if sr != rate:
        from scipy.signal import resample_poly
        g = gcd(sr, rate)
        audio = resample_poly(audio, rate // g, sr // g)
    audio = (0.9 * audio / np.abs(audio).max()).astype(np.float32)
    out = np.zeros(samples, np.float32)
    out[:min(samples, len(audio))] = audio[:samples]
    return out


def main(argv=None) -> int:
    parser = script_parser(__doc__)
    add_weights_argument(parser, WEIGHTS)
    add_ref_argument(parser, HERE / "artifacts" / "pitch_ref.npz", writes=True)
    parser.add_argument("--samples", type=int, default=48000, help="samples per input (must match the export)")
    parser.add_argument("--tones", type=float, nargs="+", default=[110.0, 220.0, 440.0, 880.0],
                        help="pure-tone frequencies in Hz (default: 110 220 440 880)")
    parser.add_argument("--no-speech", action="store_true", help="tones only (no espeak-ng needed)")
    args = parser.parse_args(argv)
    from fcpe import load_model, reference_salience

    model, config = load_model(args.weights)
    rate = config["mel"]["sr"]
    audio, names, tone_hz = [], [], []
    if not args.no_speech:
        for voice, text in SPEECH:
            audio.append(speech_at(text, voice, rate, args.samples))
            names.append(f"speech {voice}")
            tone_hz.append(0.0)
    t = np.arange(args.samples) / rate
    for hz in args.tones:
        audio.append((0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32))
        names.append(f"sine {hz:g} Hz")
        tone_hz.append(hz)
    salience = np.stack([reference_salience(model, a, config["mel"]) for a in audio])
    args.ref.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.ref, audio=np.stack(audio), salience=salience, cent_table=model.cent_table.numpy(),
             names=np.array(names), tone_hz=np.array(tone_hz), sample_rate=rate, samples=args.samples)
    print(f"wrote {args.ref}: {len(audio)} inputs of {args.samples} samples ({', '.join(names)}); "
          f"salience {salience.shape[1:]}")
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
