"""Which op of a converted file does the GPU compute wrong? Bisect the .tflite itself, op by op.

The module bisect (`bisect.py`) cuts the torch model at its blocks; it can name a block, not an op, and it
describes the model, not a file someone else converted. This one cuts the file: the prefix of the first k+1
operators (a .tflite keeps its operators in execution order) becomes a model of its own whose outputs are every
float tensor that prefix produces and a later op (or the graph's output) reads -- the values "live" across the
cut, so a wrong value on any path is seen (each returned through a MUL by a runtime 1.0: see `cut`). Each prefix is
compiled strictly GPU-only and run in fp16 and fp32 against LiteRT's CPU runtime on the same inputs; a binary
search finds the first cut that diverges -- in fp32 when the whole file is wrong in fp32 too, else in fp16 -- and
its last op is the first op whose output the GPU gets wrong. The file is first run as it is, then with every op
and its outputs returned through ops of their own: wrong only as it is means the fault is in how an output is
returned (an output another op also reads), named at the op that writes it.

What it says: the op (index, type, output tensor), its fp16 and fp32 agreement with the CPU, and the class --
"GPU miscompute" when fp32 is as wrong as fp16 (no precision fix can help), "fp16 precision" when only fp16 is
wrong. With `plain_gpu_ops` (the op types the plain conversion ran on the GPU) it also says whether the
rewrites moved this op type onto the GPU: when the rewritten file is wrong and the plain one right, the fault
is among those ops. Assumes, as every bisect does, that a wrong value stays wrong downstream; a value that goes
wrong and is then masked out (a multiply by zero, a max) can move the answer later, never earlier.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .report import diverges
from ..core.tflite_edit import add_tensor, opcode_index, pack

MIN_CORR = 0.999


@dataclass
class GraphFault:
    op_index: int
    op: str
    tensor: str
    kind: str                                   # "GPU miscompute" | "fp16 precision"
    fp16: str                                   # the worst live value vs the CPU: "corr 0.41", "12 non-finite"
    fp32: str
    wrong_tensor: str = ""                      # the live value that diverged most at that cut
    returned_and_read: bool = False             # that value is a graph output that another op also reads
    moved_by_rewrites: bool | None = None       # None: no plain file to compare with
    probes: list[tuple[int, bool]] = field(default_factory=list)   # (cut, diverged) in run order; -1: the file
    seconds: float = 0.0

    def line(self) -> str:
        moved = {True: "; the plain conversion ran this op type on the CPU: the rewrites moved it onto the GPU",
                 False: "", None: ""}[self.moved_by_rewrites]
        value = (f"; the value that goes wrong is {self.wrong_tensor}" if self.wrong_tensor and
                 self.wrong_tensor != self.tensor else "")
        alias = ("; it is returned and also read by another op -- the output-aliasing wall: return it through "
                 "an op of its own (the legalize rule `returned_fc`, `patch_output_aliasing`)"
                 if self.returned_and_read else "")
        return (f"{self.kind} at op {self.op_index} {self.op} (output {self.tensor}): vs the CPU, fp16 "
                f"{self.fp16}, fp32 {self.fp32}{value}{alias}{moved} "
                f"[graph bisect: {len(self.probes)} cuts, {self.seconds:.0f} s]")


class GraphBisectError(ValueError):
    """The file cannot be bisected (several subgraphs, no float op, unreadable)."""


def _load(data: bytes):
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    if len(model.subgraphs or []) != 1:
        raise GraphBisectError(f"{len(model.subgraphs or [])} subgraphs: only single-subgraph files are bisected")
    if len(model.signatureDefs or []) > 1:
        raise GraphBisectError("several signatures: bisect one signature's file")
    return schema, model


def _op_name(schema, model, op) -> str:
    code = model.operatorCodes[op.opcodeIndex]
    value = max(code.builtinCode, code.deprecatedBuiltinCode)
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    return names.get(value, f"op{value}")


def _name(t) -> str:
    """A tensor's name, short: litert-torch joins the module paths of every fused node with ';' and writes
    each module as its dotted class path ('pkg.Model/torch.nn.modules.linear.Linear_fc'); the last path (the
    node that wrote the tensor) with class paths cut to their last part reads 'Model/Linear_fc'."""
    raw = t.name.decode("utf-8", "replace") if isinstance(t.name, bytes) else str(t.name)
    parts = [p for p in raw.split(";") if p]
    return "/".join(c.rsplit(".", 1)[-1] for c in parts[-1].split("/")) if parts else (raw or "-")


def live_after(model, k: int) -> list[int]:
    """Float tensors produced by operators 0..k that an operator after k, or the graph's output, reads."""
    from ai_edge_litert import schema_py_generated as schema

    graph = model.subgraphs[0]
    ops = graph.operators or []
    produced = [int(t) for op in ops[:k + 1] for t in (op.outputs if op.outputs is not None else []) if t >= 0]
    later = {int(t) for op in ops[k + 1:] for t in (op.inputs if op.inputs is not None else []) if t >= 0}
    later |= {int(t) for t in graph.outputs}
    floats = (schema.TensorType.FLOAT32, schema.TensorType.FLOAT16)
    return [t for t in dict.fromkeys(produced) if t in later and graph.tensors[t].type in floats]


