"""ConvSTFT / ConvISTFT / LogMel: torch.stft and friends as convolutions (no FFT op on the GPU).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from ..shared import exchange_matrix, reflect_pad_exchange
from .basis import istft_synthesis, make_window, mel_filterbank, stft_basis, window_envelope


# ---------------------------------------------------------------------------------------------
# GPU-clean building blocks
# ---------------------------------------------------------------------------------------------

def _exchange(p: int) -> torch.Tensor:
    return exchange_matrix(p)


def reflect_pad_1d(x: torch.Tensor, pad: int, exchange: torch.Tensor | None = None) -> torch.Tensor:
    """Reflect-pad the last axis of x by `pad` on both sides (as F.pad(mode='reflect')), GPU-clean: the
    exchange-matrix form of `gather_nd.reflect_pad.reflect_pad_exchange`. Needs pad < x.shape[-1]."""
    if pad == 0:
        return x
    return reflect_pad_exchange(x, pad, pad, exchange)


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
        `PolyphaseConvT1d` (rewrites/transpose_conv/): one stride-1 conv computing all hop output
        phases + an interleave;
      * overlap_add="fused": the same polyphase conv written out here -- kernel R = ceil(n_fft / hop)
        frames, hop output channels, each output block of hop samples the sum over the R frames
        that overlap it -- then a transpose / reshape to samples.
    ("polyphase" falls back to "fused" where rewrites/transpose_conv/ is absent: same sums.)
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
                from ..transpose_conv.polyphase import PolyphaseConvT1d
            except ImportError:                     # a vendored copy without transpose_conv/
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


# fp16 range of a scaled power spectrum: its largest DFT component becomes SPECTRUM_PEAK (2^7), so a power
# re^2 + im^2 is at most 2 * 128^2 = 32768, and the mel sums are kept at or below FP16_HALF_RANGE.
SPECTRUM_PEAK = 128.0
FP16_HALF_RANGE = 32768.0


def mel_power_of_two_shift(mel_weights: np.ndarray, power: float = 2.0, peak: float = SPECTRUM_PEAK) -> float:
    """The largest power of two 2^k such that mel_weights * 2^k applied to a spectrum whose largest
    component is `peak` stays within FP16_HALF_RANGE. `mel_weights` is [n_mels, n_freqs]. Multiplying
    constant weights by 2^k is exact in floating point; it lifts quiet mel sums out of fp16's subnormal
    range (< 6.1e-5)."""
    filter_sum = np.abs(np.asarray(mel_weights, dtype=np.float64)).sum(axis=1).max()
    largest = (2.0 * peak * peak if power == 2.0 else math.sqrt(2.0) * peak) * filter_sum
    return float(2.0 ** math.floor(math.log2(FP16_HALF_RANGE / largest)))


def peak_scaled_log_mel(spec: torch.Tensor, mel: torch.Tensor, log_shift: float, power: float = 2.0,
                        log_floor: float = math.log(1e-10), peak: float = SPECTRUM_PEAK,
                        r_floor: float = 1e-4) -> torch.Tensor:
    """ln(max(mel_true, exp(log_floor))) from a complex spectrum [B, 2F, T] (real rows, then imaginary),
    computed so that every intermediate stays a normal fp16 number whatever the input's level.

    The spectrum is divided by r / peak, r = its largest |component| in the example (at least r_floor, so
    silence stays finite); `mel` is a [M, F, 1] conv kernel holding the mel weights times a power of two
    2^k (`mel_power_of_two_shift`); log_shift = ln(peak^power * 2^k). Both scales come back out after the
    log as power * ln(r) - log_shift. Exact in real arithmetic; in fp32 the result differs from the
    unscaled form by the rounding of one division and of the log's sum (a few ulp of the log). In fp16 a
    quiet bin keeps its precision: unscaled, a bin 40 dB under a -40 dBFS signal's peak is already below
    fp16's normal range, where a GPU may flush it to zero."""
    r = torch.clamp(spec.abs().amax(dim=(1, 2), keepdim=True), min=r_floor)
    spec = spec / (r / peak)                                    # r / 2^7 is exact
    bins = spec.shape[1] // 2
    re, im = spec[:, :bins], spec[:, bins:]
    energy = re * re + im * im
    if power != 2.0:
        energy = torch.sqrt(energy)
    scaled = F.conv1d(energy, mel)                              # [B, M, T], times (peak / r)^power * 2^k
    return torch.clamp(torch.log(scaled) + (power * torch.log(r) - log_shift), min=log_floor)


class LogMel(nn.Module):
    """log(max(mel @ |STFT|^power, clamp_min)) as ConvSTFT -> mel matrix (1x1 conv) -> LOG -> MAXIMUM.

    Input [B, T] -> [B, n_mels, frames]. `log` is 'ln' or 'log10'. `mel_scale` 'htk' / 'slaney',
    `norm` None / 'slaney'. The clamp is applied in the log domain (`clamp_in_log=True`):
    max(log(mel), log(clamp_min)), equal to log(max(mel, clamp_min)) because log is monotonic. That
    matters in fp16, where a clamp_min such as 1e-10 is not representable (it rounds to 0): on
    silence the plain form returns log(0) = -inf on the GPU (measured on llvmpipe), the log-domain
    form returns log(clamp_min). Mel values below fp16's smallest subnormal (6e-8) then read as the
    clamp. `prescale` computes the spectrum on x / prescale and adds power * log(prescale) after the
    log (exact; moves the fp16 overflow point of the power spectrum up by prescale).

    `scale='peak'` fits the whole level range, loud and quiet, into fp16 at run time instead: each
    example's spectrum is scaled so its largest component is SPECTRUM_PEAK and the mel weights carry a
    power of two (`peak_scaled_log_mel`; exact in real arithmetic, a few ulp of the log in fp32). Use it
    when the input's level is not known: a fixed prescale trades quiet bins for headroom, the peak form
    needs neither (measured on llvmpipe: a -40 dBFS signal loses its quiet bins in the plain form)."""

    def __init__(self, sample_rate: int, n_fft: int, hop_length: int | None = None, win_length: int | None = None,  # noqa: PLR0913 - torchaudio's mel options
                 window="hann", n_mels: int = 80, f_min: float = 0.0, f_max: float | None = None,
                 power: float = 2.0, mel_scale: str = "htk", norm: str | None = None, center: bool = True,
                 pad_mode: str = "reflect", clamp_min: float = 1e-10, log: str = "ln", prescale: float = 1.0,
                 clamp_in_log: bool = True, scale: str = "fixed"):
        super().__init__()
        if scale not in ("fixed", "peak"):
            raise ValueError("scale must be 'fixed' (prescale) or 'peak' (per-example, see the docstring)")
        if scale == "peak" and (prescale != 1.0 or not clamp_in_log):
            raise ValueError("scale='peak' sets its own scale and clamps in the log domain: leave prescale=1 "
                             "and clamp_in_log=True")
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
        self.scale = scale
        if scale == "peak":
            self.stft.output = "complex"
            shift = mel_power_of_two_shift(fb, self.power)
            fb = fb * shift
            self.log_shift = math.log(SPECTRUM_PEAK ** self.power * shift)
        self.register_buffer("mel", torch.from_numpy(fb).float().unsqueeze(-1), persistent=False)  # [M, F, 1]
        self.log_scale = 1.0 / math.log(10.0) if log == "log10" else 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.scale == "peak":
            out = peak_scaled_log_mel(self.stft(x), self.mel, self.log_shift, self.power, self.log_clamp)
            return out * self.log_scale if self.log_scale != 1.0 else out
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
