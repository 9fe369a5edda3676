"""Windows, DFT bases and mel filterbanks as numpy arrays (the weights of the exact conv forms).
"""
from __future__ import annotations

import math

import numpy as np
import torch


# ---------------------------------------------------------------------------------------------
# windows and bases (float64 numpy, rounded once)
# ---------------------------------------------------------------------------------------------

def make_window(window, win_length: int, n_fft: int) -> np.ndarray:
    """A length-n_fft float64 window: `window` is None (rectangular, torch.stft's default), a name
    ("hann", "hamming", "blackman", "rect"; periodic, as torch's window functions) or an array /
    tensor of length win_length. Shorter windows are zero-padded centred, as torch.stft does."""
    if window is None or (isinstance(window, str) and window in ("rect", "ones", "boxcar")):
        w = np.ones(win_length)
    elif isinstance(window, str):
        n = np.arange(win_length, dtype=np.float64)
        phase = 2 * np.pi * n / win_length                    # periodic window
        if window == "hann":
            w = 0.5 - 0.5 * np.cos(phase)
        elif window == "hamming":
            w = 0.54 - 0.46 * np.cos(phase)
        elif window == "blackman":
            w = 0.42 - 0.5 * np.cos(phase) + 0.08 * np.cos(2 * phase)
        else:
            raise ValueError(f"unknown window {window!r}")
    else:
        w = (window.detach().cpu().double().numpy() if isinstance(window, torch.Tensor)
             else np.asarray(window, dtype=np.float64))
        if w.shape != (win_length,):
            raise ValueError(f"window has shape {w.shape}, expected ({win_length},)")
    if win_length > n_fft:
        raise ValueError(f"win_length {win_length} > n_fft {n_fft}")
    left = (n_fft - win_length) // 2
    full = np.zeros(n_fft)
    full[left:left + win_length] = w
    return full


def _angles(n_fft: int, n_freqs: int) -> np.ndarray:
    """2*pi*k*n/n_fft for k < n_freqs, n < n_fft, with k*n reduced mod n_fft (exact integers)."""
    k = np.arange(n_freqs, dtype=np.int64)[:, None]
    n = np.arange(n_fft, dtype=np.int64)[None, :]
    return 2.0 * np.pi * ((k * n) % n_fft) / n_fft


def stft_basis(n_fft: int, window: np.ndarray, onesided: bool = True, normalized: bool = False) -> np.ndarray:
    """[2F, n_fft] analysis kernels: rows 0..F-1 give Re X_k = sum_n w[n] x[n] cos, rows F..2F-1 give
    Im X_k = -sum_n w[n] x[n] sin (torch.stft's sign)."""
    n_freqs = n_fft // 2 + 1 if onesided else n_fft
    ang = _angles(n_fft, n_freqs)
    basis = np.concatenate([np.cos(ang), -np.sin(ang)], axis=0) * window[None, :]
    if normalized:
        basis = basis / math.sqrt(n_fft)
    return basis


def istft_synthesis(n_fft: int, window: np.ndarray, onesided: bool = True, normalized: bool = False) -> np.ndarray:
    """[2F, n_fft] synthesis rows: frame[n] = sum_k S[k, n] * spec[k] is the windowed inverse DFT.

    Onesided (as irfft): DC and (even n_fft) Nyquist counted once, their imaginary parts ignored,
    every other bin twice; two-sided: the real part of the full inverse DFT."""
    n_freqs = n_fft // 2 + 1 if onesided else n_fft
    ang = _angles(n_fft, n_freqs)
    weight = np.ones(n_freqs)
    if onesided:
        weight[1:] = 2.0
        if n_fft % 2 == 0:
            weight[-1] = 1.0
    cos = weight[:, None] * np.cos(ang)
    sin = -weight[:, None] * np.sin(ang)
    if onesided:
        sin[0] = 0.0
        if n_fft % 2 == 0:
            sin[-1] = 0.0
    synth = np.concatenate([cos, sin], axis=0) / n_fft * window[None, :]
    if normalized:
        synth = synth * math.sqrt(n_fft)
    return synth


