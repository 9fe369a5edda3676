"""Test speech for the audio recipes: espeak-ng, offline, deterministic for a given text and voice.

Recipes resample it to their model's rate their own way (that is part of each recipe's reference).
A missing espeak-ng is a user mistake with a fix (exit status 2 through `recipe.verify_main`).
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ..core.errors import RecipeError

INSTALL = "install it: apt-get install -y espeak-ng (Debian / Ubuntu)"


class SpeechError(RecipeError):
    """espeak-ng is missing or failed."""


def espeak(text: str, *, voice: str = "en-us", words_per_minute: int = 150, dtype: str = "float32"):
    """`text` spoken by espeak-ng: (mono samples as `dtype`, sample rate in Hz)."""
    import soundfile as sf

    if shutil.which("espeak-ng") is None:
        raise SpeechError(f"espeak-ng not found (it synthesises the test speech): {INSTALL}")
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "speech.wav"
        proc = subprocess.run(["espeak-ng", "-v", voice, "-s", str(words_per_minute), "-w", str(wav), text],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SpeechError(f"espeak-ng failed ({proc.returncode}): {proc.stderr.strip()[:300]}")
        audio, rate = sf.read(wav, dtype=dtype)
    if audio.ndim > 1:
        audio = audio.mean(axis=1)
    return audio, int(rate)
