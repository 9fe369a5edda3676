"""Which weights a mode quantizes, in which form, tried in which order.

A *mode* (what the user asks for: `fp16`, `int8`, `int4`) maps each op type whose constant weight can be
quantized to the forms to try, best first. The order comes from `docs/data/quantized_forms.json`
(`scripts/probe_quantized_forms.py`: tiny graphs, every form, strict GPU-only on the software GPU): a form the
GPU refuses there is not listed, so the search below spends no compile on it. Whether a form holds for one
model is still decided by checking that model (`gpu.quantize_for_gpu`), never by this table alone.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.model_info import ModelInfo

MODES: dict[str, dict[str, tuple[str, ...]]] = {
    "fp32": {},
    # fp16 weights behind a DEQUANTIZE, which the GPU folds into the op. An fp16 embedding table is a wall
    # (DEQUANTIZE and EMBEDDING_LOOKUP refused: "Empty quantization params"): the table stays fp32 in this mode.
    "fp16": {"FULLY_CONNECTED": ("fp16",), "CONV_2D": ("fp16",), "DEPTHWISE_CONV_2D": ("fp16",),
             "TRANSPOSE_CONV": ("fp16",)},
    # FC and embedding tables: integer weights on the op (an explicit DEQUANTIZE into either fails to compile or
    # crashes the runtime). Convolutions: weight-only first (the GPU turns integer conv weights into float at load
    # anyway, so the file shrinks and the arithmetic stays float), then on the op.
    # Depthwise kernels stay fp16: nine weights per channel quantize coarsely and are a sliver of the file
    # (MobileNetV2 on its seven photos, GPU: int8 depthwise top-1 6/7, logits corr 0.9917, 3.93 MB; fp16 depthwise
    # top-1 7/7, corr 0.9976, 3.91 MB -- the DEQUANTIZE ops cost more bytes than the int8 kernels save).
    "int8": {"FULLY_CONNECTED": ("int8",), "EMBEDDING_LOOKUP": ("int8",), "CONV_2D": ("int8-deq", "int8"),
             "DEPTHWISE_CONV_2D": ("fp16",), "TRANSPOSE_CONV": ("int8-deq", "fp16")},
    # int4 blockwise (FC) crashes the GPU runtime at compile: per channel only
    "int4": {"FULLY_CONNECTED": ("int4", "int8"), "EMBEDDING_LOOKUP": ("int4", "int8"),
             "CONV_2D": ("int4-deq", "int8-deq"), "DEPTHWISE_CONV_2D": ("fp16",),
             "TRANSPOSE_CONV": ("int8-deq", "fp16")},
}
# why a mode leaves a weight type float without trying it (the line in the result says it)
LEFT_FLOAT = {("fp16", "EMBEDDING_LOOKUP"): "an fp16 table behind a DEQUANTIZE is refused by the GPU (Empty "
                                            "quantization params); int8 stores it on the op",
              ("fp16", "BATCH_MATMUL"): "no mode quantizes a constant BATCH_MATMUL operand (the GPU turns it into "
                                        "float at load)"}
for _m in ("int8", "int4"):
    LEFT_FLOAT[(_m, "BATCH_MATMUL")] = LEFT_FLOAT[("fp16", "BATCH_MATMUL")]

# the tensor that holds each op type's weight (input position)
WEIGHT_INPUT = {"FULLY_CONNECTED": 1, "CONV_2D": 1, "DEPTHWISE_CONV_2D": 1, "TRANSPOSE_CONV": 1,
                "EMBEDDING_LOOKUP": 1, "BATCH_MATMUL": 1}
# the corr floor against the source model that a mode must keep (GPU output vs torch / the float file's CPU output);
# a recipe's task metric is the real gate, this one only refuses a file that is plainly broken
DEFAULT_MIN_CORR = {"fp32": 0.999, "fp16": 0.999, "int8": 0.99, "int4": 0.97}


@dataclass(frozen=True)
class WeightOp:
    """One op with a constant float weight: its type, the name the quantizer scopes by (its first output's
    tensor name), the weight's name and size."""
    op: str
    name: str
    weight: str
    nbytes: int
    index: int


def weight_ops(info: ModelInfo, types=tuple(WEIGHT_INPUT)) -> list[WeightOp]:
    """The ops of `types` whose weight input is a constant float32 tensor (main subgraph and every other)."""
    found = []
    for op in info.ops:
        pos = WEIGHT_INPUT.get(op.op)
        if op.op not in types or pos is None or len(op.inputs) <= pos or op.inputs[pos] < 0:
            continue
        t = info.tensors[op.subgraph][op.inputs[pos]]
        if t.is_constant and t.dtype == "float32" and t.nbytes:
            out = info.tensors[op.subgraph][op.outputs[0]].name
            found.append(WeightOp(op.op, out, t.name, t.nbytes, op.index))
    return found


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"weights must be one of {', '.join(MODES)}, not {mode!r}")
    return mode
