"""Inputs for a GPU check: seeded random arrays that respect the graph, or the caller's own arrays.

Random inputs (the default), per signature input, each from its own generator seeded by
(`seed`, signature, input name) so adding a signature never changes another one's numbers:
  * float inputs: standard normal;
  * integer inputs: uniform in [low, high). `high` is read from the graph when the input indexes a
    table -- directly or through RESHAPE / SQUEEZE / EXPAND_DIMS / TRANSPOSE / SLICE / integer CAST:
    the row count of an EMBEDDING_LOOKUP table, the size of a GATHER's axis, the leading dims of a
    GATHER_ND, the depth of a ONE_HOT. A token id therefore never runs off its embedding. Integer
    inputs that index nothing (masks, flags, lengths) get [0, 2). The caller can override either
    (`int_ranges={"input_ids": (0, 30522)}`);
  * bool inputs: a fair coin.
Dynamic dimensions (-1 in the shape signature) become 1, or the caller's shape
(`shapes={"x": (1, 128)}`); the runtime resizes the input before it runs.

Caller arrays may be given as `{name: array}` (a name that several signatures share feeds all of
them), `{"signature/name": array}`, `{signature: {name: array}}`, or a path to an `.npz` holding
such keys. The same forms name reference outputs (`reference=`), with output names. A caller array must
have the signature's dtype exactly (never cast) and no NaN; a reference output must have no NaN and at
least one finite value (`check_reference`). An .npz path that is a FIFO or a device is refused unread.

A model without signature defs is exposed by ai-edge-litert under `PLACEHOLDER_SIGNATURE`, with its
inputs and outputs named by tensor name; `model_signatures` describes it the same way.
"""
from __future__ import annotations

import os
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .files import SpecialFileError, open_regular
from .model_info import ModelInfo, SignatureInfo, TensorInfo, numpy_dtype

# the signature key ai-edge-litert 2.3.0 gives a model that has no signature defs (measured)
PLACEHOLDER_SIGNATURE = "<placeholder signature>"
DEFAULT_INT_RANGE = (0, 2)
# random inputs above this many bytes in all are refused (a damaged or absurd shape), not allocated
MAX_INPUT_BYTES = 1 << 30
# ops that carry an index tensor through unchanged in value (the bound still applies after them)
_INDEX_PASS_THROUGH = {"RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "SLICE", "STRIDED_SLICE", "CAST"}
_INT_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}


class InputError(ValueError):
    """The caller's arrays, shapes or ranges do not fit the model (the message says how)."""


@dataclass
class InputSpec:
    """How one input array of a check was made."""
    signature: str
    name: str
    shape: tuple[int, ...]
    dtype: str
    source: str            # e.g. "random normal", "random int in [0, 8000): rows of EMBEDDING_LOOKUP #2 table"
    dynamic: bool = False  # the model declares dynamic dimensions for this input

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


def model_signatures(info: ModelInfo) -> list[SignatureInfo]:
    """The model's signatures; for a model without signature defs, the runtime's placeholder for graph 0."""
    if info.signatures:
        return info.signatures
    tensors = info.tensors[0]
    ins = {tensors[i].name: tensors[i] for i in (info.graph_inputs[0] if info.graph_inputs else [])}
    outs = {tensors[i].name: tensors[i] for i in (info.graph_outputs[0] if info.graph_outputs else [])}
    return [SignatureInfo(PLACEHOLDER_SIGNATURE, 0, ins, outs)]


