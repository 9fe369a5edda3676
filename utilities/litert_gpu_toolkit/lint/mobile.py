"""Static lint for phone-only GPU walls: find, by graph structure, what a phone may reject or miscompute.

The desktop GPU accelerator is a strong proxy, not a phone. Some patterns compile and run correctly
here but fail on phones (op-version skew, older delegates, fp16-only reductions, output aliasing).
`lint_for_mobile(model)` walks the flatbuffer -- nothing is compiled -- and reports each such
pattern with the node index, the tensors involved, why it is a risk, the toolkit rewrite that
removes it, and the upstream issue where there is one. The symptoms come from `symptoms.py`.

    python -m litert_gpu_toolkit lint model.tflite [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

from ..core.model_info import InvalidModelError, ModelInfo, OpInfo, read_model_info
from ..core.symptoms import BY_ID, LONG_REDUCTION
from .finding import LintFinding  # noqa: F401 - the finding type, re-exported

# a constant this large feeding an elementwise op (not a conv / matmul weight) is likely folded
LARGE_FOLDED_CONSTANT_BYTES = 1 << 20
_WEIGHT_CONSUMERS = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "BATCH_MATMUL", "GATHER",
                     "EMBEDDING_LOOKUP", "CONV_3D", "UNIDIRECTIONAL_SEQUENCE_LSTM", "LSTM"}
_FFT_OPS = {"RFFT2D", "COMPLEX_ABS", "REAL", "IMAG", "FFT", "IRFFT2D"}
# ops where identical or constant inputs are routine and harmless (shape/metadata operands)
_SHAPE_OPERAND_OPS = {"RESHAPE", "TRANSPOSE", "STRIDED_SLICE", "SLICE", "PAD", "PADV2", "MIRROR_PAD", "GATHER",
                      "GATHER_ND", "BROADCAST_TO", "EXPAND_DIMS", "SQUEEZE", "TILE", "CONCATENATION", "SUM", "MEAN",
                      "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR",
                      "SPLIT", "SPLIT_V", "CAST", "FILL", "SHAPE", "ARG_MAX", "ARG_MIN", "CUMSUM",
                      "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "DYNAMIC_UPDATE_SLICE"}


def _desc(info: ModelInfo, index: int, sg: int) -> str:
    if index < 0:
        return "(none)"
    t = info.tensor(index, sg)
    kind = "const " if t.is_constant else ""
    return f"{kind}{t.name} {list(t.shape)}"


def _finding(info: ModelInfo, op: OpInfo, symptom_id: str, why: str, tensors: list[int]) -> LintFinding:
    s = BY_ID[symptom_id]
    return LintFinding(op.index, op.op, symptom_id, [_desc(info, t, op.subgraph) for t in tensors], why,
                       list(s.rewrites), s.upstream, s.desktop_reproduces, op.subgraph)


def _is_const(info: ModelInfo, t: int, sg: int) -> bool:
    return t >= 0 and info.tensor(t, sg).is_constant


# op type -> (symptom id, why) for the walls that need nothing but the op's type ("{op}" is the type)
_BY_TYPE = {
    "TRANSPOSE_CONV": ("transpose_conv",
                       "TRANSPOSE_CONV: phones' delegates lag the converter's op version and reject it"),
    "RELU_0_TO_1": ("relu_0_to_1", "RELU_0_TO_1 is rejected by LiteRT >= 2.1.5 GPU delegates"),
    "GATHER": ("gather_nd", "{op} does not run on the GPU"),
    "GATHER_ND": ("gather_nd", "{op} does not run on the GPU"),
    "SELECT": ("select", "{op} is declined unless both branches have the output shape"),
    "SELECT_V2": ("select", "{op} is declined unless both branches have the output shape"),
    "SPLIT": ("split", "{op} is rejected by the GPU delegate"),
    "SPLIT_V": ("split", "{op} is rejected by the GPU delegate"),
    "REVERSE_V2": ("reverse_v2", "REVERSE_V2 (torch.flip) compiles on GPUs that then compute it wrongly"),
    "CAST": ("cast", "CAST (typically an int/bool mask) lands on the CPU"),
}


class _Site:
    """One op as the rules see it: the op, its subgraph's producers / consumers, its present inputs."""

    def __init__(self, info: ModelInfo, op: OpInfo):
        self.info, self.op, self.sg, self.name = info, op, op.subgraph, op.op
        self.ins = [t for t in op.inputs if t >= 0]

    def finding(self, symptom_id: str, why: str, tensors: list[int] | None = None) -> LintFinding:
        return _finding(self.info, self.op, symptom_id, why, self.ins + self.op.outputs if tensors is None else tensors)

    def tensor(self, index: int):
        return self.info.tensor(index, self.sg)

    def const(self, index: int) -> bool:
        return _is_const(self.info, index, self.sg)


