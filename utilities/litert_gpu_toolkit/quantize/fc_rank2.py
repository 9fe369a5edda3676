"""FULLY_CONNECTED on a rank-3+ input -> RESHAPE to rank 2, FULLY_CONNECTED, RESHAPE back. Bit-exact.

Why: with integer weights on the op (dynamic-range int8 / int4), a FULLY_CONNECTED that reads a [B, S, C] tensor
and keeps its leading dims is a GPU wall. Measured on llvmpipe (software Vulkan), ai-edge-litert 2.3.0: the
transformer residual `x + Linear(x)` at [1, S, C] compiles GPU-only and returns wrong numbers (the same file at
[S, C] is right); on Mali phones the same pattern fails to compile (LiteRT issue 9277). The float FC parser turns a
rank-3 FC into a 1x1 convolution; the integer one does not. Reading the input as [B*S, C] and writing [B*S, N] is the
same arithmetic on the same bytes, so the rewrite changes no number: it only moves the leading dims out of the FC.

litert-torch folds a reshape written in torch back into the FC (keep_num_dims), so this runs on the converted
file, before quantization. Static shapes only: an FC whose input has a dynamic dimension is left as it is.
"""
from __future__ import annotations

import math


from ..core.tflite_edit import add_tensor, pack, reshape_op, text as _text


def _candidate(graph, op, fc_code: int):
    """(input, output) tensors of a static FC that reads a rank-3+ input, else None."""
    if op.opcodeIndex != fc_code or op.inputs is None or len(op.inputs) == 0 or op.inputs[0] < 0:
        return None
    x, y = graph.tensors[int(op.inputs[0])], graph.tensors[int(op.outputs[0])]
    if x.shape is None or y.shape is None or len(x.shape) < 3:
        return None
    for t in (x, y):
        sig = t.shapeSignature
        if sig is not None and len(sig) and min(sig) < 0:
            return None
    return x, y


def fc_rank2(data: bytes) -> tuple[bytes, int]:
    """(the model with every static rank-3+ FULLY_CONNECTED carried at rank 2, how many were rewritten)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    if any(getattr(b, "offset", 0) for b in model.buffers or []):
        return data, 0                          # weights stored outside the flatbuffer: left alone
    fc = next((i for i, c in enumerate(model.operatorCodes or [])
               if max(c.builtinCode, c.deprecatedBuiltinCode) == schema.BuiltinOperator.FULLY_CONNECTED), None)
    if fc is None:
        return data, 0
    count = 0
    for graph in model.subgraphs:
        ops = []
        for op in graph.operators or []:
            found = _candidate(graph, op, fc)
            if found is None:
                ops.append(op)
                continue
            x, y = found
            rows = math.prod(int(d) for d in x.shape[:-1])
            # names must stay unique (the quantizer keys its work by tensor name); one FC input may feed several FCs
            x2 = add_tensor(schema, graph, f"{_text(x.name)}/rank2_{count}", [rows, int(x.shape[-1])], x.type, 0)
            inputs, outputs = [int(i) for i in op.inputs], [int(i) for i in op.outputs]
            ops.append(reshape_op(schema, model, graph, inputs[0], x2, [rows, int(x.shape[-1])]))
            op.inputs = [x2, *inputs[1:]]
            ops.append(op)
            if len(y.shape) > 2:            # keep_num_dims: the FC now writes [rows, N]; the graph reads y's shape
                y2 = add_tensor(schema, graph, f"{_text(y.name)}/rank2_{count}", [rows, int(y.shape[-1])], y.type, 0)
                ops.append(reshape_op(schema, model, graph, y2, outputs[0], [int(d) for d in y.shape]))
                op.outputs = [y2, *outputs[1:]]
                op.builtinOptions.keepNumDims = False
            count += 1
        graph.operators = ops
    if not count:
        return data, 0
    return pack(model, len(data)), count
