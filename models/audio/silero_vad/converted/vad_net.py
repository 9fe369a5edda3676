"""Silero VAD v6, 16 kHz branch, defined in plain torch, plus the packaged TorchScript model as the reference.

The network (per 512-sample step, 16 kHz):
  [64 context samples | 512 new samples] -> reflect-pad 64 on the right -> conv-STFT (a Conv1d whose 258 kernels
  are the real and imaginary parts of a windowed 256-point DFT, stride 128: 4 frames) -> magnitude of 129 bins ->
  4 x (Conv1d k=3 + ReLU), strides 1, 2, 2, 1 (4 frames -> 1) -> LSTMCell(128) -> ReLU -> Conv1d(128 -> 1) ->
  sigmoid = speech probability of the step.

Parameter names follow the wheel's `silero_vad_16k.safetensors` (stft_conv, conv1..conv4, lstm_cell, final_conv).
The values come from the wheel's TorchScript model (`silero_vad.jit`, the reference): in silero-vad 6.2.3 the
safetensors file holds a different weight set (see ../README.md).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from litert_gpu_toolkit.rewrites.output_aliasing import alias_safe_output
from litert_gpu_toolkit.core import weights
from litert_gpu_toolkit.rewrites.gather_nd.reflect_pad import exchange_matrix, reflect_pad_exchange
from vad_signal import CHUNK, CONTEXT, HIDDEN, SAMPLE_RATE, segments, steps_of  # noqa: F401  (re-exported)


# our name (safetensors layout) -> name inside the TorchScript model's 16 kHz branch
JIT_NAMES = {
    "stft_conv.weight": "stft.forward_basis_buffer",
    **{f"conv{i + 1}.{p}": f"encoder.{i}.reparam_conv.{p}" for i in range(4) for p in ("weight", "bias")},
    **{f"lstm_cell.{p}": f"decoder.rnn.{p}" for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")},
    "final_conv.weight": "decoder.decoder.2.weight",
    "final_conv.bias": "decoder.decoder.2.bias",
}


def package_data() -> Path:
    return weights.package_dir("silero_vad", "data", install="pip install silero-vad==6.2.3")


def load_reference(folder: str | Path | None = None) -> torch.jit.ScriptModule:
    """The wheel's TorchScript model: call it as ref(chunk[1, 512], 16000); it carries context and state itself."""
    ref = torch.jit.load(str(Path(folder or package_data()) / "silero_vad.jit"), map_location="cpu").eval()
    ref.reset_states()
    return ref


def reference_state_dict(ref: torch.jit.ScriptModule | None = None) -> dict[str, torch.Tensor]:
    """The reference's 16 kHz tensors under our names."""
    ref = ref if ref is not None else load_reference()
    tensors = dict(ref._model.state_dict())
    return {ours: tensors[theirs].detach().clone().float() for ours, theirs in JIT_NAMES.items()}


def safetensors_state_dict(folder: str | Path | None = None) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(folder or package_data()) / "silero_vad_16k.safetensors"))


class SileroVad16k(nn.Module):
    """One step: audio [1, 576] (context + chunk), h [1, 128], c [1, 128] -> prob [1, 1], h', c'."""

    def __init__(self):
        super().__init__()
        self.pad = nn.ReflectionPad1d((0, CONTEXT))
        self.stft_conv = nn.Conv1d(1, 258, 256, stride=128, bias=False)
        self.conv1 = nn.Conv1d(129, 128, 3, stride=1, padding=1)
        self.conv2 = nn.Conv1d(128, 64, 3, stride=2, padding=1)
        self.conv3 = nn.Conv1d(64, 64, 3, stride=2, padding=1)
        self.conv4 = nn.Conv1d(64, 128, 3, stride=1, padding=1)
        self.lstm_cell = nn.LSTMCell(HIDDEN, HIDDEN)
        self.final_conv = nn.Conv1d(HIDDEN, 1, 1)

    def features(self, audio: torch.Tensor) -> torch.Tensor:
        spec = self.stft_conv(self.pad(audio[:, None, :]))
        real, imag = spec[:, :129], spec[:, 129:]
        x = torch.sqrt(real * real + imag * imag)
        for conv in (self.conv1, self.conv2, self.conv3, self.conv4):
            x = F.relu(conv(x))
        return x[:, :, 0]                                      # the one remaining frame: [1, 128]

    def forward(self, audio, h, c):
        h, c = self.lstm_cell(self.features(audio), (h, c))
        prob = torch.sigmoid(self.final_conv(F.relu(h)[:, :, None]))[:, :, 0]
        return prob, h, c