def _by_type(s: _Site):
    if s.name in _BY_TYPE:
        symptom, why = _BY_TYPE[s.name]
        # a TRANSPOSE_CONV lists its optional (absent) bias slot too: the delegate's error names it by position
        tensors = s.op.inputs + s.op.outputs if s.name == "TRANSPOSE_CONV" else None
        yield s.finding(symptom, why.format(op=s.name), tensors)
    if s.name in _FFT_OPS or s.name.startswith("CUSTOM:") and "FFT" in s.name.upper():
        yield s.finding("fft", f"{s.name}: FFT / complex ops have no GPU kernel")


def _grouped_conv(s: _Site):
    if s.name != "CONV_2D" or len(s.ins) < 2:
        return
    x_t, w_t = s.tensor(s.ins[0]), s.tensor(s.ins[1])
    if not (x_t.rank == 4 and w_t.rank == 4 and w_t.shape[3] and x_t.shape[3] != w_t.shape[3]):
        return
    groups = x_t.shape[3] // w_t.shape[3]
    cig, cog = w_t.shape[3], w_t.shape[0] // max(groups, 1)
    if groups > 1 and cig > 1 and (cig % 4 or cog % 4):
        yield s.finding("grouped_conv", f"grouped CONV_2D ({groups} groups of {cig} -> {cog} channels): GPUs "
                                        "compute it wrongly unless both are multiples of 4")


def _broadcast_to(s: _Site):
    if s.name == "BROADCAST_TO":
        runtime = s.ins and not s.const(s.ins[0])
        yield s.finding("broadcast_to", "runtime BROADCAST_TO is rejected by phone GPU delegates even at rank 4"
                        if runtime else "BROADCAST_TO of a constant that did not fold")


def _neg_inf_pad(s: _Site):
    if s.name != "PADV2" or len(s.ins) < 3:
        return
    value = s.info.constant_value(s.ins[2], s.sg)
    if (value is not None and value.size == 1 and np.issubdtype(value.dtype, np.floating)
            and (not np.isfinite(value).all() or float(value.ravel()[0]) <= -1e30)):
        yield s.finding("maxpool_neg_inf_pad", "PADV2 with -inf (MaxPool padding) is declined or miscomputed on phones")


def _long_reduction(s: _Site):
    if s.name in ("MEAN", "SUM") and len(s.ins) >= 2:
        count = _reduced_count(s.info, s.ins[0], s.ins[1], s.sg)
        if count is not None and count >= LONG_REDUCTION:
            yield s.finding("long_reduction",
                            f"{s.name} reduces {count} elements per output: an fp16 accumulator overflows or stalls")


def _identical_or_constant(s: _Site):
    """LiteRT#9192: the same tensor twice, or only constants, as an op's inputs."""
    if s.name in _SHAPE_OPERAND_OPS or len(s.ins) < 2:
        return
    if len(set(s.ins)) < len(s.ins):
        yield s.finding("identical_or_constant_inputs",
                        f"{s.name} takes the same tensor twice ('identical inputs' on phones)", s.ins)
    elif all(s.const(t) for t in s.ins):
        yield s.finding("identical_or_constant_inputs",
                        f"{s.name} has only constant inputs ('Expected 1 const input tensor(s)')", s.ins)


def _output_aliasing(s: _Site):
    """LiteRT#8599: an ADD of two runtime tensors that is a graph output and also consumed."""
    if s.name != "ADD" or len(s.ins) != 2 or not s.op.outputs or any(s.const(t) for t in s.ins):
        return
    out = s.op.outputs[0]
    if out in s.info.graph_outputs[s.sg] and s.info.consumers(s.sg).get(out):
        yield s.finding("output_aliasing", "ADD of two runtime tensors is a graph output and also consumed: phones "
                                           "may return an operand instead of the sum")


