"""Op-name tables shared by the checker and bisect (one definition, one place to extend)."""
from __future__ import annotations

# ops whose fp16 accumulation or intermediate can pass 65504 (or lose the small terms of a long sum):
# named as candidates when a GPU output goes non-finite, all-zero or degraded. Order = display order.
REDUCTION_OPS: tuple[str, ...] = (
    "MEAN", "SUM", "SQUARED_DIFFERENCE", "RSQRT", "SQRT", "POW", "REDUCE_MAX", "REDUCE_PROD", "L2_NORMALIZATION",
    "SOFTMAX", "LOG_SOFTMAX", "BATCH_MATMUL", "FULLY_CONNECTED")
