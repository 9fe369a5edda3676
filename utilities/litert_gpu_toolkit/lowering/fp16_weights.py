"""Store a converted model's weights as fp16 -- only for the ops whose fp16 weights the GPU accepts.

litert-torch's own fp16 option (`quant_config=full_fp16_recipe()`) puts EVERY weight behind a
DEQUANTIZE (fp16 -> fp32). The GPU delegate takes that for FULLY_CONNECTED weights, but a
dequantized embedding table is a wall: measured with ai-edge-litert 2.3.0 on llvmpipe,
all-MiniLM-L6-v2 dropped from 360/360 ops on the GPU to 351/397, with
`DEQUANTIZE:` and `EMBEDDING_LOOKUP: Empty quantization params` rejected.

`fp16_weights(path_or_bytes, ops=("FULLY_CONNECTED",))` runs the same float-cast quantization
(ai-edge-quantizer, weight-only, explicit DEQUANTIZE) restricted to the weights of `ops`; every
other constant stays fp32. Exactness: each weight is rounded once to fp16 (relative error
<= 2^-11); the GPU computes in fp16 by default anyway, so on the GPU this is usually invisible.
Add op names (e.g. CONV_2D) only after a strict-GPU check of the result.
"""
from __future__ import annotations

import os
from pathlib import Path

GPU_FP16_WEIGHT_OPS = ("FULLY_CONNECTED",)  # verified strict-GPU on llvmpipe, ai-edge-litert 2.3.0


def fp16_weights(model: str | os.PathLike | bytes, ops: tuple[str, ...] = GPU_FP16_WEIGHT_OPS) -> bytes:
    """The model's bytes with the weights of `ops` stored as fp16 (weight-only, explicit DEQUANTIZE)."""
    from ai_edge_quantizer import algorithm_manager, quantizer, qtyping

    data = Path(model).read_bytes() if not isinstance(model, (bytes, bytearray)) else bytes(model)
    config = qtyping.OpQuantizationConfig(
        weight_tensor_config=qtyping.TensorQuantizationConfig(
            num_bits=16, symmetric=True, granularity=qtyping.QuantGranularity.TENSORWISE,
            dtype=qtyping.TensorDataType.FLOAT),
        compute_precision=qtyping.ComputePrecision.FLOAT,
        explicit_dequantize=True,
    )
    qt = quantizer.Quantizer(bytearray(data))
    for op in ops:
        qt.update_quantization_recipe(".*", qtyping.TFLOperationName(op), config,
                                      algorithm_key=algorithm_manager.AlgorithmName.FLOAT_CASTING)
    return bytes(qt.quantize(enable_progress_report=False).quantized_model)
