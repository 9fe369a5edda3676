"""FCPE (fast context-based pitch estimation), its real weights, its log-mel front end and its decoder.

The weights are `assets/fcpe_c_v001.pt` inside the PyPI wheel `torchfcpe==0.0.4` (MIT). That package imports
torchaudio at import time, which does not install beside this project's torch, so it is never imported: the file
is found with `importlib.util.find_spec` and read with `torch.load(weights_only=True)` (it holds only tensors, plain
numbers and the training config as nested dicts, so no pickle code runs). The network is written out here from
the checkpoint's config: `conv_only=True`, so each of the 6 encoder layers is a residual convolution module
(LayerNorm, 1x1 conv to 2x width, GLU, depthwise Conv1d k=31, SiLU, 1x1 conv) and the attention weights are absent.
The output projection is weight-normed in the checkpoint (`weight_g`, `weight_v`); it is folded on load.

Two front ends compute the same 128-bin log-mel (16 kHz, n_fft = win = 1024, hop 160, Slaney mel 0-8 kHz):
  * `reference_mel`  -- torchfcpe's own recipe in torch: reflect-pad (win - hop) / 2 per side, torch.stft without
                        centring, sqrt(re^2 + im^2 + 1e-9), mel matmul, log(max(mel, 1e-5)), the last frame repeated
                        so there are samples // hop + 1 frames. This is the source model's path.
  * `ConvMel`        -- the same map built from the toolkit's exact conv STFT (`rewrites.fft.ConvSTFT`), so the
                        whole pipeline, waveform in, runs on the GPU (no FFT op exists there).

`PitchGraph` (waveform [1, N] -> pitch salience [1, N // hop + 1, 360]) is what is exported; decoding the salience
to Hz (torchfcpe's 'local argmax': a weighted mean of the cents of the 9 bins around the peak, unvoiced when the
peak is at or below the threshold) runs on the host, identically for torch and the device (`decode`).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from litert_gpu_toolkit.core import weights
from litert_gpu_toolkit.core.weights import fold_weight_norm
from litert_gpu_toolkit.rewrites.fft import ConvSTFT, mel_filterbank
from litert_gpu_toolkit.rewrites.gather_nd.reflect_pad import exchange_matrix, reflect_pad_exchange

INSTALL = "pip install --no-deps torchfcpe==0.0.4"
CLIP = 1e-5                 # the log-mel floor (torchfcpe's clip_val)
THRESHOLD = 0.006           # torchfcpe's default voicing threshold on the peak salience
PRESCALE = 4.0              # |X| of a full-scale tone reaches sum(hann) = 512; /4 keeps re^2 + im^2 under fp16's max


def checkpoint_path(weights_arg: str | None = None) -> Path:
    """`--weights`: None = the torchfcpe wheel's bundled checkpoint, else a path to an FCPE .pt checkpoint."""
    if weights_arg:
        path = Path(weights_arg)
        if not path.is_file():
            raise weights.WeightsError(f"{weights_arg!r} is not a checkpoint file")
        return path
    return weights.package_dir("torchfcpe", "assets", "fcpe_c_v001.pt", install=INSTALL)


def load_checkpoint(weights_arg: str | None = None) -> tuple[dict, dict]:
    """(config, state dict) of the checkpoint, read without running any pickled code."""
    ckpt = torch.load(checkpoint_path(weights_arg), map_location="cpu", weights_only=True)
    return ckpt["config_dict"], ckpt["model"]



# ----------------------------------------------------------------------------------------------------------------
# the network: log-mel [B, T, 128] -> pitch salience [B, T, 360] in (0, 1)