def _masked_attention(s: _Site):
    """ADD(BATCH_MATMUL result, mask with a size-1 head axis); the scores may pass through the RESHAPE / TRANSPOSE
    (and scalar scaling) litert-torch puts between the two."""
    if s.name != "ADD" or len(s.ins) != 2 or not s.op.outputs:
        return
    out_t, producers = s.tensor(s.op.outputs[0]), s.info.producers(s.sg)
    for a, b in ((s.ins[0], s.ins[1]), (s.ins[1], s.ins[0])):
        ta, tb = s.tensor(a), s.tensor(b)
        if (tb.rank == 4 and tb.shape[1] == 1 and out_t.rank == 4 and out_t.shape[1] > 1 and ta.rank >= 3
                and scores_source(s.info, a, s.sg, producers) is not None):
            yield s.finding("masked_attention", "mask [.,1,S,S] broadcast-added onto a BATCH_MATMUL result: "
                                                "miscomputed by older phone runtimes", [a, b] + s.op.outputs)
            return


def _quantized_fc_rank3(s: _Site):
    """LiteRT#9277: integer weights on a FULLY_CONNECTED (dynamic-range) that reads a rank-3+ input."""
    if s.name != "FULLY_CONNECTED" or len(s.op.inputs) < 2 or min(s.op.inputs[:2]) < 0:
        return
    x, w = s.tensor(s.op.inputs[0]), s.tensor(s.op.inputs[1])
    if w.dtype in ("int8", "int4", "uint8", "int2") and w.is_constant and x.rank >= 3 and x.dtype == "float32":
        yield s.finding("quantized_fc_rank3", f"FULLY_CONNECTED with {w.dtype} weights reads a rank-{x.rank} input: "
                                              "wrong numbers or no kernel on GPUs", [s.op.inputs[0], s.op.inputs[1]])


def _dequantized_weight(s: _Site):
    """LiteRT#9523: a DEQUANTIZE of a constant feeding the weight of an op the GPU reads only in another form."""
    if s.name != "DEQUANTIZE" or not s.ins or not s.const(s.ins[0]) or not s.op.outputs:
        return
    src = s.tensor(s.ins[0])
    for consumer in s.info.consumers(s.sg).get(s.op.outputs[0], []):
        weight = {"FULLY_CONNECTED": 1, "EMBEDDING_LOOKUP": 1, "BATCH_MATMUL": 1}.get(consumer.op)
        if weight is None or len(consumer.inputs) <= weight or consumer.inputs[weight] != s.op.outputs[0]:
            continue
        if src.dtype == "float16" and consumer.op == "FULLY_CONNECTED":
            continue                            # fp16 weights behind a DEQUANTIZE: the GPU folds it into the FC
        yield s.finding("dequantized_weight", f"{src.dtype} weight behind a DEQUANTIZE into {consumer.op}: the GPU "
                                              "cannot build that kernel", [s.ins[0], s.op.outputs[0]])
        return


# the per-op rules, in the order their findings are listed for one op
_RULES = (_by_type, _grouped_conv, _broadcast_to, _neg_inf_pad, _long_reduction, _identical_or_constant,
          _output_aliasing, _masked_attention, _quantized_fc_rank3, _dequantized_weight)


def lint_for_mobile(model: str | os.PathLike | bytes | ModelInfo) -> list[LintFinding]:
    """Every phone-risk pattern in the graph, in node order: each op through `_RULES`, then a rank > 4 tensor at
    the op that produces it (once per tensor), then the folded constants."""
    info = model if isinstance(model, ModelInfo) else read_model_info(model)
    findings: list[LintFinding] = []
    high_rank_reported: set[tuple[int, int]] = set()
    for op in info.ops:
        site = _Site(info, op)
        for rule in _RULES:
            findings.extend(rule(site))
        for t in (t for t in op.outputs if t >= 0):
            rank = site.tensor(t).rank
            if rank > 4 and (site.sg, t) not in high_rank_reported:
                high_rank_reported.add((site.sg, t))
                findings.append(site.finding("rank_gt_4", f"{op.op} produces a rank-{rank} tensor; GPUs handle "
                                                          "rank <= 4", site.ins + [t]))
    findings += _folded_constants(info)
    return findings


# ops between an attention BATCH_MATMUL and the mask ADD that keep the scores' values: views, and scaling
# by a constant scalar (the 1/sqrt(d) that litert-torch may leave after the matmul)
_SCORE_VIEWS = {"RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS"}
_SCORE_SCALES = {"MUL", "DIV"}


