"""Small edits to a .tflite's flatbuffer through LiteRT's own schema objects (no TensorFlow): find or add an
operator code, pack the edited model. Used by the passes that rewrite a converted file (quantize.fc_rank2,
diagnose.graph_bisect, diagnose.respell)."""
from __future__ import annotations


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
