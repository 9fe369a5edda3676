"""openWakeWord's three stages ported by hand to torch from the wheel's ONNX files, and the shipped .tflite twins.

The PyPI wheel `openwakeword==0.5.1` ships each stage twice, as ONNX and as .tflite. The recipe never imports the
package (it needs onnxruntime / tflite-runtime); it reads the ONNX initializers with the `onnx` package
(numpy_helper: plain tensors, no code) and rebuilds each small graph as a torch module, node for node:

  * `MelSpectrogram`: waveform [B, N] 16 kHz -> [B, 1, frames, 32]: two Conv1d (257 real and 257 imaginary
    rows of a 512-point DFT, stride 160, no padding) -> power -> 32-bin mel matmul -> 10 log10(max(., 1e-10))
    -> max(x, max(x) - 80) over the whole tensor. openWakeWord then applies x / 10 + 2 on the host
    (`mel_to_features`).
  * `SpeechEmbedding` (Google's speech_embedding, batch norms fused): [B, 76, 32, 1] mel frames -> [B, 1, 1, 96]:
    19 convs (3x3, then 1x3 / 3x1 pairs) each with LeakyReLU(0.2) and max(x, -0.4), 5 max pools, a last 3x1
    conv without bias.
  * `WakeWordHead` (one wake word): [B, 16, 96] embeddings -> [B, 1] score: flatten, Linear -> LayerNorm -> ReLU,
    Linear -> LayerNorm -> ReLU, Linear -> sigmoid. The ONNX file also holds a 'verifier' of the same shape
    that replaces the score when it is >= 0.5 (an ONNX `If`); `WakeWordHead` computes both and selects with
    arithmetic (no branch, no SELECT on the GPU).
The wake-word heads are CC BY-NC-SA 4.0 (non-commercial); the melspectrogram and embedding models, and the code,
Apache-2.0.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from litert_gpu_toolkit.core import weights
from litert_gpu_toolkit.rewrites import fft

INSTALL = "pip install --no-deps openwakeword==0.5.1"
GRAPHS = ("melspectrogram", "embedding_model", "hey_jarvis_v0.1")
EMBED_FRAMES, EMBED_STEP, HEAD_WINDOWS = 76, 8, 16     # openWakeWord's framing: 76 mel frames per embedding
LOG_FLOOR = float(np.log(1e-10))                       # the source's clip before its log
DB_PER_LN = 10.0 / float(np.log(10.0))


def models_dir(override: str | None = None) -> Path:
    if override:
        path = Path(override)
        if not path.is_dir():
            raise weights.WeightsError(f"{override!r} is not a folder of openWakeWord .onnx / .tflite files")
        return path
    return weights.package_dir("openwakeword", "resources", "models", install=INSTALL)


def onnx_tensors(path: Path) -> dict[str, np.ndarray]:
    """Every initializer of an ONNX file (main graph and sub-graphs), as numpy arrays."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    out = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return out


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(a, dtype=np.float32))        # a writable copy


class MelSpectrogram(nn.Module):
    def __init__(self, w: dict[str, np.ndarray]):
        super().__init__()
        # one conv for both DFT halves: [real rows; imaginary rows]
        self.register_buffer("basis", _t(np.concatenate([w["0.stft.conv_real.weight"],
                                                         w["0.stft.conv_imag.weight"]])), persistent=False)
        # The log-mel is computed in the toolkit's peak-scaled domain (fft.peak_scaled_log_mel): the power
        # spectrum spans more decades than fp16 holds -- a loud bin passes 65504, a quiet one falls below fp16's
        # normal range (6.1e-5), where a GPU may flush it to 0 -- so the spectrum's largest component is scaled to
        # 2^7 per chunk and the mel weights (Slaney-normalised, each filter's sum ~0.03) by a power of two (16).
        mel_w = w["1.melW"].astype(np.float64).T                                           # [32, 257]
        self.mel_shift = fft.mel_power_of_two_shift(mel_w)
        self.register_buffer("mel", _t((mel_w * self.mel_shift).astype(np.float32)).unsqueeze(-1),
                             persistent=False)                                                 # [32, 257, 1]
        self.log_shift = float(np.log(fft.SPECTRUM_PEAK ** 2 * self.mel_shift))

    def forward(self, audio):                                   # [B, N]
        spec = F.conv1d(audio.unsqueeze(1), self.basis, stride=160)
        log_mel = fft.peak_scaled_log_mel(spec, self.mel, self.log_shift, log_floor=LOG_FLOOR)
        db = log_mel * DB_PER_LN
        peak = db.amax(dim=(1, 2), keepdim=True)
        return torch.maximum(db, peak - 80.0).transpose(1, 2).unsqueeze(1)   # [B, 1, frames, 32]


def mel_to_features(mel: np.ndarray) -> np.ndarray:
    """openWakeWord's host-side scaling of the mel model's output before the embedding model."""
    return mel / 10.0 + 2.0


