"""Spectral front ends without FFTs or complex tensors: STFT, iSTFT and log-mel as convolutions.

The wall (symptom `fft`): `torch.stft` / `torch.istft` and complex views have no lowering
('Lowering not found: aten._fft_r2c' / 'aten.complex'), so the conversion fails before any GPU
check. A DFT of a fixed length is a fixed linear map, so:

  * `ConvSTFT`  -- the windowed cos / -sin basis as the kernels of one Conv1d with stride = hop.
    `center=True` pads n_fft // 2 samples on each side, reflect or constant. Reflect padding is
    built from slices, an exchange-matrix matmul and a concatenation -- never F.pad(mode="reflect"),
    which lowers to GATHER_ND. Output: real and imaginary parts as channels [B, 2F, frames]
    (F = n_fft // 2 + 1 when onesided), or magnitude / power [B, F, frames].
  * `ConvISTFT` -- the inverse real DFT, the synthesis window and the overlap-add are one
    ConvTranspose1d (stride hop), emitted in polyphase form -- one ordinary stride-1 conv plus an
    interleave, via the toolkit's `PolyphaseConvT1d` or an equivalent private fused conv -- so no
    TRANSPOSE_CONV reaches the graph; then the trim of the centre padding and the division by the
    window envelope sum_t w^2(n - t*hop) as a constant multiply.
  * `LogMel`    -- ConvSTFT (power or magnitude) -> mel matrix as a 1x1 conv -> log, clamped in the
    log domain (fp16 cannot hold a clamp such as 1e-10).
    `mel_filterbank` builds HTK or Slaney mel scales (optionally Slaney area normalisation).

Exactness: the bases are computed in float64 (angles reduced mod n_fft) and rounded once to
fp32; in torch fp32 the outputs agree with torch.stft / torch.istft to fp32 rounding of a
length-n_fft dot product (tests: max error <= 2e-5 of the largest magnitude, and the round trip
ConvISTFT(ConvSTFT(x)) == x to ~1e-5).

fp16 caveats (the GPU computes in fp16, max 65504): power = re^2 + im^2 overflows once |X| > 256,
which a loud tone reaches for n_fft >= 1024 (|X| <= sum(window) * max|x|). `prescale` divides the
basis by a constant and puts it back after the square root (magnitude), after the square (power,
whose value then must itself fit fp16) or in the log domain (LogMel: + 2*log(prescale), exact),
trading the smallest representable magnitudes for headroom. A converted spectrogram stack must be
checked numerically end to end on the GPU (corr against torch on real audio), not just for
residency: a library STFT-as-conv stack has converted with correlation 0.83 while every op ran.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["make_window", "stft_basis", "istft_synthesis", "window_envelope", "hz_to_mel", "mel_to_hz",
           "mel_filterbank", "reflect_pad_1d", "ConvSTFT", "ConvISTFT", "LogMel", "split_complex"]


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


# ---------------------------------------------------------------------------------------------
# GPU-clean building blocks
# ---------------------------------------------------------------------------------------------

def _exchange(p: int) -> torch.Tensor:
    return torch.flip(torch.eye(p), (0,))


def reflect_pad_1d(x: torch.Tensor, pad: int, exchange: torch.Tensor | None = None) -> torch.Tensor:
    """Reflect-pad the last axis of x by `pad` on both sides (as F.pad(mode='reflect')), GPU-clean:
    two slices reversed by a matmul with the pad x pad exchange matrix (0/1 entries, so exact in
    any precision), then one concatenation. Needs pad < x.shape[-1]."""
    if pad == 0:
        return x
    length = int(x.shape[-1])
    if pad >= length:
        raise ValueError(f"reflect padding {pad} needs more than {pad} samples, got {length}")
    j = _exchange(pad) if exchange is None else exchange
    left = torch.matmul(x[..., 1:pad + 1], j)
    right = torch.matmul(x[..., length - pad - 1:length - 1], j)
    return torch.cat([left, x, right], dim=-1)


def _zero_pad_1d(x: torch.Tensor, left: int, right: int) -> torch.Tensor:
    """Constant-zero padding of the last axis by concatenation (no PAD op)."""
    parts = []
    if left:
        parts.append(torch.zeros(*x.shape[:-1], left, dtype=x.dtype))
    parts.append(x)
    if right:
        parts.append(torch.zeros(*x.shape[:-1], right, dtype=x.dtype))
    return torch.cat(parts, dim=-1) if len(parts) > 1 else x


def split_complex(spec: torch.Tensor) -> torch.Tensor:
    """[B, 2F, T] real/imag channels -> complex [B, F, T] (host-side / tests; not for export)."""
    f = spec.shape[-2] // 2
    return torch.complex(spec[..., :f, :], spec[..., f:, :])


# ---------------------------------------------------------------------------------------------
# modules
# ---------------------------------------------------------------------------------------------

class ConvSTFT(nn.Module):
    """torch.stft as one strided Conv1d. Input [B, T] (or [T]); output by `output`:
    'complex' -> [B, 2F, frames] (Re then Im), 'magnitude' / 'power' -> [B, F, frames].

    Matches torch.stft(x, n_fft, hop_length, win_length, window, center, pad_mode, normalized,
    onesided, return_complex=True) for pad_mode 'reflect' or 'constant'. See the module docstring for
    `prescale` (fp16 headroom; 1 = exact torch semantics)."""

    def __init__(self, n_fft: int, hop_length: int | None = None, win_length: int | None = None, window="hann",
                 center: bool = True, pad_mode: str = "reflect", normalized: bool = False, onesided: bool = True,
                 output: str = "complex", prescale: float = 1.0):
        super().__init__()
        if output not in ("complex", "magnitude", "power"):
            raise ValueError(f"output must be 'complex', 'magnitude' or 'power', got {output!r}")
        if pad_mode not in ("reflect", "constant"):
            raise NotImplementedError(f"pad_mode {pad_mode!r}: only 'reflect' and 'constant'")
        self.n_fft = int(n_fft)
        self.hop = int(hop_length) if hop_length else self.n_fft // 4
        self.win_length = int(win_length) if win_length else self.n_fft
        self.center, self.pad_mode, self.output = center, pad_mode, output
        self.prescale = float(prescale)
        self.window = make_window(window, self.win_length, self.n_fft)
        basis = stft_basis(self.n_fft, self.window, onesided, normalized) / self.prescale
        self.n_freqs = basis.shape[0] // 2
        self.register_buffer("basis", torch.from_numpy(basis).float().unsqueeze(1), persistent=False)
        pad = self.n_fft // 2
        self.register_buffer("exchange", _exchange(pad) if center and pad_mode == "reflect" and pad else
                             torch.zeros(0), persistent=False)

    def frames_for(self, n_samples: int) -> int:
        padded = n_samples + (2 * (self.n_fft // 2) if self.center else 0)
        return 1 + (padded - self.n_fft) // self.hop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 1:
            x = x.unsqueeze(0)
        x = x.unsqueeze(1)                                      # [B, 1, T]
        if self.center:
            pad = self.n_fft // 2
            if self.pad_mode == "reflect":
                x = reflect_pad_1d(x, pad, self.exchange)
            else:
                x = _zero_pad_1d(x, pad, pad)
        spec = F.conv1d(x, self.basis, stride=self.hop)        # [B, 2F, frames]
        if self.output == "complex":
            return spec * self.prescale if self.prescale != 1.0 else spec
        re, im = spec[:, :self.n_freqs], spec[:, self.n_freqs:]
        power = re * re + im * im
        if self.output == "power":
            return power * (self.prescale ** 2) if self.prescale != 1.0 else power
        mag = torch.sqrt(power)
        return mag * self.prescale if self.prescale != 1.0 else mag


class ConvISTFT(nn.Module):
    """torch.istft of a [B, 2F, frames] real/imag spectrogram (ConvSTFT's 'complex' layout) -> [B, T].

    The windowed inverse DFT plus overlap-add is exactly one ConvTranspose1d (2F -> 1 channel,
    kernel n_fft, stride hop, weight = the synthesis rows). It is emitted without TRANSPOSE_CONV:
      * overlap_add="polyphase" (default): that ConvTranspose1d rewritten by the toolkit's
        `PolyphaseConvT1d` (rewrites/conv_transpose.py): one stride-1 conv computing all hop output
        phases + an interleave;
      * overlap_add="fused": the same polyphase conv written out here -- kernel R = ceil(n_fft / hop)
        frames, hop output channels, each output block of hop samples the sum over the R frames
        that overlap it -- then a transpose / reshape to samples.
    ("polyphase" falls back to "fused" where rewrites/conv_transpose.py is absent: same sums.)
    Then the centre trim and a multiply by 1 / envelope (a constant for the traced frame count).
    Matches torch.istft(spec, n_fft, hop_length, win_length, window, center, normalized, onesided,
    length); raises like torch.istft when the window overlap-add is zero somewhere (NOLA)."""

    def __init__(self, n_fft: int, hop_length: int | None = None, win_length: int | None = None, window="hann",
                 center: bool = True, normalized: bool = False, onesided: bool = True, length: int | None = None,
                 overlap_add: str = "polyphase"):
        super().__init__()
        if overlap_add not in ("polyphase", "fused"):
            raise ValueError(f"overlap_add must be 'polyphase' or 'fused', got {overlap_add!r}")
        self.n_fft = int(n_fft)
        self.hop = int(hop_length) if hop_length else self.n_fft // 4
        self.win_length = int(win_length) if win_length else self.n_fft
        self.center, self.length, self.overlap_add = center, length, overlap_add
        self.window = make_window(window, self.win_length, self.n_fft)
        synth = istft_synthesis(self.n_fft, self.window, onesided, normalized)       # [2F, n_fft]
        self.taps = -(-self.n_fft // self.hop)                                       # R
        if overlap_add == "polyphase":
            try:
                from .conv_transpose import PolyphaseConvT1d
            except ImportError:                     # a vendored copy without conv_transpose.py
                overlap_add = self.overlap_add = "fused"
        if overlap_add == "polyphase":
            ct = nn.ConvTranspose1d(synth.shape[0], 1, self.n_fft, stride=self.hop, bias=False)
            with torch.no_grad():
                ct.weight.copy_(torch.from_numpy(synth).float().unsqueeze(1))
            ct.weight.requires_grad_(False)
            self.ola = PolyphaseConvT1d.from_conv_transpose(ct)
        else:
            padded = np.zeros((synth.shape[0], self.taps * self.hop))
            padded[:, :self.n_fft] = synth
            # weight[j, c, k]: block m, sample j takes frame m - (R-1-k) at row (R-1-k)*hop + j
            w = padded.reshape(synth.shape[0], self.taps, self.hop)[:, ::-1, :]      # [2F, R, hop], reversed
            self.register_buffer("weight", torch.from_numpy(np.ascontiguousarray(w.transpose(2, 0, 1))).float(),
                                 persistent=False)                                   # [hop, 2F, R]

    def _inverse_envelope(self, n_frames: int) -> tuple[torch.Tensor, int, int]:
        """1 / envelope over the kept samples [start, end) (0 past the signal's end, as torch.istft
        pads zeros there), checking the NOLA condition like torch.istft does."""
        env = window_envelope(self.window, self.hop, n_frames)
        expected = len(env)
        start = self.n_fft // 2 if self.center else 0
        if self.length is not None:
            end = start + self.length
        else:
            end = expected - (self.n_fft // 2 if self.center else 0)
        kept = env[start:min(end, expected)]
        if kept.size and np.abs(kept).min() < 1e-11:
            raise ValueError("the window overlap-add is zero somewhere (NOLA fails): choose another window or hop")
        inv = np.zeros(end - start)
        inv[:kept.size] = 1.0 / kept
        return torch.from_numpy(inv).float(), start, end

    def forward(self, spec: torch.Tensor) -> torch.Tensor:
        if spec.dim() == 2:
            spec = spec.unsqueeze(0)
        n_frames = int(spec.shape[-1])
        if self.overlap_add == "polyphase":
            y = self.ola(spec)[:, 0]                            # [B, n_fft + hop * (frames - 1)]
        else:
            r = self.taps
            if r > 1:
                spec = _zero_pad_1d(spec, r - 1, r - 1)
            blocks = F.conv1d(spec, self.weight)                # [B, hop, frames + R - 1]
            y = blocks.transpose(1, 2).reshape(blocks.shape[0], -1)
        inv, start, end = self._inverse_envelope(n_frames)
        total = int(y.shape[-1])
        if end > total:
            y = _zero_pad_1d(y, 0, end - total)
        return y[:, start:end] * inv


class LogMel(nn.Module):
    """log(max(mel @ |STFT|^power, clamp_min)) as ConvSTFT -> mel matrix (1x1 conv) -> LOG -> MAXIMUM.

    Input [B, T] -> [B, n_mels, frames]. `log` is 'ln' or 'log10'. `mel_scale` 'htk' / 'slaney',
    `norm` None / 'slaney'. The clamp is applied in the log domain (`clamp_in_log=True`):
    max(log(mel), log(clamp_min)), equal to log(max(mel, clamp_min)) because log is monotonic. That
    matters in fp16, where a clamp_min such as 1e-10 is not representable (it rounds to 0): on
    silence the plain form returns log(0) = -inf on the GPU (measured on llvmpipe), the log-domain
    form returns log(clamp_min). Mel values below fp16's smallest subnormal (6e-8) then read as the
    clamp. `prescale` computes the spectrum on x / prescale and adds power * log(prescale) after the
    log (exact; moves the fp16 overflow point of the power spectrum up by prescale)."""

    def __init__(self, sample_rate: int, n_fft: int, hop_length: int | None = None, win_length: int | None = None,
                 window="hann", n_mels: int = 80, f_min: float = 0.0, f_max: float | None = None,
                 power: float = 2.0, mel_scale: str = "htk", norm: str | None = None, center: bool = True,
                 pad_mode: str = "reflect", clamp_min: float = 1e-10, log: str = "ln", prescale: float = 1.0,
                 clamp_in_log: bool = True):
        super().__init__()
        if power not in (1.0, 2.0):
            raise ValueError("power must be 1 (magnitude) or 2 (power)")
        if log not in ("ln", "log10"):
            raise ValueError("log must be 'ln' or 'log10'")
        self.power = float(power)
        self.stft = ConvSTFT(n_fft, hop_length, win_length, window, center, pad_mode,
                             output="power" if power == 2.0 else "magnitude")
        self.stft.basis = self.stft.basis / prescale           # keep the scaled-domain spectrum
        self.offset = self.power * math.log(prescale)
        self.clamp_scaled = clamp_min / prescale ** self.power
        self.log_clamp = math.log(self.clamp_scaled)
        self.clamp_in_log = clamp_in_log
        fb = mel_filterbank(self.stft.n_freqs, sample_rate, n_mels, f_min, f_max, mel_scale, norm)
        self.register_buffer("mel", torch.from_numpy(fb).float().unsqueeze(-1), persistent=False)  # [M, F, 1]
        self.log_scale = 1.0 / math.log(10.0) if log == "log10" else 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spec = self.stft(x)                                     # [B, F, frames], scaled domain
        mel = F.conv1d(spec, self.mel)                          # [B, n_mels, frames]
        if self.clamp_in_log:
            out = torch.clamp(torch.log(mel), min=self.log_clamp)
        else:
            out = torch.log(torch.clamp(mel, min=self.clamp_scaled))
        if self.offset:
            out = out + self.offset
        if self.log_scale != 1.0:
            out = out * self.log_scale
        return out