def load_net(state: dict[str, torch.Tensor] | None = None) -> SileroVad16k:
    net = SileroVad16k()
    net.load_state_dict(state if state is not None else reference_state_dict())
    return net.eval()


@torch.no_grad()
def stream_reference(ref: torch.jit.ScriptModule, audio: np.ndarray) -> np.ndarray:
    """Per-chunk speech probability from the TorchScript model, fed 512 samples at a time from a fresh state."""
    ref.reset_states()
    chunks = torch.from_numpy(audio.reshape(-1, CHUNK).astype(np.float32))
    return np.array([ref(chunk[None], SAMPLE_RATE).item() for chunk in chunks], np.float32)


@torch.no_grad()
def stream_net(net: nn.Module, audio: np.ndarray, *extra: torch.Tensor):
    """The same loop through a step module (ours, or GpuStep with `extra` = (one,)), from a zero state.
    Returns (prob [N], h_in [N, 128], c_in [N, 128]): h_in[k], c_in[k] = the state entering step k."""
    h = torch.zeros(1, HIDDEN)
    c = torch.zeros(1, HIDDEN)
    probs, h_in, c_in = [], [], []
    for step in torch.from_numpy(steps_of(audio)):
        h_in.append(h[0].numpy())
        c_in.append(c[0].numpy())
        out = net(step[None], h, c, *extra)
        prob, h, c = (out["prob"], out["h_next"], out["c_next"]) if isinstance(out, dict) else out
        probs.append(prob.item())
    return np.array(probs, np.float32), np.stack(h_in), np.stack(c_in)


# ---------------------------------------------------------------------------------------------------------------
# The step as the GPU graph computes it
# ---------------------------------------------------------------------------------------------------------------

