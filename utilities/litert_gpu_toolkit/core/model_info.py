"""Static reading of a .tflite flatbuffer, without TensorFlow and without compiling anything.

`read_model_info(path)` returns a `ModelInfo`: every operator (type name, input/output tensors),
every tensor (shape, dtype, constant or not, bytes), and the signatures. Bad input raises
`InvalidModelError` with a message that says what is wrong with the file.
"""
from __future__ import annotations

import errno
import mmap
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .files import SpecialFileError, open_regular

_TFLITE_IDENTIFIER = b"TFL3"
_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 5: "string", 6: "bool", 7: "int16",
           8: "complex64", 9: "int8", 10: "float64", 11: "complex128", 12: "uint64", 14: "uint32", 15: "uint16",
           16: "uint16", 17: "int4", 18: "bfloat16", 19: "int2", 20: "uint4"}


_NUMERIC = {"float32", "float16", "int32", "int64", "int8", "uint8", "int16", "float64", "bool"}


class InvalidModelError(ValueError):
    """The file is not a readable LiteRT (.tflite) model."""


# a tensor whose declared size passes this many bytes is refused as corrupt (no real .tflite tensor
# comes near it; a flipped bit in a shape does): it would exhaust memory long before the runtime says why
MAX_TENSOR_BYTES = 1 << 36
_HEADER_BYTES = 256   # read first to tell a model from other files, before the whole file is touched
_ITEMSIZE = {"float32": 4, "float16": 2, "int32": 4, "uint8": 1, "int64": 8, "string": 1, "bool": 1, "int16": 2,
             "complex64": 8, "int8": 1, "float64": 8, "complex128": 16, "uint64": 8, "uint32": 4, "uint16": 2,
             "int4": 1, "bfloat16": 2, "int2": 1, "uint4": 1}   # (int4 / int2 / uint4 are packed: an upper bound)


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
    subgraph_names: list[str] = field(default_factory=list)      # "" where the file names none

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


