"""Silero VAD's framing and segment rule, in numpy: what the verify script needs without torch."""
from __future__ import annotations

import numpy as np

SAMPLE_RATE = 16000
CHUNK = 512          # new samples per step (32 ms)
CONTEXT = 64         # samples of the previous step the model sees again
HIDDEN = 128         # LSTM state size (h and c)


def steps_of(audio: np.ndarray) -> np.ndarray:
    """Cut audio (a multiple of 512 samples) into the [N, 576] step inputs: 64 previous samples (zeros first) + 512."""
    chunks = audio.reshape(-1, CHUNK).astype(np.float32)
    context = np.zeros((len(chunks), CONTEXT), np.float32)
    context[1:] = chunks[:-1, -CONTEXT:]
    return np.concatenate([context, chunks], axis=1)


def segments(prob: np.ndarray, threshold: float, min_speech: int, min_silence: int) -> list[tuple[int, int]]:
    """Speech segments as [start, end) chunk indices, in three passes:
    a chunk is speech when prob >= threshold; a gap of fewer than `min_silence` chunks between two speech runs is
    bridged; a segment of fewer than `min_speech` chunks is dropped. (The silero-vad package's own
    get_speech_timestamps adds hysteresis and padding; this simpler rule is applied identically to both curves.)"""
    runs, start = [], None
    for i, speech in enumerate(np.append(prob >= threshold, False)):
        if speech and start is None:
            start = i
        elif not speech and start is not None:
            runs.append([start, i])
            start = None
    merged = []
    for run in runs:
        if merged and run[0] - merged[-1][1] < min_silence:
            merged[-1][1] = run[1]
        else:
            merged.append(run)
    return [(s, e) for s, e in merged if e - s >= min_speech]
