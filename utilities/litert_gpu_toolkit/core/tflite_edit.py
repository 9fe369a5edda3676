"""Small edits to a .tflite's flatbuffer through LiteRT's own schema objects (no TensorFlow): find or add an
operator code, pack the edited model. Used by the passes that rewrite a converted file (quantize.fc_rank2,
diagnose.graph_bisect, diagnose.respell)."""
from __future__ import annotations

import numpy as np


def opcode_index(schema, model, builtin: int) -> int:
    """The index of `builtin`'s operator code in `model`, added (version 1) when the model has none."""
    for i, c in enumerate(model.operatorCodes or []):
        if max(c.builtinCode, c.deprecatedBuiltinCode) == builtin:
            return i
    code = schema.OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode, code.version = builtin, min(builtin, 127), 1
    model.operatorCodes.append(code)
    return len(model.operatorCodes) - 1


def pack(model, size_hint: int) -> bytes:
    """The edited `model` (a schema ModelT) as .tflite bytes."""
    import flatbuffers

    builder = flatbuffers.Builder(size_hint + 4096)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def text(name) -> str:
    """A tensor name as str (the schema objects hold bytes)."""
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)


def add_tensor(schema, graph, name: str, shape, dtype: int, buffer: int = 0) -> int:
    """A new tensor in `graph` (buffer 0: a runtime value); its index."""
    t = schema.TensorT()
    t.name, t.shape, t.type, t.buffer = name, [int(d) for d in shape], dtype, buffer
    graph.tensors.append(t)
    return len(graph.tensors) - 1


def reshape_op(schema, model, graph, src: int, dst: int, shape):
    """A RESHAPE operator from tensor `src` to tensor `dst` with a constant int32 shape tensor (added to `model`)."""
    buf = schema.BufferT()
    buf.data = np.asarray(shape, np.int32).view(np.uint8)
    model.buffers.append(buf)
    shape_t = add_tensor(schema, graph, f"{text(graph.tensors[dst].name)}/shape", [len(shape)],
                         schema.TensorType.INT32, len(model.buffers) - 1)
    op = schema.OperatorT()
    op.opcodeIndex = opcode_index(schema, model, schema.BuiltinOperator.RESHAPE)
    op.inputs, op.outputs = [src, shape_t], [dst]
    op.builtinOptionsType = schema.BuiltinOptions.ReshapeOptions
    op.builtinOptions = schema.ReshapeOptionsT()
    op.builtinOptions.newShape = [int(d) for d in shape]
    return op