def _open_checked(path: Path):
    """Open `path` for reading, turning every OS-level failure into an `InvalidModelError` that says why.
    A FIFO, device or socket is refused before anything is read (`files.open_regular`: never a hang)."""
    try:
        return open_regular(path)
    except SpecialFileError as exc:
        raise InvalidModelError(f"{exc} (a .tflite model is a file)") from None
    except FileNotFoundError:
        if path.is_symlink():
            raise InvalidModelError(f"{path}: a broken symbolic link (it points to {os.readlink(path)!r}, "
                                    "which does not exist)") from None
        raise InvalidModelError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InvalidModelError(f"{path}: is a directory, not a .tflite file") from None
    except PermissionError:
        raise InvalidModelError(f"{path}: permission denied (the file is not readable by this user)") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InvalidModelError(f"{path}: a symbolic link loop (too many levels of links), not a file") from None
        raise InvalidModelError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _load_bytes(model: str | os.PathLike | bytes):
    """(the model's bytes, its path). A file is checked by its header first, then memory-mapped, never
    read whole: a 3 GB file that is not a model costs 256 bytes, and one that is costs page cache only."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        _check_header(data, "<bytes>")
        return data, None
    if not isinstance(model, (str, os.PathLike)):
        raise InvalidModelError(f"expected a .tflite path or bytes, got {type(model).__name__}")
    path = Path(model)
    with _open_checked(path) as f:
        try:
            head = f.read(_HEADER_BYTES)
            _check_header(head, str(path), f)
            size = os.fstat(f.fileno()).st_size
            if size < _HEADER_BYTES:
                return head, str(path)
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise InvalidModelError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return data, str(path)


def _check_header(head: bytes, where: str, rest=None) -> None:
    """Raise unless `head` (a file's first bytes; `rest` = the open file, to read on) starts a .tflite."""
    if not head:
        raise InvalidModelError(f"{where}: empty file")
    if len(head) >= 8 and head[4:8] == _TFLITE_IDENTIFIER:
        return
    if rest is not None and not head.strip(b"\x00"):  # all zero so far: is the whole file zero?
        size = len(head)
        while size <= 1 << 26:
            chunk = rest.read(1 << 20)
            if not chunk:
                raise InvalidModelError(f"{where}: all {size} bytes are zero (an interrupted download or copy?), "
                                        "not a model")
            if chunk.strip(b"\x00"):
                break
            size += len(chunk)
        raise InvalidModelError(f"{where}: the first bytes are zero, not a LiteRT flatbuffer header")
    raise InvalidModelError(f"{where}: {_describe_not_tflite(head)}")


def _describe_not_tflite(data: bytes) -> str:
    """What `data` (the first bytes of a file) looks like, for a file that is not a .tflite."""
    head = data[:16]
    if len(data) < 8:
        return f"only {len(data)} byte(s): too short to be a model (an interrupted download or copy?)"
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
        text = data[:256].decode("utf-8")
        if all(c.isprintable() or c in "\r\n\t" for c in text):
            return "a text file, not a flatbuffer"
    except UnicodeDecodeError:
        pass
    return f"not a LiteRT flatbuffer (bytes 4..8 are {head[4:8]!r}, expected {_TFLITE_IDENTIFIER!r})"


def _scalar_options(options) -> dict:
    if options is None:
        return {}
    return {k: v for k, v in vars(options).items() if isinstance(v, (bool, int, float, str))}


def read_model_info(model: str | os.PathLike | bytes) -> ModelInfo:
    """Parse a .tflite (path or bytes) into a `ModelInfo`. Raises `InvalidModelError` on bad input.

    Every index the file holds (operator codes, tensors of ops, graph inputs/outputs and signatures,
    signature graphs) is bounds-checked, every shape must be non-negative and describe fewer than
    `MAX_TENSOR_BYTES` bytes, and text fields that are not UTF-8 are refused: a corrupt file is an
    `InvalidModelError`, never an IndexError / UnicodeDecodeError / MemoryError from deep inside.
    """
    data, path = _load_bytes(model)
    where = path or "<bytes>"
    from ai_edge_litert import schema_py_generated as schema

    try:
        fb = schema.Model.GetRootAsModel(data, 0)
        model_t = schema.ModelT.InitFromObj(fb)
        if not model_t.subgraphs:
            raise InvalidModelError(f"{where}: the model has no subgraphs")
        info = _model_info(schema, model_t, path, len(data))
        _validate(info, len(model_t.operatorCodes or []))
    except InvalidModelError:
        raise
    except _Corrupt as exc:
        raise InvalidModelError(f"{where}: corrupt flatbuffer: {exc}") from None
    except (Exception, MemoryError, RecursionError) as exc:  # noqa: BLE001 - struct.error / IndexError / ... on a damaged file
        raise InvalidModelError(f"{where}: truncated or corrupt flatbuffer; the file has {len(data)} bytes "
                                f"({type(exc).__name__}: {str(exc)[:200]})") from None
    return info


class _Corrupt(Exception):
    """A structural problem found while reading (an index out of range, an impossible shape)."""


def _text(value, what: str) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise _Corrupt(f"{what} is not UTF-8 text ({value[:24]!r})") from None
    return str(value)


def _ints(values, what: str) -> list[int]:
    return [int(v) for v in (values if values is not None else [])]


def _model_info(schema, model_t, path: str | None, size: int) -> ModelInfo:
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    codes = []
    for oc in model_t.operatorCodes or []:
        code = max(oc.builtinCode, oc.deprecatedBuiltinCode)
        name = names.get(code, f"BUILTIN_{code}")
        if name == "CUSTOM":
            name = f"CUSTOM:{_text(oc.customCode, 'a custom op code')}"
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
            shape = tuple(_ints(t.shape, "shape"))
            sig = tuple(_ints(t.shapeSignature, "shape signature")) if t.shapeSignature is not None else None
            if not 0 <= t.type < 64:
                raise _Corrupt(f"tensor {name!r} (graph {sg_i}) has type code {t.type}, which no LiteRT type has")
            dtype = _DTYPES.get(t.type, f"type{t.type}")
            _check_shape(sg_i, name, shape, sig, dtype)
            tensors.append(TensorInfo(t_i, name, shape, dtype, nbytes > 0, nbytes, sig))
            if 0 < nbytes <= 4096 and buf is not None and buf.data is not None and dtype in _NUMERIC:
                try:
                    value = np.frombuffer(bytes(bytearray(buf.data)), dtype=np.dtype(dtype).newbyteorder("<"))
                    small[(sg_i, t_i)] = value.reshape(shape) if value.size == int(np.prod(shape)) else value
                except ValueError:
                    pass
        all_tensors.append(tensors)
        for o_i, op in enumerate(sg.operators or []):
            if not 0 <= op.opcodeIndex < len(codes):
                raise _Corrupt(f"operator {o_i} of graph {sg_i} uses operator code {op.opcodeIndex}; "
                               f"the model has {len(codes)}")
            ops.append(OpInfo(o_i, codes[op.opcodeIndex], _ints(op.inputs, "op inputs"),
                              _ints(op.outputs, "op outputs"), sg_i, _scalar_options(op.builtinOptions)))
        g_in.append(_ints(sg.inputs, "graph inputs"))
        g_out.append(_ints(sg.outputs, "graph outputs"))

    signatures = []
    for s_i, sd in enumerate(model_t.signatureDefs or []):
        key = _text(sd.signatureKey, f"signature {s_i}'s key")
        sg = sd.subgraphIndex
        if not 0 <= sg < len(all_tensors):
            raise _Corrupt(f"signature {key!r} names graph {sg}; the model has {len(all_tensors)}")

        def _map(entries, sg=sg, key=key):
            out = {}
            for e in entries or []:
                n = _text(e.name, f"a tensor name of signature {key!r}")
                if not 0 <= e.tensorIndex < len(all_tensors[sg]):
                    raise _Corrupt(f"signature {key!r} entry {n!r} names tensor {e.tensorIndex}; graph {sg} has "
                                   f"{len(all_tensors[sg])}")
                out[n] = all_tensors[sg][e.tensorIndex]
            return out

        signatures.append(SignatureInfo(key, sg, _map(sd.inputs), _map(sd.outputs)))
    sg_names = [_text(sg.name, "a subgraph name") if sg.name else "" for sg in model_t.subgraphs]
    return ModelInfo(path, size, ops, all_tensors, signatures, g_in, g_out, small, sg_names)


def _check_shape(sg: int, name: str, shape: tuple[int, ...], sig: tuple[int, ...] | None, dtype: str) -> None:
    if any(d < 0 for d in shape):
        raise _Corrupt(f"tensor {name!r} (graph {sg}) has a negative dimension in its shape {list(shape)}")
    if sig is not None and any(d < -1 for d in sig):
        raise _Corrupt(f"tensor {name!r} (graph {sg}) has shape signature {list(sig)} for shape {list(shape)}")
    nbytes = _ITEMSIZE.get(dtype, 8)
    for d in shape:
        nbytes *= d
        if nbytes > MAX_TENSOR_BYTES:
            raise _Corrupt(f"tensor {name!r} (graph {sg}) declares shape {list(shape)} {dtype}: more than "
                           f"{MAX_TENSOR_BYTES >> 30} GiB, beyond any real model (a damaged shape?)")


def _validate(info: ModelInfo, num_codes: int) -> None:
    """Every tensor index an op or a graph names must exist (-1 = an absent optional tensor)."""
    for op in info.ops:
        n = len(info.tensors[op.subgraph])
        for kind, indices, low in (("input", op.inputs, -1), ("output", op.outputs, -1)):
            bad = [i for i in indices if not low <= i < n]
            if bad:
                raise _Corrupt(f"operator {op.index} ({op.op}, graph {op.subgraph}) names {kind} tensor(s) {bad}; "
                               f"the graph has {n}")
    for sg, (ins, outs) in enumerate(zip(info.graph_inputs, info.graph_outputs)):
        n = len(info.tensors[sg])
        bad = [i for i in ins + outs if not 0 <= i < n]
        if bad:
            raise _Corrupt(f"graph {sg}'s inputs/outputs name tensor(s) {bad}; the graph has {n}")


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of a tensor dtype name; TypeError for types numpy has no equivalent of (e.g. int4)."""
    if dtype not in _NUMERIC and dtype not in ("uint16", "uint32", "uint64", "complex64", "complex128"):
        raise TypeError(f"the tensor type {dtype} has no numpy equivalent")
    return np.dtype(dtype)
