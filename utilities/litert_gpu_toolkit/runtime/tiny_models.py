"""Hand-built .tflite flatbuffers for probing the runtime, with no converter and no torch.

`add_model_bytes()` is the GPU probe: a one-op graph (`out = x + y`, float32 [1, 8, 8, 4]) with a
signature, small enough to compile in milliseconds. If the strict GPU compile of this graph fails,
the failure is the machine (no adapter, no driver), never the model.
"""
from __future__ import annotations

import flatbuffers
from ai_edge_litert import schema_py_generated as schema

PROBE_SHAPE = (1, 8, 8, 4)


def _tensor(name: str, shape: tuple[int, ...], buffer: int) -> schema.TensorT:
    t = schema.TensorT()
    t.name = name
    t.shape = list(shape)
    t.type = schema.TensorType.FLOAT32
    t.buffer = buffer
    return t


def _io_map(names_to_index: dict[str, int]) -> list[schema.TensorMapT]:
    maps = []
    for name, index in names_to_index.items():
        m = schema.TensorMapT()
        m.name, m.tensorIndex = name, index
        maps.append(m)
    return maps


def add_model_bytes(shape: tuple[int, ...] = PROBE_SHAPE) -> bytes:
    """Serialized model computing `out = x + y` with signature key `serving_default`."""
    model = schema.ModelT()
    model.version = 3
    model.buffers = [schema.BufferT() for _ in range(4)]  # buffer 0 is the conventional empty one
    code = schema.OperatorCodeT()
    code.builtinCode = schema.BuiltinOperator.ADD
    code.deprecatedBuiltinCode = schema.BuiltinOperator.ADD
    code.version = 1
    model.operatorCodes = [code]

    graph = schema.SubGraphT()
    graph.name = "main"
    graph.tensors = [_tensor("x", shape, 1), _tensor("y", shape, 2), _tensor("out", shape, 3)]
    graph.inputs, graph.outputs = [0, 1], [2]
    op = schema.OperatorT()
    op.opcodeIndex = 0
    op.inputs, op.outputs = [0, 1], [2]
    op.builtinOptionsType = schema.BuiltinOptions.AddOptions
    op.builtinOptions = schema.AddOptionsT()
    graph.operators = [op]
    model.subgraphs = [graph]

    sig = schema.SignatureDefT()
    sig.signatureKey = "serving_default"
    sig.subgraphIndex = 0
    sig.inputs = _io_map({"x": 0, "y": 1})
    sig.outputs = _io_map({"out": 2})
    model.signatureDefs = [sig]

    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def bucketed_add_model_bytes(buckets: dict[str, tuple[int, ...]] | None = None,
                             names: tuple[str, str] = ("input_ids", "attention_mask")) -> bytes:
    """A shape-bucket model without a converter: one subgraph and signature per bucket (key -> input shape; default
    seq_4 [1, 4] and seq_8 [1, 8]), each computing `out = a + b` on float32 inputs named `names` (so a padded
    position reads 0). Tests the runners' bucket pick and padding (`phone/protocol.py`, BUCKET_REQUESTS)."""
    buckets = buckets or {"seq_4": (1, 4), "seq_8": (1, 8)}
    model = schema.ModelT()
    model.version = 3
    model.buffers = [schema.BufferT()]
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.ADD
    code.version = 1
    model.operatorCodes = [code]
    model.subgraphs, model.signatureDefs = [], []
    for key, shape in buckets.items():
        graph = schema.SubGraphT()
        graph.name = key
        graph.tensors = []
        for name in (*names, "out"):
            model.buffers.append(schema.BufferT())
            graph.tensors.append(_tensor(name, shape, len(model.buffers) - 1))
        graph.inputs, graph.outputs = [0, 1], [2]
        op = schema.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = 0, [0, 1], [2]
        op.builtinOptionsType = schema.BuiltinOptions.AddOptions
        op.builtinOptions = schema.AddOptionsT()
        graph.operators = [op]
        sig = schema.SignatureDefT()
        sig.signatureKey, sig.subgraphIndex = key, len(model.subgraphs)
        sig.inputs = _io_map({names[0]: 0, names[1]: 1})
        sig.outputs = _io_map({"out": 2})
        model.subgraphs.append(graph)
        model.signatureDefs.append(sig)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


_NP_TO_TFL = {"float32": "FLOAT32", "int32": "INT32", "int64": "INT64", "bool": "BOOL", "float16": "FLOAT16"}


def single_op_model_bytes(op: str, inputs: list[tuple[str, tuple[int, ...], "object | None"]],
                          outputs: list[tuple[str, tuple[int, ...]]], *, options=None, options_type: str | None = None,
                          graph_outputs_extra: list[int] | None = None, op_version: int = 1) -> bytes:
    """A one-op model for graph-structure tests (the lint), built without any converter.

    `inputs`: (name, shape, constant value or None for a runtime input); `outputs`: (name, shape).
    Constant values are numpy arrays; runtime inputs are float32. `options`: a schema `*OptionsT`
    with `options_type` its BuiltinOptions name. Useful for patterns the current converter no
    longer emits (SPLIT, PADV2 with -inf, runtime BROADCAST_TO) but older models still contain.
    """
    import numpy as np

    model = schema.ModelT()
    model.version = 3
    model.buffers = [schema.BufferT()]
    code = schema.OperatorCodeT()
    code.builtinCode = getattr(schema.BuiltinOperator, op)
    code.deprecatedBuiltinCode = min(code.builtinCode, 127)
    code.version = op_version           # the runtime registers some ops from a later version only (BROADCAST_TO: 2)
    model.operatorCodes = [code]
    graph = schema.SubGraphT()
    graph.tensors, graph.inputs = [], []
    sig_in = {}
    for name, shape, value in inputs:
        buf = schema.BufferT()
        t = _tensor(name, shape, len(model.buffers))
        if value is not None:
            arr = np.ascontiguousarray(value)
            buf.data = list(arr.tobytes())
            t.type = getattr(schema.TensorType, _NP_TO_TFL[arr.dtype.name])
        else:
            graph.inputs.append(len(graph.tensors))
            sig_in[name] = len(graph.tensors)
        model.buffers.append(buf)
        graph.tensors.append(t)
    out_idx = []
    for name, shape in outputs:
        model.buffers.append(schema.BufferT())
        out_idx.append(len(graph.tensors))
        graph.tensors.append(_tensor(name, shape, len(model.buffers) - 1))
    node = schema.OperatorT()
    node.opcodeIndex = 0
    node.inputs = list(range(len(inputs)))
    node.outputs = out_idx
    if options is not None:
        node.builtinOptionsType = getattr(schema.BuiltinOptions, options_type)
        node.builtinOptions = options
    graph.operators = [node]
    graph.outputs = out_idx + list(graph_outputs_extra or [])
    model.subgraphs = [graph]
    sig = schema.SignatureDefT()
    sig.signatureKey, sig.subgraphIndex = "serving_default", 0
    sig.inputs = _io_map(sig_in)
    sig.outputs = _io_map({name: i for (name, _), i in zip(outputs, out_idx)})
    model.signatureDefs = [sig]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())