def scores_source(info: ModelInfo, tensor: int, sg: int, producers: dict | None = None, depth: int = 8):
    """The BATCH_MATMUL op whose result `tensor` is, through views and scalar scaling; None otherwise."""
    producers = info.producers(sg) if producers is None else producers
    for _ in range(depth):
        prod = producers.get(tensor)
        if prod is None:
            return None
        if prod.op == "BATCH_MATMUL":
            return prod
        data = [t for t in prod.inputs if t >= 0]
        if prod.op in _SCORE_VIEWS and data:
            tensor = data[0]
        elif prod.op in _SCORE_SCALES and len(data) == 2:
            runtime = [t for t in data if not _is_const(info, t, sg)]
            scalars = [t for t in data if _is_const(info, t, sg) and int(np.prod(info.tensor(t, sg).shape)) == 1]
            if len(runtime) != 1 or len(scalars) != 1 or (prod.op == "DIV" and data[0] != runtime[0]):
                return None
            tensor = runtime[0]
        else:
            return None
    return None


_ELEMENTWISE = {"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW"}


def _reduced_count(info: ModelInfo, x: int, axes: int, sg: int) -> int | None:
    """Elements reduced into each output value of a MEAN / SUM (its axes a constant), else None."""
    value = info.constant_value(axes, sg)
    shape = list(info.tensor(x, sg).shape)
    if value is None or not shape or any(int(d) <= 0 for d in shape):
        return None
    dims = {int(a) % len(shape) for a in np.asarray(value).ravel()}
    return int(np.prod([shape[d] for d in dims])) if dims else None


def _folded_constants(info: ModelInfo) -> list[LintFinding]:
    """Large constants that feed only elementwise ops, when there are two or more of them.

    A real weight feeds a conv / matmul / gather. A frozen parameter times a constant table is
    folded by the converter into a full-size constant in every block that uses it; one such
    constant may be a legitimate table (positional embedding), several are the blow-up pattern.
    With the source module at hand, `rewrites.constant_blowup.find_constant_blowup(info, params=model)`
    compares against the parameter bytes instead.
    """
    suspects = []
    for sg, tensors in enumerate(info.tensors):
        consumers = info.consumers(sg)
        for t in tensors:
            users = consumers.get(t.index, [])
            if (
                t.is_constant
                and t.nbytes >= LARGE_FOLDED_CONSTANT_BYTES
                and users
                and all(u.op in _ELEMENTWISE for u in users)
            ):
                suspects.append((users[0], t.index))
    if len(suspects) < 2:
        return []
    total = sum(info.tensor(t, op.subgraph).nbytes for op, t in suspects)
    return [
        _finding(
            info,
            op,
            "constant_blowup",
            f"{len(suspects)} constants of >= {LARGE_FOLDED_CONSTANT_BYTES >> 20} MiB ({total / 2**20:.1f} MiB "
            "in all) feed only elementwise ops: folded parameter x constant products that bloat the file",
            [t],
        )
        for op, t in suspects
    ]


def phone_risk_line(findings: list[LintFinding]) -> str | None:
    """One line for a model that passes on the desktop GPU but has phone-only risks."""
    risky = [f for f in findings if not f.desktop_reproduces]
    if not risky:
        return None
    names = sorted({f"{f.op} (node {f.node})" if f.op else f.symptom for f in risky})
    return "passes here; phone risks: " + ", ".join(names[:8]) + (" …" if len(names) > 8 else "")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help=".tflite file")
    from ..core.arguments import JSON_OUTPUT_HELP

    p.add_argument("--json", metavar="OUT", help="also write the findings as JSON; " + JSON_OUTPUT_HELP)
    p.add_argument("--runtime", action="append", default=[], metavar="VERSION",
                   help="also report the walls this ai-edge-litert version rejects or computes wrong, as measured "
                        "by scripts/runtime_walls.py (docs/runtime-walls.md; repeatable)")


def run(args: argparse.Namespace) -> int:
    """Exit 0: no findings; 1: findings; 2: not a readable model, or the --json file cannot be written."""
    import sys

    from ..core.arguments import refuse_output_path, write_output

    if refuse_output_path("--json", args.json, inputs=(args.model,)):
        return 2
    from .runtime_walls import UnmeasuredRuntime, runtime_findings

    try:
        findings = lint_for_mobile(args.model)
        for version in args.runtime:
            findings += runtime_findings(args.model, version)
    except (InvalidModelError, UnmeasuredRuntime) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        problem = write_output(args.json, json.dumps([x.to_dict() for x in findings], indent=1))
        if problem:  # the findings stand (printed below); only the file is missing
            print(f"error: {problem}", file=sys.stderr)
    if not findings:
        print(f"{args.model}: no phone-only GPU risks found")
        return 0
    print(f"{args.model}: {len(findings)} finding(s)")
    for x in findings:
        print("  " + x.line())
    return 1