# (kernel, W padding) of the 20 convs, and after which conv a max pool (kernel = stride) follows
_CONVS = [((3, 3), 1), ((1, 3), 1), ((3, 1), 0), ((1, 3), 1), ((3, 1), 0), ((1, 3), 1), ((3, 1), 0), ((1, 3), 1),
          ((3, 1), 0), ((1, 3), 1), ((3, 1), 0), ((1, 3), 1), ((3, 1), 0), ((1, 3), 1), ((3, 1), 0), ((1, 3), 1),
          ((3, 1), 0), ((1, 3), 1), ((3, 1), 0), ((3, 1), 0)]
_POOLS = {2: (2, 2), 6: (1, 2), 10: (2, 2), 14: (1, 2), 18: (2, 2)}


class SpeechEmbedding(nn.Module):
    def __init__(self, w: dict[str, np.ndarray]):
        super().__init__()
        self.convs = nn.ModuleList()
        for i, ((kh, kw), pad_w) in enumerate(_CONVS):
            name = "model/conv2d" + (f"_{i}" if i else "")
            last = i == len(_CONVS) - 1
            weight = w[f"{name}/Conv2D/ReadVariableOp:0" if last else f"{name}/Conv2D_weights_fused_bn"]
            conv = nn.Conv2d(weight.shape[1], weight.shape[0], (kh, kw), padding=(0, pad_w), bias=not last)
            conv.weight.data = _t(weight)
            if not last:
                conv.bias.data = _t(w[f"{name}/Conv2D_bias_fused_bn"])
            self.convs.append(conv)
        self.floor = float(w["const_fold_opt__287"].ravel()[0])          # -0.4

    def forward(self, mel):                                    # [B, 76, 32, 1] (openWakeWord's layout)
        x = mel.reshape(mel.shape[0], 1, mel.shape[1], mel.shape[2])
        for i, conv in enumerate(self.convs):
            x = conv(x)
            if i == len(self.convs) - 1:
                break
            x = torch.clamp(F.leaky_relu(x, 0.2), min=self.floor)
            if i in _POOLS:
                x = F.max_pool2d(x, _POOLS[i])
        return x.reshape(x.shape[0], 1, 1, -1)                 # [B, 1, 1, 96]


def _mlp(w: dict, prefix: str) -> nn.Sequential:
    first, second, out = (w[f"{prefix}.{i}.weight"] for i in (1, 4, 7))
    layers = [nn.Linear(first.shape[1], first.shape[0]), nn.LayerNorm(first.shape[0]), nn.ReLU(),
              nn.Linear(second.shape[1], second.shape[0]), nn.LayerNorm(second.shape[0]), nn.ReLU(),
              nn.Linear(out.shape[1], out.shape[0]), nn.Sigmoid()]
    for index, layer in zip((1, 2, 4, 5, 7), (layers[0], layers[1], layers[3], layers[4], layers[6])):
        layer.weight.data = _t(w[f"{prefix}.{index}.weight"])
        layer.bias.data = _t(w[f"{prefix}.{index}.bias"])
    return nn.Sequential(*layers)


class WakeWordHead(nn.Module):
    def __init__(self, w: dict[str, np.ndarray]):
        super().__init__()
        self.model = _mlp(w, "model")
        self.verifier = _mlp(w, "verifier_model") if "verifier_model.1.weight" in w else None

    def forward(self, emb):                                     # [B, 16, 96]
        x = emb.reshape(emb.shape[0], -1)
        p1 = self.model(x)
        if self.verifier is None:
            return p1
        # the ONNX `If` (p1 >= 0.5: the verifier's score) as arithmetic: a 0/1 step without a SELECT. p1 is a
        # sigmoid in [0, 1], so floor(p1 + 0.5) is already 0 or 1 (a clamp would emit RELU_0_TO_1, GPU-rejected)
        step = torch.floor(p1 + 0.5)
        return p1 + step * (self.verifier(x) - p1)


def load_stage(name: str, folder: str | None = None) -> nn.Module:
    """The torch port of one stage (`GRAPHS`, or another wake-word head's file stem) in eval mode."""
    path = models_dir(folder) / f"{name}.onnx"
    if not path.is_file():
        raise weights.WeightsError(f"no {path.name} in {path.parent}")
    w = onnx_tensors(path)
    if name == "melspectrogram":
        return MelSpectrogram(w).eval()
    if name == "embedding_model":
        return SpeechEmbedding(w).eval()
    return WakeWordHead(w).eval()


def shipped_tflite(name: str, folder: str | None = None) -> Path:
    return models_dir(folder) / f"{name}.tflite"


# ----------------------------------------------------------------------------------------------------------------
# the pipeline on a whole clip (host-side framing, as openWakeWord does it)

def embedding_windows(features: np.ndarray) -> np.ndarray:
    """[frames, 32] mel features -> [n, 76, 32, 1]: 76-frame windows every 8 frames."""
    starts = range(0, features.shape[0] - EMBED_FRAMES + 1, EMBED_STEP)
    return np.stack([features[s:s + EMBED_FRAMES] for s in starts])[..., None].astype(np.float32)


def head_windows(embeddings: np.ndarray) -> np.ndarray:
    """[n, 96] embeddings -> [m, 16, 96]: every run of 16 consecutive embeddings."""
    return np.stack([embeddings[s:s + HEAD_WINDOWS] for s in range(embeddings.shape[0] - HEAD_WINDOWS + 1)])