def integer_bound(info: ModelInfo, tensor: int, subgraph: int = 0) -> tuple[int, str] | None:
    """Exclusive upper bound for the values of integer tensor `tensor`, read from the tables it indexes."""
    consumers = info.consumers(subgraph)
    bounds: list[tuple[int, str]] = []
    frontier, seen = [tensor], set()
    while frontier:
        t = frontier.pop()
        if t in seen:
            continue
        seen.add(t)
        for op in consumers.get(t, []):
            ins = op.inputs
            if op.op == "EMBEDDING_LOOKUP" and ins[0] == t and len(ins) > 1:
                table = info.tensor(ins[1], subgraph)
                bounds.append((table.shape[0] if table.shape else 0, f"rows of the EMBEDDING_LOOKUP #{op.index} table"))
            elif op.op == "GATHER" and len(ins) > 1 and ins[1] == t:
                params = info.tensor(ins[0], subgraph)
                if params.shape:
                    axis = int(op.options.get("axis", 0)) % len(params.shape)
                    bounds.append((params.shape[axis], f"axis {axis} of the GATHER #{op.index} input"))
            elif op.op == "GATHER_ND" and len(ins) > 1 and ins[1] == t:
                params, index = info.tensor(ins[0], subgraph), info.tensor(t, subgraph)
                depth = index.shape[-1] if index.shape else 1
                dims = [d for d in params.shape[:depth] if d > 0]
                if dims:
                    bounds.append((min(dims), f"leading dims of the GATHER_ND #{op.index} input"))
            elif op.op == "ONE_HOT" and ins[0] == t and len(ins) > 1:
                depth = info.constant_value(ins[1], subgraph)
                if depth is not None and np.size(depth) == 1:
                    bounds.append((int(np.ravel(depth)[0]), f"depth of the ONE_HOT #{op.index}"))
            elif op.op in _INDEX_PASS_THROUGH and ins and ins[0] == t and op.outputs:
                if info.tensor(op.outputs[0], subgraph).dtype in _INT_DTYPES:
                    frontier.append(op.outputs[0])
    bounds = [b for b in bounds if b[0] > 0]
    return min(bounds) if bounds else None


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The named arrays of an .npz file; InputError for anything else (a FIFO or device is refused unread)."""
    path = Path(path)
    try:
        with open_regular(path) as fh:
            data = np.load(fh, allow_pickle=False)
            if not hasattr(data, "files"):  # np.load read a bare .npy array
                raise InputError(f"{path}: a single .npy array, not an .npz of named arrays (np.savez)")
            with data:
                arrays = {k: data[k] for k in data.files}
    except InputError:
        raise
    except SpecialFileError as exc:
        raise InputError(str(exc)) from None
    except FileNotFoundError:
        raise InputError(f"{path}: no such .npz file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not an .npz file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except (OSError, ValueError, EOFError, KeyError) as exc:
        raise InputError(f"{path}: not a readable .npz ({type(exc).__name__}: {exc})") from None
    except Exception as exc:  # noqa: BLE001 - zipfile.BadZipFile and friends from a damaged archive
        raise InputError(f"{path}: not a readable .npz ({type(exc).__name__}: {exc})") from None
    if not arrays:
        raise InputError(f"{path}: the .npz holds no arrays")
    return arrays


def split_by_signature(arrays, names: dict[str, list[str]], what: str = "input") -> dict[str, dict[str, np.ndarray]]:
    """Sort the caller's arrays into {signature: {name: array}}; `names` = {signature: [names]}."""
    if arrays is None:
        return {}
    if isinstance(arrays, (str, os.PathLike)):
        arrays = load_npz(arrays)
    if not isinstance(arrays, dict):
        raise InputError(f"{what}s must be a dict of arrays or an .npz path, got {type(arrays).__name__}")
    known = ", ".join(f"{s}/{n}" if len(names) > 1 else n for s, ns in names.items() for n in ns) or "none"
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, value in arrays.items():
        if isinstance(value, dict):
            if key not in names:
                raise InputError(f"unknown signature {key!r} in the {what}s; the model has: {', '.join(names)}")
            for name, arr in value.items():
                if name not in names[key]:
                    raise InputError(f"signature {key!r} has no {what} {name!r}; it has: {', '.join(names[key])}")
                out.setdefault(key, {})[name] = np.asarray(arr)
            continue
        sig, _, name = key.rpartition("/")
        if sig in names and name in names[sig]:
            out.setdefault(sig, {})[name] = np.asarray(value)
            continue
        targets = [s for s, ns in names.items() if key in ns]
        if not targets:
            raise InputError(f"the model has no {what} named {key!r}; its {what}s: {known}")
        for s in targets:
            out.setdefault(s, {})[key] = np.asarray(value)
    return out


def check_reference(sig: str, name: str, arr) -> None:
    """InputError unless reference output `sig/name` can judge anything: no NaN, and some finite value (an
    all-NaN reference would otherwise read as "the conversion changed the numbers"). +-inf where the source
    model gives it (masked logits) is kept: outputs are compared where the reference is finite."""
    a = np.asarray(arr)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.complexfloating)) or not a.size:
        return
    nan = int(np.count_nonzero(np.isnan(a)))
    if nan:
        raise InputError(f"reference for {sig}/{name}: {nan} of {a.size} values are NaN; a reference must be "
                         "the source model's numbers (NaN there is a bug in the source model or in saving it)")
    if not np.isfinite(a).any():
        raise InputError(f"reference for {sig}/{name}: no finite value (all {a.size} are +-inf): it cannot judge "
                         "any output")


def _lookup(table: dict | None, sig: str, name: str):
    if not table:
        return None
    return table.get(f"{sig}/{name}", table.get(name))


