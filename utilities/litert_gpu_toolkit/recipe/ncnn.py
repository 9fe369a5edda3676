"""A small, strict reader for ncnn `.param` / `.bin` model files (the layer types plain conv nets use).

Some real weights ship only as ncnn files (e.g. Real-ESRGAN's compact models). This reader turns
them into numpy arrays per layer so a recipe can load them into a torch module it defines:

    net = read_ncnn("model.param", "model.bin")
    for layer in net.layers: layer.type, layer.name, layer.inputs, layer.outputs, layer.params, layer.weights

Supported layer types: Input, Split, Convolution, ConvolutionDepthWise, PReLU, ReLU, PixelShuffle,
Interp, BinaryOp, Eltwise, Concat, Pooling, Sigmoid. Anything else raises `NcnnFormatError` naming the
layer -- the reader never guesses. `.bin` layout per weighted layer: a 4-byte storage tag
(0x01306B47 = fp16 follows, padded to 4 bytes; 0 = fp32) before each convolution weight, then raw
fp32 bias / slopes. The whole `.bin` must be consumed exactly, or the reader raises.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MAGIC = 7767517
TAG_FP16 = 0x01306B47
TAG_FP32 = 0
NO_WEIGHTS = {"Input", "Split", "ReLU", "PixelShuffle", "Interp", "BinaryOp", "Eltwise", "Concat", "Pooling",
              "Sigmoid", "Noop"}
WEIGHTED = {"Convolution", "ConvolutionDepthWise", "PReLU"}


class NcnnFormatError(ValueError):
    pass


@dataclass
class NcnnLayer:
    type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    params: dict[int, float | int]
    weights: dict[str, np.ndarray] = field(default_factory=dict)

    def param(self, key: int, default=None):
        return self.params.get(key, default)


@dataclass
class NcnnNet:
    layers: list[NcnnLayer]
    bin_bytes: int

    def of_type(self, kind: str) -> list[NcnnLayer]:
        return [layer for layer in self.layers if layer.type == kind]


def _number(text: str):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError as exc:
            raise NcnnFormatError(f"bad parameter value {text!r}") from exc


def read_param(path: str | Path) -> list[NcnnLayer]:
    lines = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
    if not lines or lines[0] != str(MAGIC):
        raise NcnnFormatError(f"{path}: not an ncnn text .param (first line must be {MAGIC})")
    try:
        n_layers, _n_blobs = (int(x) for x in lines[1].split())
    except (IndexError, ValueError) as exc:
        raise NcnnFormatError(f"{path}: second line must be '<layer count> <blob count>'") from exc
    layers = []
    for line in lines[2:]:
        parts = line.split()
        kind, name, n_in, n_out = parts[0], parts[1], int(parts[2]), int(parts[3])
        ins, outs = parts[4:4 + n_in], parts[4 + n_in:4 + n_in + n_out]
        params = {}
        for item in parts[4 + n_in + n_out:]:
            key, _, value = item.partition("=")
            k = int(key)
            if k <= -23300:
                raise NcnnFormatError(f"{path}: layer {name} uses array parameter {key}, which this reader does not "
                                      "support")
            params[k] = _number(value)
        if kind not in NO_WEIGHTS | WEIGHTED:
            raise NcnnFormatError(f"{path}: layer {name} has type {kind}, which this reader does not support")
        layers.append(NcnnLayer(kind, name, ins, outs, params))
    if len(layers) != n_layers:
        raise NcnnFormatError(f"{path}: header says {n_layers} layers, found {len(layers)}")
    return layers


class _Cursor:
    def __init__(self, data: bytes, where: str):
        self.data, self.pos, self.where = data, 0, where

    def take(self, n: int, what: str) -> bytes:
        if self.pos + n > len(self.data):
            raise NcnnFormatError(f"{self.where}: .bin ends inside {what} (need {n} bytes at offset {self.pos}, "
                                  f"file has {len(self.data)})")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def fp32(self, count: int, what: str) -> np.ndarray:
        return np.frombuffer(self.take(4 * count, what), dtype="<f4").astype(np.float32)

    def tagged(self, count: int, what: str) -> np.ndarray:
        (tag,) = struct.unpack("<I", self.take(4, f"{what} tag"))
        if tag == TAG_FP16:
            raw = self.take(2 * count, what)
            if (2 * count) % 4:
                self.take(4 - (2 * count) % 4, f"{what} padding")
            return np.frombuffer(raw, dtype="<f2").astype(np.float32)
        if tag == TAG_FP32:
            return self.fp32(count, what)
        raise NcnnFormatError(f"{self.where}: {what} has storage tag {tag:#010x}; only fp16 ({TAG_FP16:#010x}) and "
                              "fp32 (0) are supported (quantized weights are not)")


def read_ncnn(param_path: str | Path, bin_path: str | Path) -> NcnnNet:
    """Parse both files; every weighted layer gets its arrays; the .bin must be consumed exactly."""
    layers = read_param(param_path)
    data = Path(bin_path).read_bytes()
    cur = _Cursor(data, str(bin_path))
    for layer in layers:
        if layer.type in ("Convolution", "ConvolutionDepthWise"):
            out_ch = int(layer.param(0, 0))
            k_w = int(layer.param(1, 0))
            k_h = int(layer.param(11, k_w))
            size = int(layer.param(6, 0))
            groups = int(layer.param(7, 1)) if layer.type == "ConvolutionDepthWise" else 1
            if size <= 0 or out_ch <= 0 or size % (out_ch * k_w * k_h):
                raise NcnnFormatError(f"{layer.name}: weight size {size} does not fit {out_ch} outputs x {k_h}x{k_w}")
            in_per_group = size // (out_ch * k_w * k_h)
            w = cur.tagged(size, f"{layer.name} weights")
            layer.weights["weight"] = w.reshape(out_ch, in_per_group, k_h, k_w)
            layer.params.setdefault(7, groups)
            if int(layer.param(5, 0)):
                layer.weights["bias"] = cur.fp32(out_ch, f"{layer.name} bias")
        elif layer.type == "PReLU":
            n = int(layer.param(0, 0))
            layer.weights["slope"] = cur.fp32(max(n, 1), f"{layer.name} slopes")
    if cur.pos != len(data):
        raise NcnnFormatError(f"{bin_path}: {len(data) - cur.pos} bytes left after the last layer "
                              f"(read {cur.pos} of {len(data)}): the .param and .bin do not match")
    return NcnnNet(layers, len(data))
