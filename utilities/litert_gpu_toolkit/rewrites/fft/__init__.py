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
    log domain (fp16 cannot hold a clamp such as 1e-10). `scale='peak'` computes it in a scaled
    domain chosen per example (`peak_scaled_log_mel`): the spectrum's largest component is scaled to
    2^7 and the mel weights by a power of two, then both come back out after the log, so loud and quiet
    inputs alike stay within fp16's normal range (exact in real arithmetic; a few ulp of the log in fp32).
    `mel_filterbank` builds HTK or Slaney mel scales (optionally Slaney area normalisation).
  * `patch_stft` (fft/functional.py, default on inside GpuRewriteWrapper): torch.stft / Tensor.stft /
    torch.istft called in forward become these conv forms; complex results are carried as a
    `SplitComplex` (fft/complex.py) whose common consumers (abs, pow, view_as_real, real / imag,
    angle, istft) are computed on the real parts.

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

from .basis import make_window, stft_basis, istft_synthesis, window_envelope, hz_to_mel, mel_to_hz, mel_filterbank
from .modules import (reflect_pad_1d, split_complex, ConvSTFT, ConvISTFT, LogMel, SPECTRUM_PEAK,
                      mel_power_of_two_shift, peak_scaled_log_mel)
from .complex import SplitComplex
from .functional import patch_stft, stft_split, istft_split