class ReflectPadRight(nn.Module):
    """F.pad(x, (0, n), mode="reflect") on the last axis as the toolkit's exchange-matrix form: one slice, one
    matmul with the n x n exchange matrix and one concatenation, 3 GPU ops. The generic slices form
    (patch_reflect_pad) needs n + 1 ops, 65 here, and this graph is dispatch-bound (see ../README.md).
    Bit-exact in any precision."""

    def __init__(self, n: int):
        super().__init__()
        self.n = n
        self.register_buffer("exchange", exchange_matrix(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return reflect_pad_exchange(x, 0, self.n, self.exchange)


class SilenceReferencedFeatures(nn.Module):
    """conv1..conv4 (+ ReLU) computed as differences from their response to digital silence.

    Why: the encoder's convolutions are re-parameterised (large weights, |w| up to ~55, biases up to ~19), so on a
    quiet chunk every activation is a large bias-driven value plus a small signal-driven part. In fp16 (the GPU
    default) storing and accumulating the large part rounds the small part away; the speech probability of quiet
    chunks at a speech/non-speech transition then moves by up to ~0.14. Here each layer carries d = x - x_sil, where
    x_sil is the activation for an all-zero input chunk (precomputed in fp32):
        conv(x) - conv(x_sil) = conv_without_bias(d)                       (conv and zero padding are linear)
        relu(y) - relu(y_sil) = max(dy, -y_sil) - relu(-y_sil)            (dy = y - y_sil; exact identity)
    so the graph never holds the large operating-point values, only deviations from them (small exactly where the
    model is sensitive). Exact in exact arithmetic; in fp32 it agrees with the plain stack to rounding.
    Output: feature - feature_sil, [1, 128]; `feature_sil` is kept as a buffer for the LSTM gate bias.
    """

    def __init__(self, net: SileroVad16k):
        super().__init__()
        convs = [net.conv1, net.conv2, net.conv3, net.conv4]
        self.strides = [conv.stride[0] for conv in convs]
        self.weights = nn.ParameterList([nn.Parameter(conv.weight.detach().clone()) for conv in convs])
        x = torch.zeros(1, 129, 4)                             # |STFT| of an all-zero step: 129 bins x 4 frames
        with torch.no_grad():
            for k, conv in enumerate(convs):
                y_sil = conv(x)
                self.register_buffer(f"neg_y_sil{k}", -y_sil)
                self.register_buffer(f"relu_neg_y_sil{k}", F.relu(-y_sil))
                x = F.relu(y_sil)
        self.register_buffer("feature_sil", x[:, :, 0].clone())

    def forward(self, magnitude: torch.Tensor) -> torch.Tensor:
        d = magnitude                                          # the silence magnitude is exactly 0
        for k, (weight, stride) in enumerate(zip(self.weights, self.strides)):
            dy = F.conv1d(d, weight, None, stride, 1)
            d = torch.maximum(dy, getattr(self, f"neg_y_sil{k}")) - getattr(self, f"relu_neg_y_sil{k}")
        return d[:, :, 0]


class GpuStep(nn.Module):
    """The graph that is converted: audio [1, 576], h, c [1, 128], one [1] -> {prob, h_next, c_next}.

    - reflect padding without GATHER_ND: set net.pad = ReflectPadRight(CONTEXT), or leave nn.ReflectionPad1d to
      `convert_for_gpu`, whose default patch_reflect_pad makes it slices + concatenation;
    - silence-referenced encoder (above) unless centre=False;
    - the LSTM cell written as its two gate matmuls, with the silence feature folded into the gate bias in fp32
      (the converter lowers nn.LSTMCell to the same FULLY_CONNECTED/LOGISTIC/TANH ops, which the GPU takes; it is
      spelt out here only to fold that constant);
    - state outputs emitted as `state * one` (toolkit `alias_safe_output`; `one` is a runtime input holding 1.0),
      so no graph output is an ADD that the graph also consumes -- c_next = f*c + i*g is exactly that (the
      output-aliasing wall; a constant 1.0 would be folded away again). h_next gets the same treatment.
    - the STFT power as spec * (spec * one): `x * x` is a MUL whose two inputs are the same tensor, which phone
      GPU delegates decline ('No support of few identical inputs'; the toolkit's lint flags it). Exact.
    """

    def __init__(self, net: SileroVad16k, centre: bool = True):
        super().__init__()
        self.net = net
        self.features = SilenceReferencedFeatures(net) if centre else None
        cell = net.lstm_cell
        self.w_ih = nn.Parameter(cell.weight_ih.detach().clone())
        self.w_hh = nn.Parameter(cell.weight_hh.detach().clone())
        bias = cell.bias_ih + cell.bias_hh
        with torch.no_grad():
            if centre:
                bias = bias + self.features.feature_sil @ cell.weight_ih.T
        self.register_buffer("gate_bias", bias.detach().clone())

    def forward(self, audio, h, c, one):
        net = self.net
        if self.features is None:
            x = net.features(audio)
        else:
            spec = net.stft_conv(net.pad(audio[:, None, :]))
            power = spec * (spec * one)                        # not spec * spec: see the class docstring
            x = self.features(torch.sqrt(power[:, :129] + power[:, 129:]))
        z = x @ self.w_ih.T + h @ self.w_hh.T + self.gate_bias
        i, f, g, o = (z[:, k * HIDDEN:(k + 1) * HIDDEN] for k in range(4))   # slices, not chunk() (SPLIT)
        c_next = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h_next = torch.sigmoid(o) * torch.tanh(c_next)
        prob = torch.sigmoid(net.final_conv(F.relu(h_next)[:, :, None]))[:, :, 0]
        return {"prob": prob, "h_next": alias_safe_output(h_next, one), "c_next": alias_safe_output(c_next, one)}


def bisect_chunk(chunk: int = 148):
    """Builder for `python -m litert_gpu_toolkit bisect vad_net.py:bisect_chunk --boundaries ...`: the network as
    defined (reflect pad as ReflectPadRight, no silence referencing) and the inputs of one chunk of
    artifacts/vad_ref.npz with its reference state. Chunk 148 is a quiet chunk at a speech -> pause transition,
    the worst chunk of the GPU step without silence referencing."""
    ref = np.load(Path(__file__).resolve().parent / "artifacts" / "vad_ref.npz")
    net = load_net()
    net.pad = ReflectPadRight(CONTEXT)
    state = [torch.from_numpy(ref[k][chunk:chunk + 1]) for k in ("h_in", "c_in")]
    return net, (torch.from_numpy(steps_of(ref["audio"])[chunk:chunk + 1]), *state)
