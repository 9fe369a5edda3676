"""Which ops of a type the GPU delegate rejected, where its message is a rule about one op's inputs.

The delegate names an op type and a reason, never the node: "BATCH_MATMUL: Not supported batched mat mul case:
non-constant tensor" with ten BATCH_MATMULs in a graph reads as if all ten were refused. For reasons that are
a rule about the node's own inputs, the rule is applied to every node of that type here, so the report can say
which nodes break it (by index in the graph, as `python -m litert_gpu_toolkit check --json` lists ops). The rules
restate the delegate's checks as measured on llvmpipe, ai-edge-litert 2.3.0; a reason without a rule here is
reported as before.
"""
from __future__ import annotations

import re
from typing import Callable

from ..core.model_info import ModelInfo, OpInfo


def _constant_left(info: ModelInfo, op: OpInfo) -> bool:
    """A batched matmul with one runtime input whose second input is not a constant: the constant is left."""
    a, b = (info.tensor(i, op.subgraph) for i in op.inputs[:2])
    return a.is_constant and not b.is_constant


def _bool_input(info: ModelInfo, op: OpInfo) -> bool:
    return info.tensor(op.inputs[0], op.subgraph).dtype == "bool"


RULES: tuple[tuple[str, str, Callable[[ModelInfo, OpInfo], bool], str], ...] = (
    ("BATCH_MATMUL", r"non-constant tensor", _constant_left, "a constant left operand"),
    ("STRIDED_SLICE", r"Requested version 3", _bool_input, "a bool input"),
)


def rejected_sites(info: ModelInfo, op: str, reason: str) -> tuple[list[int], str] | None:
    """(indices of the `op` nodes that break the rule behind `reason`, what the rule is), or None when no rule
    is known for that reason."""
    for name, pattern, breaks, what in RULES:
        if name == op and re.search(pattern, reason):
            return [o.index for o in info.ops_named(op) if breaks(info, o)], what
    return None
