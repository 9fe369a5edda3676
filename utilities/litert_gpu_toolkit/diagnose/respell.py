"""A GPU miscompute named by the graph bisect, met by writing the same arithmetic another way in the .tflite.

When fp32 is as wrong as fp16 at an op, no precision fix helps: the GPU computes that op's form wrong. Some forms
have an equivalent the GPU computes right; each respelling here is exact (the same values, bit for bit: only views
and sign flips change) and is kept only when the GPU agrees with LiteRT's CPU on the whole file afterwards.

  * `equal_rank`: an elementwise op whose runtime operand has a lower rank than its other operand reads it through
    a RESHAPE to the same rank (leading 1s). Measured on llvmpipe, ai-edge-litert 2.3.0: ADD([4, 12, 12] runtime,
    [1, 1, 12, 12] constant) is wrong, the same ADD with the runtime side at [1, 4, 12, 12] is right; it is what
    the converter makes of `bmm(q, k).view(1, H, S, T) + mask` (the legalize rule `constant_operand` meets it on
    the torch graph; this one meets it in a file converted elsewhere).
  * `returned_negated_twice`: a graph output that another op also reads is returned as NEG(NEG(value)), an output
    of its own (the output-aliasing wall; the legalize rule `returned_fc` does the same before conversion).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .graph_bisect import GraphFault, _load, _name, _op_name
from ..core.tflite_edit import add_tensor, opcode_index, pack, reshape_op

BINARY = ("ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW")


@dataclass
class Respelling:
    name: str
    what: str
    data: bytes
    ops: int = 0                # how many ops it changed


def equal_rank(data: bytes, only: int | None = None) -> Respelling | None:
    """Every binary elementwise op whose non-constant operand has a lower rank than the other reads it through a
    RESHAPE with leading 1s (static shapes only); with `only`, the op of that index alone (the one the graph bisect
    named), so the file changes no more than the fault needs."""
    schema, model = _load(data)
    graph = model.subgraphs[0]
    ops, count = [], 0
    for index, op in enumerate(graph.operators or []):
        if only is not None and index != only:
            ops.append(op)
            continue
        if _op_name(schema, model, op) in BINARY and op.inputs is not None and len(op.inputs) == 2:
            a, b = (graph.tensors[int(i)] for i in op.inputs)
            ranks = [len(a.shape), len(b.shape)]
            low = int(np.argmin(ranks))
            side = graph.tensors[int(op.inputs[low])]
            runtime = model.buffers[side.buffer].data is None
            static = all(int(d) > 0 for d in side.shape) and (side.shapeSignature is None or
                                                               min(side.shapeSignature, default=1) > 0)
            if ranks[0] != ranks[1] and runtime and static:
                shape = [1] * (max(ranks) - ranks[low]) + [int(d) for d in side.shape]
                lifted = add_tensor(schema, graph, f"{_name(side)}/equal_rank_{count}", shape, side.type)
                ops.append(reshape_op(schema, model, graph, int(op.inputs[low]), lifted, shape))
                inputs = [int(i) for i in op.inputs]
                inputs[low] = lifted
                op.inputs = inputs
                count += 1
        ops.append(op)
    if not count:
        return None
    graph.operators = ops
    where = f"op {only}: its" if only is not None else f"{count} elementwise op(s) read their"
    return Respelling("equal_rank", f"{where} lower-rank runtime operand through a RESHAPE to the other operand's "
                      "rank (bit-exact)", pack(model, len(data)), count)


def returned_negated_twice(data: bytes) -> Respelling | None:
    """Every graph output that an op of the graph also reads is returned as NEG(NEG(value)) (bit-exact)."""
    schema, model = _load(data)
    graph = model.subgraphs[0]
    read = {int(t) for op in graph.operators or [] for t in (op.inputs if op.inputs is not None else []) if t >= 0}
    outputs = [int(t) for t in graph.outputs]
    shared = [t for t in outputs if t in read]
    if not shared:
        return None
    neg = opcode_index(schema, model, schema.BuiltinOperator.NEG)
    remap = {}
    for t in shared:
        src = graph.tensors[t]
        mid = add_tensor(schema, graph, f"{_name(src)}/negated", src.shape, src.type)
        out = add_tensor(schema, graph, f"{_name(src)}/returned", src.shape, src.type)
        for a, b in ((t, mid), (mid, out)):
            op = schema.OperatorT()
            op.opcodeIndex, op.inputs, op.outputs = neg, [a], [b]
            graph.operators.append(op)
        remap[t] = out
    graph.outputs = [remap.get(t, t) for t in outputs]
    for sig in model.signatureDefs or []:
        for m in sig.outputs or []:
            m.tensorIndex = remap.get(int(m.tensorIndex), int(m.tensorIndex))
    return Respelling("returned_negated_twice", f"{len(shared)} output(s) also read by another op returned as "
                      "NEG(NEG(value)) (bit-exact)", pack(model, len(data)), len(shared))


RESPELLINGS = (equal_rank, returned_negated_twice)


def candidates(data: bytes, fault: GraphFault | None = None) -> list[Respelling]:
    """Each respelling that changes the file (the aliasing one first when the fault names a returned value). The
    named op alone comes before every op of its form: the smaller change first, the wider one when it is not
    enough (the same form elsewhere in the file is wrong too)."""
    found = [r for r in (f(data) for f in RESPELLINGS) if r is not None]
    local = equal_rank(data, only=fault.op_index) if fault is not None else None
    wide = next((r for r in found if r.name == "equal_rank"), None)
    if local is not None and wide is not None and wide.ops > 1:
        found.insert(found.index(wide), local)
    if fault is not None and fault.returned_and_read:
        found.sort(key=lambda r: r.name != "returned_negated_twice")
    return found