def window_envelope(window: np.ndarray, hop: int, n_frames: int) -> np.ndarray:
    """sum_t w^2(n - t*hop): what overlap-adding the synthesis window times the analysis window gives."""
    n_fft = len(window)
    env = np.zeros(n_fft + hop * (n_frames - 1))
    w2 = window ** 2
    for t in range(n_frames):
        env[t * hop:t * hop + n_fft] += w2
    return env


# ---------------------------------------------------------------------------------------------
# mel scale
# ---------------------------------------------------------------------------------------------

_SLANEY_F_SP = 200.0 / 3.0          # Hz per mel below 1 kHz
_SLANEY_MIN_LOG_HZ = 1000.0
_SLANEY_MIN_LOG_MEL = _SLANEY_MIN_LOG_HZ / _SLANEY_F_SP     # = 15
_SLANEY_LOGSTEP = math.log(6.4) / 27.0


def hz_to_mel(f, scale: str = "htk"):
    """Hz -> mel. 'htk': 2595 log10(1 + f/700). 'slaney': linear (f / (200/3)) below 1 kHz, then
    logarithmic with 27 mels per factor 6.4 (the Auditory Toolbox scale used by librosa's default)."""
    f = np.asarray(f, dtype=np.float64)
    if scale == "htk":
        return 2595.0 * np.log10(1.0 + f / 700.0)
    if scale == "slaney":
        lin = f / _SLANEY_F_SP
        log = _SLANEY_MIN_LOG_MEL + np.log(np.maximum(f, 1e-300) / _SLANEY_MIN_LOG_HZ) / _SLANEY_LOGSTEP
        return np.where(f >= _SLANEY_MIN_LOG_HZ, log, lin)
    raise ValueError(f"mel scale must be 'htk' or 'slaney', got {scale!r}")


def mel_to_hz(m, scale: str = "htk"):
    m = np.asarray(m, dtype=np.float64)
    if scale == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    if scale == "slaney":
        lin = m * _SLANEY_F_SP
        log = _SLANEY_MIN_LOG_HZ * np.exp(_SLANEY_LOGSTEP * (m - _SLANEY_MIN_LOG_MEL))
        return np.where(m >= _SLANEY_MIN_LOG_MEL, log, lin)
    raise ValueError(f"mel scale must be 'htk' or 'slaney', got {scale!r}")


def mel_filterbank(n_freqs: int, sample_rate: float, n_mels: int, f_min: float = 0.0, f_max: float | None = None,
                   scale: str = "htk", norm: str | None = None) -> np.ndarray:
    """[n_mels, n_freqs] triangular filters over the STFT bin frequencies linspace(0, sr/2, n_freqs).

    Filter m rises linearly (in Hz) from edge m to edge m+1 and falls to edge m+2, the n_mels + 2
    edges equally spaced on the mel scale between f_min and f_max. norm='slaney' scales filter m by
    2 / (edge[m+2] - edge[m]) (unit area in Hz)."""
    f_max = sample_rate / 2.0 if f_max is None else float(f_max)
    freqs = np.linspace(0.0, sample_rate / 2.0, n_freqs)
    edges = mel_to_hz(np.linspace(hz_to_mel(f_min, scale), hz_to_mel(f_max, scale), n_mels + 2), scale)
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rise = (freqs[None, :] - lower) / (centre - lower)
    fall = (upper - freqs[None, :]) / (upper - centre)
    fb = np.maximum(0.0, np.minimum(rise, fall))
    if norm == "slaney":
        fb = fb * (2.0 / (edges[2:] - edges[:-2]))[:, None]
    elif norm is not None:
        raise ValueError(f"norm must be None or 'slaney', got {norm!r}")
    return fb
