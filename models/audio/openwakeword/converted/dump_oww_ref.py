"""Reference dump: the torch port of openWakeWord's pipeline, streamed over espeak-ng clips as openWakeWord does it.

Clips (16 kHz, peak 0.5, 2 s of silence before and 1 s after the words): "hey jarvis" in three espeak-ng voices
(the positives) and two other sentences (the negatives). Streaming: every 1280 new samples the mel stage sees the
last 1760 samples and appends its 8 frames; features = mel / 10 + 2; an embedding per 76-frame window every 8
frames; a score per 16 consecutive embeddings.

Writes artifacts/oww_ref.npz: clips [C, N], positive [C], and the torch stage outputs per clip (mel [C, K, 1, 8,
32], embeddings [C, E, 96], scores [C, S]).

    python dump_oww_ref.py
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
WEIGHTS = "the openwakeword wheel's resources/models folder; or a folder with the same .onnx files"
CLIPS = ((True, "en-us", "hey jarvis", 150), (True, "en", "hey jarvis", 130), (True, "en-us+m3", "hey jarvis", 140),
         (False, "en-us", "what is the weather like", 150), (False, "en-gb", "turn on the kitchen lights", 150))
RATE, STEP, CONTEXT = 16000, 1280, 480


def clip(voice: str, text: str, wpm: int, seconds: float) -> np.ndarray:
    audio, sr = espeak(text, voice=voice, words_per_minute=wpm)
    if sr != RATE:
        from scipy.signal import resample_poly
        g = gcd(sr, RATE)
        audio = resample_poly(audio, RATE // g, sr // g)
    audio = (0.5 * audio / np.abs(audio).max()).astype(np.float32)
    out = np.zeros(int(seconds * RATE), np.float32)
    start = 2 * RATE
    out[start:start + min(len(audio), len(out) - start - RATE)] = audio[:len(out) - start - RATE]
    return out


def mel_chunks(audio: np.ndarray) -> np.ndarray:
    """[K, 1760]: the mel stage's inputs while streaming."""
    return np.stack([audio[s - CONTEXT:s + STEP] for s in range(CONTEXT, len(audio) - STEP + 1, STEP)])


def run_torch(stages, audio: np.ndarray):
    import torch
    from oww import embedding_windows, head_windows, mel_to_features

    mel_m, emb_m, head_m = stages
    with torch.no_grad():
        mel = mel_m(torch.from_numpy(mel_chunks(audio))).numpy()                      # [K, 1, 8, 32]
        features = mel_to_features(np.concatenate([m[0] for m in mel]))
        emb = emb_m(torch.from_numpy(embedding_windows(features))).numpy().reshape(-1, 96)
        scores = head_m(torch.from_numpy(head_windows(emb))).numpy().ravel()
    return mel, emb, scores


def main(argv=None) -> int:
    parser = script_parser(__doc__)
    add_weights_argument(parser, WEIGHTS)
    add_ref_argument(parser, HERE / "artifacts" / "oww_ref.npz", writes=True)
    parser.add_argument("--seconds", type=float, default=4.5, help="clip length in seconds (default 4.5)")
    args = parser.parse_args(argv)
    from oww import load_stage

    stages = tuple(load_stage(name, args.weights) for name in ("melspectrogram", "embedding_model",
                                                               "hey_jarvis_v0.1"))
    clips = np.stack([clip(voice, text, wpm, args.seconds) for _, voice, text, wpm in CLIPS])
    outs = [run_torch(stages, a) for a in clips]
    args.ref.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.ref, clips=clips, positive=np.array([p for p, *_ in CLIPS]),
             names=np.array([f"{text} ({voice})" for _, voice, text, _ in CLIPS]),
             mel=np.stack([o[0] for o in outs]), embeddings=np.stack([o[1] for o in outs]),
             scores=np.stack([o[2] for o in outs]))
    for (positive, voice, text, _), (_, _, scores) in zip(CLIPS, outs):
        print(f"  {'+' if positive else '-'} {text!r} ({voice}): max score {scores.max():.3f} over {len(scores)}")
    print(f"wrote {args.ref}")
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
