"""The quantized forms of a weight, as LiteRT's quantizer writes them, and the call that writes them.

A *form* is one way to store an op's constant weight: fp16 behind a DEQUANTIZE (`fp16`), int8 / int4 on the op
itself with the activations left in float (`int8`, `int4`, `int4-b32`: the "dynamic-range" form, the one LiteRT's
GPU reads natively), or int8 / int4 behind an explicit DEQUANTIZE (`int8-deq`, `int4-deq`: weight-only).
`quantize_tflite(data, {op_type: form}, keep_float=...)` writes them with LiteRT's own quantizer package
(`litert-quantizer`, the maintained successor of `ai-edge-quantizer`; the older one is used when only it is
installed). Nothing here decides which form the GPU accepts: `plan.py` does, from measured tables.

Exactness: fp16 rounds each weight once (relative error <= 2^-11). int8 / int4 are symmetric min-max per output
channel (per block of 32 for `-b32`): each weight is off by at most half a step, step = max|w| / 127 (int8) or / 7
(int4) over its channel or block.
"""
from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Form:
    name: str
    bits: int
    kind: str                  # "float": fp16 cast; "dynamic": integer weights on the op; "weight_only": + DEQUANTIZE
    granularity: str = "CHANNELWISE"

    def describe(self) -> str:
        if self.kind == "float":
            return "fp16 behind a DEQUANTIZE"
        per = "per block of 32" if "BLOCK" in self.granularity else "per channel"
        where = "on the op (dynamic-range)" if self.kind == "dynamic" else "behind a DEQUANTIZE (weight-only)"
        return f"int{self.bits} {per} {where}"


FORMS = {f.name: f for f in (
    Form("fp16", 16, "float", "TENSORWISE"),
    Form("int8", 8, "dynamic"),
    Form("int8-deq", 8, "weight_only"),
    Form("int4", 4, "dynamic"),
    Form("int4-b32", 4, "dynamic", "BLOCKWISE_32"),
    Form("int4-deq", 4, "weight_only"),
)}


# the builtin op names this package uses -> the quantizer's names where they differ
_QUANTIZER_OP = {"TRANSPOSE_CONV": "CONV_2D_TRANSPOSE"}


def quantizer_package():
    """LiteRT's quantizer module: `litert_quantizer` (maintained), else `ai_edge_quantizer` (its archived name)."""
    for name in ("litert_quantizer", "ai_edge_quantizer"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("quantizing needs LiteRT's quantizer: pip install litert-quantizer")


def _config(q, form: Form):
    qtyping = importlib.import_module(q.__name__ + ".qtyping")
    weight = qtyping.TensorQuantizationConfig(
        num_bits=form.bits, symmetric=True, granularity=qtyping.QuantGranularity(form.granularity),
        dtype=qtyping.TensorDataType.FLOAT if form.kind == "float" else qtyping.TensorDataType.INT)
    compute = qtyping.ComputePrecision.INTEGER if form.kind == "dynamic" else qtyping.ComputePrecision.FLOAT
    return qtyping.OpQuantizationConfig(weight_tensor_config=weight, compute_precision=compute,
                                        explicit_dequantize=form.kind != "dynamic")


def quantize_tflite(model: str | os.PathLike | bytes, plan: dict[str, str], *,
                    keep_float: tuple[str, ...] = ()) -> bytes:
    """`model`'s bytes with the weights of each op type in `plan` ({"FULLY_CONNECTED": "int8", ...}) in that form
    (builtin op names: TRANSPOSE_CONV, not the quantizer's CONV_2D_TRANSPOSE).

    keep_float: output tensor names of ops whose weights stay float (matched whole, not as patterns).
    Raises ValueError for an unknown form; the quantizer's own errors pass through.
    """
    q = quantizer_package()
    manager = importlib.import_module(q.__name__ + ".algorithm_manager")
    qtyping = importlib.import_module(q.__name__ + ".qtyping")
    data = Path(model).read_bytes() if not isinstance(model, (bytes, bytearray)) else bytes(model)
    unknown = sorted(set(plan.values()) - set(FORMS))
    if unknown:
        raise ValueError(f"unknown weight form(s) {unknown}; known: {', '.join(FORMS)}")
    qt = q.quantizer.Quantizer(bytearray(data))
    for op, name in plan.items():
        form = FORMS[name]
        algorithm = manager.AlgorithmName.FLOAT_CASTING if form.kind == "float" else \
            manager.AlgorithmName.MIN_MAX_UNIFORM_QUANT
        qt.update_quantization_recipe(".*", qtyping.TFLOperationName(_QUANTIZER_OP.get(op, op)), _config(q, form),
                                      algorithm_key=algorithm)
    for tensor in keep_float:                  # later entries win; an op's scope is "out0;out1;...;" (trailing ;)
        for op in plan:
            name = qtyping.TFLOperationName(_QUANTIZER_OP.get(op, op))
            qt.update_quantization_recipe(f"^{re.escape(tensor)};", name, None,
                                          algorithm_key=manager.AlgorithmName.NO_QUANTIZE)
    try:
        result = qt.quantize(enable_progress_report=False, enable_progress_bar=False)
    except TypeError:                              # ai-edge-quantizer: no progress bar option
        result = qt.quantize(enable_progress_report=False)
    return bytes(result.quantized_model)