class ConvModule(nn.Module):
    """One conformer convolution module (no attention in this checkpoint), used with a residual around it."""

    def __init__(self, dim: int, kernel: int = 31, expansion: int = 2):
        super().__init__()
        inner = dim * expansion
        self.norm = nn.LayerNorm(dim)
        self.pointwise_in = nn.Conv1d(dim, 2 * inner, 1)
        self.glu = nn.GLU(dim=1)
        self.depthwise = nn.Conv1d(inner, inner, kernel, padding=kernel // 2, groups=inner)
        self.pointwise_out = nn.Conv1d(inner, dim, 1)

    def forward(self, x):                       # [B, T, C]
        y = self.norm(x).transpose(1, 2)
        y = self.glu(self.pointwise_in(y))
        y = self.pointwise_out(F.silu(self.depthwise(y)))
        return y.transpose(1, 2)


class FCPE(nn.Module):
    def __init__(self, n_mels: int = 128, hidden: int = 512, layers: int = 6, out_dims: int = 360,
                 f0_min: float = 32.7, f0_max: float = 1975.5):
        super().__init__()
        self.input_stack = nn.Sequential(nn.Conv1d(n_mels, hidden, 3, padding=1), nn.GroupNorm(4, hidden),
                                         nn.LeakyReLU(), nn.Conv1d(hidden, hidden, 3, padding=1))
        self.layers = nn.ModuleList(ConvModule(hidden) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.output_proj = nn.Linear(hidden, out_dims)
        self.f0_min, self.f0_max = f0_min, f0_max
        # bin i's pitch in cents above 10 Hz; float32 linspace as the source builds it (the decoder reads it)
        self.register_buffer("cent_table", torch.linspace(cents(f0_min), cents(f0_max), out_dims), persistent=False)

    def forward(self, mel):                     # [B, T, n_mels]
        x = self.input_stack(mel.transpose(1, 2)).transpose(1, 2)
        for layer in self.layers:
            x = x + layer(x)
        return torch.sigmoid(self.output_proj(self.norm(x)))


def cents(f0_hz: float) -> float:
    return 1200.0 * math.log2(f0_hz / 10.0)


# the checkpoint's key names -> this module's (the source nests the conv module in an nn.Sequential)
_RENAMES = {"conformer.net.0.": "norm.", "conformer.net.2.": "pointwise_in.", "conformer.net.4.conv.": "depthwise.",
            "conformer.net.6.": "pointwise_out."}


def load_model(weights_arg: str | None = None) -> tuple[FCPE, dict]:
    """The real network in eval mode (fp32, weight norm folded) and the checkpoint's config."""
    config, state = load_checkpoint(weights_arg)
    m = config["model"]
    if not m.get("conv_only"):
        raise weights.WeightsError("this recipe covers the conv-only FCPE checkpoints (config model.conv_only)")
    model = FCPE(config["mel"]["num_mels"], m["hidden_dims"], m["n_layers"], m["out_dims"], m["f0_min"], m["f0_max"])
    renamed = {}
    for key, value in fold_weight_norm(state).items():
        if key in ("cent_table", "gaussian_blurred_cent_mask") or (".norm." in key and key.startswith("net.")):
            continue                            # buffers rebuilt above; per-layer attention norms unused (conv_only)
        key = key.replace("net.encoder_layers.", "layers.")
        for old, new in _RENAMES.items():
            key = key.replace(old, new)
        renamed[key] = value
    model.load_state_dict(renamed, strict=True)
    if not torch.allclose(model.cent_table, state["cent_table"]):
        raise weights.WeightsError("the checkpoint's cent table differs from the one its config describes")
    return model.eval(), config


# ----------------------------------------------------------------------------------------------------------------
# log-mel front ends

def mel_basis(mel_cfg: dict) -> np.ndarray:
    return mel_filterbank(mel_cfg["n_fft"] // 2 + 1, mel_cfg["sr"], mel_cfg["num_mels"], mel_cfg["fmin"],
                          mel_cfg["fmax"], scale="slaney", norm="slaney").astype(np.float32)


def n_frames(n_samples: int, hop: int) -> int:
    return n_samples // hop + 1


def reference_mel(audio: torch.Tensor, mel_cfg: dict) -> torch.Tensor:
    """torchfcpe's log-mel with torch.stft (the source path): [B, N] -> [B, N // hop + 1, n_mels]."""
    n_fft, win, hop = mel_cfg["n_fft"], mel_cfg["win_size"], mel_cfg["hop_size"]
    left, right = (win - hop) // 2, (win - hop + 1) // 2
    y = F.pad(audio.unsqueeze(1), (left, right), mode="reflect").squeeze(1)
    spec = torch.stft(y, n_fft, hop_length=hop, win_length=win, window=torch.hann_window(win), center=False,
                      normalized=False, onesided=True, return_complex=True)
    mag = torch.sqrt(spec.real.pow(2) + spec.imag.pow(2) + 1e-9)
    mel = torch.log(torch.clamp(torch.from_numpy(mel_basis(mel_cfg)) @ mag, min=CLIP)).transpose(1, 2)
    want = n_frames(audio.shape[-1], hop)
    if mel.shape[1] < want:
        mel = torch.cat([mel, mel[:, -1:]], dim=1)
    return mel[:, :want]


class ConvMel(nn.Module):
    """`reference_mel` for a fixed length, GPU-clean: reflect pad from slices and an exchange matmul (no GATHER_ND),
    the toolkit's ConvSTFT power spectrum of audio / prescale (a full-scale tone's re^2 + im^2 would pass fp16's
    65504; the epsilon is scaled alike, so sqrt(...) * prescale is the source's magnitude exactly), the mel matrix
    as a 1x1 conv, the 1e-5 floor applied in the log domain (max(log mel, log 1e-5): the same value, and fp16 has
    no normal number as small as 1e-5)."""

    def __init__(self, mel_cfg: dict, prescale: float = PRESCALE):
        super().__init__()
        n_fft, win, hop = mel_cfg["n_fft"], mel_cfg["win_size"], mel_cfg["hop_size"]
        self.left, self.right, self.hop = (win - hop) // 2, (win - hop + 1) // 2, hop
        self.stft = ConvSTFT(n_fft, hop, win, "hann", center=False, output="power")
        self.prescale = float(prescale)
        # built once as a buffer: made inside forward it would be traced as an arange the converter cannot lower
        self.register_buffer("exchange", exchange_matrix(self.left), persistent=False)
        self.register_buffer("mel", torch.from_numpy(mel_basis(mel_cfg)).unsqueeze(-1), persistent=False)
        self.log_floor = math.log(CLIP)

    def forward(self, audio):                   # [B, N]
        x = reflect_pad_exchange(audio.unsqueeze(1), self.left, self.right, self.exchange)
        power = self.stft(x[:, 0] * (1.0 / self.prescale))             # [B, F, frames]
        spec = torch.sqrt(power + 1e-9 / self.prescale ** 2) * self.prescale
        mel = torch.clamp(torch.log(F.conv1d(spec, self.mel)), min=self.log_floor).transpose(1, 2)
        want = n_frames(audio.shape[-1], self.hop)
        if mel.shape[1] < want:
            mel = torch.cat([mel, mel[:, -1:]], dim=1)
        return mel[:, :want]


class PitchGraph(nn.Module):
    """The exported graph: waveform [1, N] at 16 kHz -> pitch salience [1, N // 160 + 1, 360]."""

    def __init__(self, model: FCPE, mel_cfg: dict, prescale: float = PRESCALE):
        super().__init__()
        self.mel, self.model = ConvMel(mel_cfg, prescale), model

    def forward(self, audio):
        return self.model(self.mel(audio))


def reference_salience(model: FCPE, audio: np.ndarray, mel_cfg: dict) -> np.ndarray:
    """The source model end to end in torch (torch.stft front end): [N] -> [T, 360]."""
    with torch.no_grad():
        return model(reference_mel(torch.from_numpy(audio)[None].float(), mel_cfg))[0].numpy()


# ----------------------------------------------------------------------------------------------------------------
# decoding (host side, numpy; the same for every source of salience)

def decode(salience: np.ndarray, cent_table: np.ndarray, threshold: float = THRESHOLD,
           f0_min: float = 32.7) -> tuple[np.ndarray, np.ndarray]:
    """[T, 360] salience -> (f0 in Hz [T], voiced [T] bool), torchfcpe's 'local argmax' decoder: the salience-
    weighted mean cents of the 9 bins centred on the peak (clipped at the table's ends); a frame whose peak is at
    or below `threshold` is unvoiced (f0 0), as is one decoded below f0_min."""
    s = np.asarray(salience, np.float64)
    peak = s.argmax(axis=-1)
    idx = np.clip(peak[:, None] + np.arange(-4, 5)[None, :], 0, s.shape[-1] - 1)
    w = np.take_along_axis(s, idx, axis=-1)
    # an all-zero neighbourhood (fp16 salience can underflow to 0) has no pitch; it is unvoiced below anyway
    c = (cent_table.astype(np.float64)[idx] * w).sum(-1) / np.maximum(w.sum(-1), 1e-30)
    f0 = 10.0 * 2.0 ** (c / 1200.0)
    voiced = (s.max(axis=-1) > threshold) & (f0 >= f0_min)
    return np.where(voiced, f0, 0.0), voiced


def cents_error(f0_a: np.ndarray, f0_b: np.ndarray, both_voiced: np.ndarray) -> np.ndarray:
    """|1200 log2(a / b)| over the frames voiced in both."""
    return np.abs(1200.0 * np.log2(f0_a[both_voiced] / f0_b[both_voiced]))