def _resolve_shape(sig: str, name: str, t: TensorInfo, wanted) -> tuple[int, ...]:
    declared = t.shape_signature if t.is_dynamic else t.shape
    if wanted is None:
        return tuple(1 if d < 0 else d for d in declared)
    wanted = tuple(int(d) for d in wanted)
    mismatch = any(d >= 0 and d != w for d, w in zip(declared, wanted))
    if len(wanted) != len(declared) or mismatch or min(wanted, default=1) < 1:
        raise InputError(
            f"{sig}/{name}: shape {list(wanted)} does not fit the model's {list(declared)} "
            "(-1 marks the dimensions that may change)"
        )
    return wanted


def fit_array(sig: str, name: str, t: TensorInfo, arr: np.ndarray) -> np.ndarray:
    """The caller's array for input `sig/name` (tensor `t`), or InputError: the shape must fit, the dtype must be
    the signature's (never cast: int64 ids or float64 features cast quietly would pass a check the real
    caller fails), and there must be no NaN (it makes every comparison meaningless; +-inf is kept: additive
    attention masks use -inf)."""
    try:
        want = numpy_dtype(t.dtype)
    except TypeError as exc:
        raise InputError(f"{sig}/{name}: {exc}") from None
    declared = t.shape_signature if t.is_dynamic else t.shape
    fits = len(arr.shape) == len(declared) and all(d < 0 or d == a for d, a in zip(declared, arr.shape))
    if not fits:
        raise InputError(
            f"{sig}/{name}: array shape {list(arr.shape)} does not fit the model's {list(declared)}"
            + ("" if t.is_dynamic else " (this input has no dynamic dimensions)")
        )
    if arr.dtype != want:
        raise InputError(
            f"{sig}/{name}: the model wants {t.dtype}, the array is {arr.dtype}; arrays are never cast "
            f"(a cast hides what the real caller will pass): save it as {t.dtype}, e.g. "
            f"np.savez(..., {name}=a.astype(np.{want.name}))"
        )
    nan = int(np.count_nonzero(np.isnan(arr))) if np.issubdtype(arr.dtype, np.floating) else 0
    if nan:
        raise InputError(f"{sig}/{name}: {nan} of {arr.size} values are NaN; a NaN input makes the outputs "
                         "NaN on every device, so nothing would be checked")
    return arr


def make_inputs(
    info: ModelInfo, given=None, *, seed: int = 0, shapes: dict | None = None, int_ranges: dict | None = None
) -> tuple[dict[str, dict[str, np.ndarray]], list[InputSpec], list[str]]:
    """Arrays for every input of every signature: ({signature: {name: array}}, how each was made, warnings).

    `given` (arrays or an .npz path, forms in the module docstring) replaces the random arrays it names;
    `shapes` and `int_ranges` are keyed by input name or "signature/name". Raises `InputError`.
    """
    sigs = model_signatures(info)
    names = {s.key: list(s.inputs) for s in sigs}
    provided = split_by_signature(given, names, "input")
    for table, what in ((shapes, "shape"), (int_ranges, "integer range")):
        for key in table or {}:
            sig, _, name = key.rpartition("/")
            if not any(key in ns or (sig == s and name in ns) for s, ns in names.items()):
                raise InputError(f"{what} given for {key!r}, which is not an input of the model")
    for key in int_ranges or {}:
        sig, _, name = key.rpartition("/")
        for s in sigs:
            t = s.inputs.get(key) or (s.inputs.get(name) if sig == s.key else None)
            if t is not None and t.dtype not in _INT_DTYPES:
                raise InputError(
                    f"integer range given for {key!r}, a {t.dtype} input: ranges apply to integer inputs only"
                )
    arrays: dict[str, dict[str, np.ndarray]] = {}
    specs: list[InputSpec] = []
    warnings: list[str] = []
    budget = MAX_INPUT_BYTES
    for s in sigs:
        for name, t in s.inputs.items():
            user = provided.get(s.key, {}).get(name)
            wanted_shape = _lookup(shapes, s.key, name)
            if user is not None:
                arr = fit_array(s.key, name, t, user)
                source = "caller array"
            else:
                shape = _resolve_shape(s.key, name, t, wanted_shape)
                try:
                    itemsize = numpy_dtype(t.dtype).itemsize
                except TypeError as exc:
                    raise InputError(f"{s.key}/{name}: cannot make random inputs: {exc}; pass arrays") from None
                need = int(np.prod([max(int(d), 1) for d in shape], dtype=object)) * itemsize  # a 0 dim saves nothing
                budget -= need
                if budget < 0:
                    raise InputError(
                        f"{s.key}/{name}: random inputs of shape {list(shape)} {t.dtype} would take "
                        f"{need / 2**30:.1f} GiB, beyond the {MAX_INPUT_BYTES >> 30} GiB budget for "
                        "generated inputs (a damaged shape? else pass your own arrays)"
                    )
                if t.is_dynamic and wanted_shape is None:
                    dims = [i for i, d in enumerate(t.shape_signature) if d < 0]
                    warnings.append(
                        f"{s.key}/{name}: dynamic dimension(s) {dims} set to 1; choose them with "
                        f"shapes={{'{name}': (...)}} or --shape {name}=..."
                    )
                rng = np.random.default_rng([seed, zlib.crc32(f"{s.key}/{name}".encode())])
                arr, source = _random(info, s, name, t, shape, rng, _lookup(int_ranges, s.key, name))
            arrays.setdefault(s.key, {})[name] = np.ascontiguousarray(arr)
            specs.append(InputSpec(s.key, name, tuple(arr.shape), str(arr.dtype), source, t.is_dynamic))
    return arrays, specs, warnings