ONE = "graph_bisect_one"        # the runtime 1.0 each cut's outputs are multiplied by


def _tensor_map(schema, name: str, index: int):
    m = schema.TensorMapT()
    m.name, m.tensorIndex = name, index
    return m


def cut(data: bytes, k: int) -> tuple[bytes, list[int]]:
    """The model of operators 0..k whose outputs are the tensors live across the cut (`live_after`), each
    returned as MUL(value, one) with `one` a new runtime input (fed 1.0: bit-exact). Why the MUL: a value that a
    graph returns and one of its ops also reads is itself a GPU wall (output aliasing; on llvmpipe a cut of
    PP-OCR's detector returning its live values directly read corr 0.002 in fp16 and fp32 where the file is
    right in fp32), and a live value is often read inside the prefix too (a skip connection); returned through
    an op of its own with a runtime operand, which no converter or delegate folds, the cut adds no fault."""
    schema, model = _load(data)
    graph = model.subgraphs[0]
    live = live_after(model, k)
    ops = (graph.operators or [])[:k + 1]
    one = add_tensor(schema, graph, ONE, [1], schema.TensorType.FLOAT32)
    mul = opcode_index(schema, model, schema.BuiltinOperator.MUL)
    outs = []
    for v in live:
        src = graph.tensors[v]
        copy = add_tensor(schema, graph, f"cut_{v}", src.shape, src.type)
        graph.tensors[copy].shapeSignature = src.shapeSignature
        op = schema.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = mul, [v, one], [copy]
        op.builtinOptionsType = schema.BuiltinOptions.MulOptions
        op.builtinOptions = schema.MulOptionsT()
        ops.append(op)
        outs.append(copy)
    graph.operators = ops
    graph.inputs = [*[int(i) for i in graph.inputs], one]
    graph.outputs = outs
    for sig in model.signatureDefs or []:
        sig.inputs = [*(sig.inputs or []), _tensor_map(schema, ONE, one)]
        sig.outputs = [_tensor_map(schema, f"cut_{v}", o) for v, o in zip(live, outs)]
    return pack(model, len(data)), live


def _probe(data: bytes, k: int | None, inputs: dict, work: Path, timeout: float, min_corr: float):
    """({label: diverged}, worst fp16 (score, output name, text), worst fp32) for the cut after operator k
    (None: the file as it is, with its own outputs)."""
    from ..check.checker import check_gpu_compatibility
    from ..core.metrics import compare

    if k is None:
        body, feeds = data, inputs
    else:
        body, live = cut(data, k)
        if not live:
            return {}, None, None
        feeds = {**inputs, ONE: np.ones([1], np.float32)}
    path = work / f"cut_{'file' if k is None else k}.tflite"
    path.write_bytes(body)
    report = check_gpu_compatibility(path, inputs=feeds, precisions=("fp16", "fp32"), min_corr=None,
                                     timeout=timeout)
    outs = report.outputs
    cpu = next(iter(outs.get("cpu", {}).values()), None)
    if cpu is None or report.unsupported_ops:
        raise GraphBisectError(f"the cut after op {k} did not run GPU-only and on the CPU: {report.summary}")
    worst: dict[str, tuple[float, str, str]] = {}
    bad = {"gpu_fp16": False, "gpu_fp32": False}
    for label in ("gpu_fp16", "gpu_fp32"):
        got = next(iter(outs.get(label, {}).values()), None)
        if got is None:
            raise GraphBisectError(f"the cut after op {k}: no {label} run ({report.summary})")
        for name, ref in cpu.items():
            c = compare(got[name], ref)
            wrong = diverges(c, min_corr)
            bad[label] |= wrong
            score = -2.0 if c.nonfinite or c.all_zero else c.corr if c.corr == c.corr else (-1.0 if wrong else 1.0)
            text = (f"{c.nonfinite} non-finite" if c.nonfinite else "all zero" if c.all_zero else
                    f"corr {c.corr:.4f}" if c.corr == c.corr else f"SNR {c.snr_db:.1f} dB")
            if label not in worst or score < worst[label][0]:
                worst[label] = (score, name, text)
    return bad, worst["gpu_fp16"], worst["gpu_fp32"]


