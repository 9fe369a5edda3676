"""torch.stft / Tensor.stft / torch.istft called in forward, rewritten to the exact conv forms (rewrite `patch_stft`).

Active inside `GpuRewriteWrapper` (default on). The plain conversion fails ('Lowering not found:
aten._fft_r2c' / 'aten.complex'); the handlers compute

  * stft: (reflect / constant / replicate / circular centre padding, GATHER-free) -> one strided conv1d
    whose kernels are the cos / -sin DFT basis times the window, i.e. `ConvSTFT`'s form. The window is
    a traced tensor under export (its values are unknown), so the kernel is the constant window-free
    basis times the window: a product of constants the converter folds. return_complex=True returns a
    `SplitComplex` (complex.py) -- abs / pow / view_as_real / real / imag / angle / istft are computed
    on the real parts, any other consumer falls back to a true complex tensor (and fails to convert as
    before); return_complex=False returns the real [..., 2] view directly.
  * istft of a SplitComplex (from stft, torch.complex, torch.polar or torch.view_as_complex, which
    are rewritten too): the inverse real DFT, synthesis window and overlap-add as one transposed conv
    emitted in polyphase form (`transpose_conv.conv_transpose_polyphase`, no TRANSPOSE_CONV), then the
    centre trim and the division by the window envelope sum_t w^2(n - t hop), itself computed the same
    way from the window (constants, folded).

Exact: same sums as the DFT in another order; bound (tests) max error <= 2e-5 of the largest magnitude
(stft) and <= 2e-5 absolute on unit-scale signals (istft). NotImplemented (the original op runs) for
complex or non-float inputs, a window that is not a 1-D real tensor of length win_length, align_to_window,
istft(return_complex=True), and a reflect pad wider than the signal. The NOLA check of torch.istft
can be done only when the window's values are known (eager); under export a window whose overlap-add
vanishes gives inf / NaN where torch.istft would raise.

fp16 (the GPU): the handler keeps torch's scale (no `prescale`), so |z|^2 = re^2 + im^2 overflows 65504
once a bin's magnitude passes 256 (reachable for n_fft >= 1024 on loud audio); use `ConvSTFT(prescale=...)`
or `LogMel` explicitly there, and check the spectrogram numerically on the GPU.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..functional import register_handler
from ..shared import pad_by_slices, reflect_pad_exchange
from ..registry import declare
from .basis import istft_synthesis, stft_basis
from . import complex as _complex
from .complex import SplitComplex

NAME = "patch_stft"
declare(NAME, wall="fft")


def _const(a: np.ndarray, dtype) -> torch.Tensor:
    return torch.tensor(np.asarray(a, dtype=np.float64).tolist(), dtype=dtype)


def _full_window(window, win_length: int, n_fft: int, dtype):
    """The window zero-padded (centred) to n_fft as a traced tensor, None for rectangular; NotImplemented if
    the window is not a real 1-D tensor of length win_length."""
    if window is None:
        return None if win_length == n_fft else F.pad(torch.ones(win_length, dtype=dtype),
                                                      ((n_fft - win_length) // 2, n_fft - win_length -
                                                       (n_fft - win_length) // 2))
    if not isinstance(window, torch.Tensor) or window.dim() != 1 or window.shape[0] != win_length or \
            window.is_complex():
        return NotImplemented
    left = (n_fft - win_length) // 2
    w = window.to(dtype)
    return F.pad(w, (left, n_fft - win_length - left)) if win_length != n_fft else w


def _args(n_fft, hop_length, win_length):
    n_fft = int(n_fft)
    hop = int(hop_length) if hop_length else n_fft // 4
    win = int(win_length) if win_length else n_fft
    return n_fft, hop, win


def stft_split(x, n_fft, hop_length=None, win_length=None, window=None, center=True, pad_mode="reflect",  # noqa: PLR0913 - torch.stft's
               normalized=False, onesided=None, return_complex=None, align_to_window=None):
    """torch.stft as a conv1d: SplitComplex [.., F, frames] (return_complex) or real [.., F, frames, 2]."""
    if not isinstance(x, torch.Tensor) or x.dim() not in (1, 2) or not x.is_floating_point() or \
            align_to_window or return_complex is None:
        return NotImplemented                       # torch itself requires return_complex for a real input
    n_fft, hop, win = _args(n_fft, hop_length, win_length)
    if win > n_fft or hop < 1 or pad_mode not in ("reflect", "constant", "replicate", "circular"):
        return NotImplemented
    wfull = _full_window(window, win, n_fft, x.dtype)
    if wfull is NotImplemented:
        return NotImplemented
    onesided = True if onesided is None else bool(onesided)
    batched = x.dim() == 2
    y = (x if batched else x.unsqueeze(0)).unsqueeze(1)                          # [B, 1, T]
    length = int(y.shape[-1])
    if center:
        pad = n_fft // 2
        if pad_mode == "reflect":
            if pad >= length:
                return NotImplemented
            y = reflect_pad_exchange(y, pad, pad, _const(np.eye(pad)[::-1], x.dtype)) if pad else y
        elif pad_mode == "constant":
            y = F.pad(y, (pad, pad))
        else:
            if pad_mode == "circular" and pad > length:
                return NotImplemented
            y = pad_by_slices(y, (pad, pad), pad_mode)
    if int(y.shape[-1]) < n_fft:
        return NotImplemented
    basis = _const(stft_basis(n_fft, np.ones(n_fft), onesided, bool(normalized)), x.dtype)   # [2F, n_fft]
    kernel = basis if wfull is None else basis * wfull[None, :]
    spec = F.conv1d(y, kernel.unsqueeze(1), stride=hop)                        # [B, 2F, frames]
    nf = kernel.shape[0] // 2
    re, im = spec[:, :nf], spec[:, nf:]
    if not batched:
        re, im = re[0], im[0]
    out = SplitComplex(re, im)
    return out if return_complex else out.view_as_real()


def _concrete(t: torch.Tensor) -> np.ndarray | None:
    try:
        return t.detach().cpu().double().numpy()
    except RuntimeError:        # a FakeTensor under torch.export: no values
        return None


def istft_split(z, n_fft, hop_length=None, win_length=None, window=None, center=True, normalized=False,
                onesided=None, length=None, return_complex=False):
    """torch.istft of a SplitComplex [.., F, frames] as polyphase overlap-add + envelope division."""
    if not isinstance(z, SplitComplex) or z.dim() not in (2, 3) or return_complex:
        return NotImplemented
    from ..transpose_conv.functional import conv_transpose_polyphase

    n_fft, hop, win = _args(n_fft, hop_length, win_length)
    dtype = z.re.dtype
    wfull = _full_window(window, win, n_fft, dtype)
    if wfull is NotImplemented or win > n_fft or hop < 1 or hop > n_fft:
        return NotImplemented
    n_freqs = int(z.shape[-2])
    onesided = (n_freqs != n_fft) if onesided is None else bool(onesided)
    if n_freqs != (n_fft // 2 + 1 if onesided else n_fft):
        return NotImplemented                                                   # torch raises
    batched = z.dim() == 3
    re, im = (z.re, z.im) if batched else (z.re[None], z.im[None])
    frames = int(re.shape[-1])
    # one transposed conv computes both the overlap-added frames (output 0, from the 2F spectrum channels)
    # and the window envelope sum_t w^2(n - t hop) (output 1, from an extra all-ones channel): the kernel is
    # constants times the window and its square (folded at conversion), and the conv keeps a runtime input
    # (a conv of constants only would stay in the graph and the GPU declines an op without runtime inputs)
    spec = torch.cat([re, im, torch.ones(re.shape[0], 1, frames, dtype=dtype)], 1)      # [B, 2F + 1, frames]
    synth = istft_synthesis(n_fft, np.ones(n_fft), onesided, bool(normalized))           # [2F, n_fft]
    a = np.zeros((synth.shape[0] + 1, 2, n_fft))
    a[:-1, 0] = synth
    b = np.zeros_like(a)
    b[-1, 1] = 1.0
    w = torch.ones(n_fft, dtype=dtype) if wfull is None else wfull
    weight = _const(a, dtype) * w + _const(b, dtype) * (w * w)                 # ConvTranspose1d [2F + 1, 2, n_fft]
    out = conv_transpose_polyphase(spec, weight, None, hop)                    # [B, 2, n_fft + hop (frames - 1)]
    y, env = out[:, 0], out[:, 1]
    start = n_fft // 2 if center else 0
    total = int(y.shape[-1])
    end = start + int(length) if length is not None else total - (n_fft // 2 if center else 0)
    kept = env[:, start:min(end, total)]
    values = _concrete(kept)
    if values is not None and values.size and np.abs(values).min() < 1e-11:
        return NotImplemented                                                   # NOLA: torch.istft raises
    y = y[:, start:min(end, total)] / kept
    if end > total:
        y = F.pad(y, (0, end - total))
    return y if batched else y[0]


@register_handler(torch.stft, NAME)
@register_handler(torch.Tensor.stft, NAME)
def _stft_handler(input, n_fft, *args, **kwargs):
    return stft_split(input, n_fft, *args, **kwargs)


@register_handler(torch.istft, NAME)
@register_handler(torch.Tensor.istft, NAME)
def _istft_handler(input, n_fft, *args, **kwargs):
    return istft_split(input, n_fft, *args, **kwargs)


@register_handler(torch.complex, NAME)
def _complex_handler(real, imag, *, out=None):
    if out is not None or not (isinstance(real, torch.Tensor) and isinstance(imag, torch.Tensor)):
        return NotImplemented
    re, im = torch.broadcast_tensors(real, imag) if real.shape != imag.shape else (real, imag)
    return SplitComplex(re, im)


@register_handler(torch.polar, NAME)
def _polar_handler(abs, angle, *, out=None):
    if out is not None or not (isinstance(abs, torch.Tensor) and isinstance(angle, torch.Tensor)):
        return NotImplemented
    return SplitComplex(abs * torch.cos(angle), abs * torch.sin(angle))


@register_handler(torch.view_as_complex, NAME)
def _view_as_complex_handler(input):
    if not isinstance(input, torch.Tensor) or input.dim() < 1 or input.shape[-1] != 2:
        return NotImplemented
    return SplitComplex(input[..., 0], input[..., 1])


_complex.ISTFT = istft_split


def patch_stft(model):
    """Wrap `model` so torch.stft / istft in its forward take the exact conv forms (the handlers are functional:
    `GpuRewriteWrapper(model, include=["patch_stft"])`); named here so the symptom table can point at it."""
    from ..functional import GpuRewriteWrapper

    return GpuRewriteWrapper(model, include=[NAME])