def _random(info: ModelInfo, sig: SignatureInfo, name: str, t: TensorInfo, shape, rng, user_range):
    dtype = numpy_dtype(t.dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5, "random bool"
    if np.issubdtype(dtype, np.integer):
        if user_range is not None:
            low, high = (int(v) for v in user_range)
            why = "caller's range"
        else:
            bound = integer_bound(info, t.index, sig.subgraph)
            (low, high), why = ((0, bound[0]), bound[1]) if bound else (DEFAULT_INT_RANGE, "indexes no table")
        if high <= low:
            raise InputError(f"{sig.key}/{name}: empty integer range [{low}, {high})")
        return rng.integers(low, high, size=shape).astype(dtype), f"random int in [{low}, {high}): {why}"
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype), "random normal"
    raise InputError(f"{sig.key}/{name}: cannot make random {t.dtype} inputs; pass arrays")


def parse_shape_args(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    """CLI `--shape NAME=1,128` (repeatable) -> {NAME: (1, 128)}."""
    out = {}
    for item in items or []:
        name, sep, dims = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[name] = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
        except ValueError:
            raise InputError(f"--shape wants NAME=D0,D1,..., got {item!r}") from None
    return out


def parse_int_range_args(items: list[str] | None) -> dict[str, tuple[int, int]]:
    """CLI `--int-range NAME=LOW:HIGH` (HIGH exclusive, repeatable) -> {NAME: (LOW, HIGH)}."""
    out = {}
    for item in items or []:
        name, sep, rng = item.partition("=")
        low, colon, high = rng.partition(":")
        try:
            if not (sep and colon):
                raise ValueError
            out[name] = (int(low), int(high))
        except ValueError:
            raise InputError(f"--int-range wants NAME=LOW:HIGH, got {item!r}") from None
    return out


def folded_shape(shape) -> list[int]:
    """A rank-5 shape with its last two axes merged (`fold_rank5`'s input layout: the same bytes); others as they
    are."""
    shape = [int(s) for s in shape]
    return shape[:3] + [shape[3] * shape[4]] if len(shape) == 5 else shape


def as_declared(model: str | os.PathLike, inputs: dict) -> dict:
    """{signature: {name: array}} cast to the dtypes the model file declares. Only for arrays the toolkit made
    itself: `convert_for_gpu` casts torch's example inputs (int64 ids become the file's int32, as the converter
    chose), and a rank-5 array the file declares with its last two axes merged is fed so; a caller's arrays are
    never cast (`fit_array`)."""
    from .model_info import InvalidModelError, read_model_info

    try:
        sigs = {s.key: s.inputs for s in model_signatures(read_model_info(model))}
    except InvalidModelError:
        return inputs                                        # the checker says what is wrong with the file
    out: dict = {}
    for sig, named in inputs.items():
        for name, arr in named.items():
            t = sigs.get(sig, {}).get(name)
            arr = np.asarray(arr)
            if t is not None and arr.ndim == 5 and list(t.shape) == folded_shape(arr.shape):
                arr = arr.reshape(t.shape)                   # the same bytes: a rank-5 input folded (`fold_rank5`)
            try:
                out.setdefault(sig, {})[name] = arr.astype(numpy_dtype(t.dtype)) if t else arr
            except TypeError:                                # a dtype numpy has no name for: leave it
                out.setdefault(sig, {})[name] = arr
    return out