def first_wrong_op(path: str | Path, inputs, *, min_corr: float = MIN_CORR, plain_gpu_ops: set[str] | None = None,
                   budget_s: float = 600.0, timeout: float = 300.0, progress=None) -> GraphFault | None:
    """The first operator of the file at `path` whose output the strict GPU run gets wrong against LiteRT's CPU
    runtime on `inputs` (the checker's input forms) -- judged in fp32 when the whole file is wrong in fp32 too (so
    a value that only fp16's range cannot hold, a -3.4e38 mask, does not stop the search early), else in fp16 -- or
    None when the whole file agrees. Raises
    GraphBisectError when the file cannot be cut or a cut cannot run, and when `budget_s` runs out (saying how
    far it got). `progress(text)` is called after each cut."""
    from ..core.inputs import make_inputs
    from ..core.model_info import read_model_info

    info = read_model_info(path)                # InvalidModelError (a ValueError) says what is wrong with the file
    data = Path(path).read_bytes()
    schema, model = _load(data)
    ops = model.subgraphs[0].operators or []
    if not ops:
        raise GraphBisectError("the file has no operator")
    feeds = next(iter(make_inputs(info, inputs, seed=0)[0].values()))   # one set of arrays for every cut
    start = time.monotonic()
    probes: list[tuple[int, bool]] = []
    found: dict = {}
    lo, hi = 0, len(ops) - 1
    with tempfile.TemporaryDirectory(prefix="graph_bisect_") as tmp:
        def run(k, label=None):
            if time.monotonic() - start > budget_s:
                raise GraphBisectError(f"budget of {budget_s:.0f} s spent after {len(probes)} cuts; the first wrong "
                                       f"op lies in ops {lo}..{hi}")
            res = _probe(data, k, feeds, Path(tmp), timeout, min_corr)
            # a file wrong in fp32 as well is bisected on fp32 (the first op the GPU computes wrong, whatever
            # the precision); one wrong in fp16 only, on fp16
            wrong = bool(res[0] and res[0][precision[0]]) if res[0] else False
            probes.append((-1 if k is None else k, wrong))
            found[k] = res
            if progress:
                where = label or f"cut after op {k} ({_op_name(schema, model, ops[k])})"
                shown = res[1] if precision[0] == "gpu_fp16" else res[2]
                progress(f"graph bisect: {where}: {'wrong' if wrong else 'right'} "
                         f"({precision[0][4:]} {shown[2] if shown else '-'})")
            return wrong

        precision = ["gpu_fp16"]
        if not run(None, "the file as it is"):
            return None
        if found[None][0]["gpu_fp32"]:
            precision[0] = "gpu_fp32"
        if not run(hi, "every op, outputs returned through their own op"):
            return _aliasing_fault(schema, model, found[None], min_corr, plain_gpu_ops, probes, start)
        while lo < hi:                     # invariant: cut hi diverges; every cut before lo agrees
            mid = (lo + hi) // 2
            if run(mid):
                hi = mid
            else:
                lo = mid + 1
    return _fault(schema, model, hi, found[hi], min_corr, plain_gpu_ops, probes, start)


def _fault(schema, model, k: int, res, min_corr, plain_gpu_ops, probes, start, tensor_index=None) -> GraphFault:
    _, w16, w32 = res
    kind = "GPU miscompute" if w32[0] < min_corr else "fp16 precision"
    worst = (w32 if kind == "GPU miscompute" else w16)[1]
    graph = model.subgraphs[0]
    ops = graph.operators
    op = ops[k]
    outs = [int(t) for t in (op.outputs if op.outputs is not None else []) if t >= 0]
    tensor = _name(graph.tensors[outs[0]]) if outs else "-"
    index = tensor_index if tensor_index is not None else (
        int(worst[len("cut_"):]) if worst and worst.startswith("cut_") else None)
    wrong = _name(graph.tensors[index]) if index is not None else ""
    read = {int(t) for o in ops for t in (o.inputs if o.inputs is not None else []) if t >= 0}
    aliased = index is not None and index in {int(t) for t in graph.outputs} and index in read
    name = _op_name(schema, model, op)
    moved = None if plain_gpu_ops is None else name not in plain_gpu_ops
    return GraphFault(k, name, tensor, kind, w16[2], w32[2], wrong, aliased, moved, probes,
                      time.monotonic() - start)


def _aliasing_fault(schema, model, res, min_corr, plain_gpu_ops, probes, start) -> GraphFault:
    """The file is wrong as it is and right once every output is returned through an op of its own: the fault is
    in how an output is returned (an output another op also reads), at the op that writes the worst output."""
    graph = model.subgraphs[0]
    worst = (res[2] if res[2][0] < min_corr else res[1])[1]
    sig = (model.signatureDefs or [None])[0]
    by_name = {(m.name.decode() if isinstance(m.name, bytes) else m.name): int(m.tensorIndex)
               for m in (sig.outputs if sig is not None and sig.outputs else [])}
    index = by_name.get(worst, int(graph.outputs[0]))
    writer = next(i for i, op in enumerate(graph.operators) if index in [int(t) for t in op.outputs])
    return _fault(schema, model, writer, res, min_corr, plain_gpu_ops, probes, start, tensor_index=index)
