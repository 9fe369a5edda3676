"""Static reading of a .tflite flatbuffer, without TensorFlow and without compiling anything.

`read_model_info(path)` returns a `ModelInfo`: every operator (type name, input/output tensors),
every tensor (shape, dtype, constant or not, bytes), and the signatures. Bad input raises
`InvalidModelError` with a message that says what is wrong with the file.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

_TFLITE_IDENTIFIER = b"TFL3"
_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 5: "string", 6: "bool", 7: "int16",
           8: "complex64", 9: "int8", 10: "float64", 11: "complex128", 12: "uint64", 14: "uint32", 15: "uint16",
           16: "int4"}


_NUMERIC = {"float32", "float16", "int32", "int64", "int8", "uint8", "int16", "float64", "bool"}


class InvalidModelError(ValueError):
    """The file is not a readable LiteRT (.tflite) model."""


@dataclass
class TensorInfo:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    is_constant: bool
    nbytes: int                      # bytes of constant data (0 for runtime tensors)
    shape_signature: tuple[int, ...] | None = None  # -1 marks a dynamic dimension

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_dynamic(self) -> bool:
        return bool(self.shape_signature) and any(d < 0 for d in self.shape_signature)


@dataclass
class OpInfo:
    index: int                       # position in its subgraph's operator list (the delegate's node index)
    op: str                          # builtin name, e.g. "GATHER_ND"; custom ops as "CUSTOM:<code>"
    inputs: list[int]                # tensor indices (-1 = optional input absent)
    outputs: list[int]
    subgraph: int = 0
    options: dict = field(default_factory=dict)  # scalar builtin options, e.g. {"axis": 0} for GATHER


@dataclass
class SignatureInfo:
    key: str
    subgraph: int
    inputs: dict[str, TensorInfo]
    outputs: dict[str, TensorInfo]


@dataclass
class ModelInfo:
    path: str | None
    size_bytes: int
    ops: list[OpInfo]
    tensors: list[list[TensorInfo]]  # per subgraph
    signatures: list[SignatureInfo]
    graph_inputs: list[list[int]] = field(default_factory=list)   # per subgraph
    graph_outputs: list[list[int]] = field(default_factory=list)
    small_constants: dict[tuple[int, int], np.ndarray] = field(default_factory=dict, repr=False)

    def constant_value(self, index: int, subgraph: int = 0) -> np.ndarray | None:
        """Value of a small constant tensor (≤ 4 KiB), else None."""
        return self.small_constants.get((subgraph, index))

    def tensor(self, index: int, subgraph: int = 0) -> TensorInfo:
        return self.tensors[subgraph][index]

    def op_histogram(self) -> dict[str, int]:
        return dict(Counter(op.op for op in self.ops).most_common())

    def has_op(self, name: str) -> bool:
        return any(op.op == name for op in self.ops)

    def ops_named(self, name: str) -> list[OpInfo]:
        return [op for op in self.ops if op.op == name]

    @property
    def num_ops(self) -> int:
        return len(self.ops)

    def high_rank_tensors(self, max_rank: int = 4) -> list[tuple[TensorInfo, OpInfo | None]]:
        """Tensors of rank > max_rank, each with the op that produces it (None for graph inputs/constants)."""
        producers = {(op.subgraph, t): op for op in self.ops for t in op.outputs}
        found = []
        for sg, tensors in enumerate(self.tensors):
            for t in tensors:
                if t.rank > max_rank:
                    found.append((t, producers.get((sg, t.index))))
        return found

    def constants_by_size(self) -> list[TensorInfo]:
        return sorted((t for ts in self.tensors for t in ts if t.is_constant), key=lambda t: -t.nbytes)

    @property
    def constant_bytes(self) -> int:
        return sum(t.nbytes for ts in self.tensors for t in ts if t.is_constant)

    def producers(self, subgraph: int = 0) -> dict[int, OpInfo]:
        return {t: op for op in self.ops if op.subgraph == subgraph for t in op.outputs}

    def consumers(self, subgraph: int = 0) -> dict[int, list[OpInfo]]:
        users: dict[int, list[OpInfo]] = {}
        for op in self.ops:
            if op.subgraph == subgraph:
                for t in op.inputs:
                    if t >= 0:
                        users.setdefault(t, []).append(op)
        return users


def _load_bytes(model: str | os.PathLike | bytes) -> tuple[bytes, str | None]:
    if isinstance(model, (bytes, bytearray)):
        return bytes(model), None
    path = Path(model)
    if not path.exists():
        raise InvalidModelError(f"{path}: no such file")
    if path.is_dir():
        raise InvalidModelError(f"{path}: is a directory, not a .tflite file")
    data = path.read_bytes()
    return data, str(path)


def _describe_not_tflite(data: bytes) -> str:
    head = data[:16]
    if not data.strip(b"\x00"):
        return f"all {len(data)} bytes are zero (an interrupted download or copy?), not a model"
    if head[:4] == b"PK\x03\x04":
        return "a zip archive (a .litertlm / .task bundle or a PyTorch checkpoint?), not a bare .tflite"
    # ONNX is a protobuf ModelProto: field 1 (ir_version, a small varint) first, then producer strings
    looks_onnx = data[:1] == b"\x08" and 1 <= data[1] <= 15 and data[2:3] in (b"\x12", b"\x1a", b"\x3a", b"\x42")
    if looks_onnx or b"onnx" in data[:64].lower() or b"pytorch" in data[:64].lower():
        return "looks like an ONNX model, not LiteRT; convert the PyTorch model with litert-torch instead"
    if data.startswith(b"version https://git-lfs"):
        return "a Git LFS pointer file, not the model itself (fetch the real file: git lfs pull)"
    try:
        data[:256].decode("utf-8")
        return "a text file, not a flatbuffer"
    except UnicodeDecodeError:
        return f"not a LiteRT flatbuffer (bytes 4..8 are {head[4:8]!r}, expected {_TFLITE_IDENTIFIER!r})"


def _scalar_options(options) -> dict:
    if options is None:
        return {}
    return {k: v for k, v in vars(options).items() if isinstance(v, (bool, int, float, str))}


def read_model_info(model: str | os.PathLike | bytes) -> ModelInfo:
    """Parse a .tflite (path or bytes) into a `ModelInfo`. Raises `InvalidModelError` on bad input."""
    data, path = _load_bytes(model)
    where = path or "<bytes>"
    if not data:
        raise InvalidModelError(f"{where}: empty file")
    if len(data) < 8 or data[4:8] != _TFLITE_IDENTIFIER:
        raise InvalidModelError(f"{where}: {_describe_not_tflite(data)}")
    from ai_edge_litert import schema_py_generated as schema

    try:
        fb = schema.Model.GetRootAsModel(data, 0)
        model_t = schema.ModelT.InitFromObj(fb)
    except Exception as exc:  # flatbuffers raises struct.error / IndexError on truncation
        raise InvalidModelError(f"{where}: truncated or corrupt flatbuffer; the file has {len(data)} bytes "
                                f"({type(exc).__name__}: {exc})") from exc
    if not model_t.subgraphs:
        raise InvalidModelError(f"{where}: the model has no subgraphs")

    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    codes = []
    for oc in model_t.operatorCodes or []:
        code = max(oc.builtinCode, oc.deprecatedBuiltinCode)
        name = names.get(code, f"BUILTIN_{code}")
        if name == "CUSTOM":
            custom = oc.customCode.decode() if isinstance(oc.customCode, bytes) else oc.customCode
            name = f"CUSTOM:{custom}"
        codes.append(name)

    buffers = model_t.buffers or []
    all_tensors, ops, g_in, g_out = [], [], [], []
    small: dict[tuple[int, int], np.ndarray] = {}
    for sg_i, sg in enumerate(model_t.subgraphs):
        tensors = []
        for t_i, t in enumerate(sg.tensors or []):
            buf = buffers[t.buffer] if 0 <= t.buffer < len(buffers) else None
            nbytes = 0
            if buf is not None:
                if buf.data is not None:
                    nbytes = len(buf.data)
                elif buf.size:
                    nbytes = int(buf.size)
            name = t.name.decode(errors="replace") if isinstance(t.name, bytes) else (t.name or f"t{t_i}")
            shape = tuple(int(d) for d in (t.shape if t.shape is not None else ()))
            sig = tuple(int(d) for d in t.shapeSignature) if t.shapeSignature is not None else None
            dtype = _DTYPES.get(t.type, f"type{t.type}")
            tensors.append(TensorInfo(t_i, name, shape, dtype, nbytes > 0, nbytes, sig))
            if 0 < nbytes <= 4096 and buf is not None and buf.data is not None and dtype in _NUMERIC:
                try:
                    value = np.frombuffer(bytes(bytearray(buf.data)), dtype=np.dtype(dtype).newbyteorder("<"))
                    small[(sg_i, t_i)] = value.reshape(shape) if value.size == int(np.prod(shape)) else value
                except ValueError:
                    pass
        all_tensors.append(tensors)
        for o_i, op in enumerate(sg.operators or []):
            ops.append(OpInfo(o_i, codes[op.opcodeIndex] if op.opcodeIndex < len(codes) else "UNKNOWN",
                              [int(i) for i in (op.inputs if op.inputs is not None else [])],
                              [int(i) for i in (op.outputs if op.outputs is not None else [])], sg_i,
                              _scalar_options(op.builtinOptions)))
        g_in.append([int(i) for i in (sg.inputs if sg.inputs is not None else [])])
        g_out.append([int(i) for i in (sg.outputs if sg.outputs is not None else [])])

    signatures = []
    for sd in model_t.signatureDefs or []:
        key = sd.signatureKey.decode() if isinstance(sd.signatureKey, bytes) else sd.signatureKey
        sg = sd.subgraphIndex

        def _map(entries, sg=sg):
            out = {}
            for e in entries or []:
                n = e.name.decode() if isinstance(e.name, bytes) else e.name
                out[n] = all_tensors[sg][e.tensorIndex]
            return out

        signatures.append(SignatureInfo(key, sg, _map(sd.inputs), _map(sd.outputs)))
    return ModelInfo(path, len(data), ops, all_tensors, signatures, g_in, g_out, small)


def numpy_dtype(dtype: str) -> np.dtype:
    return np.dtype({"bool": "bool"}.get(dtype, dtype))
