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
from dataclasses import asdict, dataclass

import numpy as np

from ..core.model_info import InvalidModelError, ModelInfo, OpInfo, read_model_info
from ..core.symptoms import BY_ID, LONG_REDUCTION

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


@dataclass
class LintFinding:
    node: int                   # operator index in its subgraph (the delegate's node numbering)
    op: str
    symptom: str                # symptom id in symptoms.py
    tensors: list[str]          # "name [shape]" of the tensors involved
    why: str
    rewrites: list[str]
    upstream: str | None
    desktop_reproduces: bool
    subgraph: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        up = f" ({self.upstream})" if self.upstream else ""
        return (f"node {self.node} {self.op}: {self.why}{up} -> {', '.join(self.rewrites) or 'no rewrite'}"
                f"  [{'; '.join(self.tensors)}]")


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


def lint_for_mobile(model: str | os.PathLike | bytes | ModelInfo) -> list[LintFinding]:
    """Every phone-risk pattern in the graph, in node order."""
    info = model if isinstance(model, ModelInfo) else read_model_info(model)
    findings: list[LintFinding] = []
    high_rank_reported: set[tuple[int, int]] = set()
    for op in info.ops:
        sg = op.subgraph
        ins = [t for t in op.inputs if t >= 0]
        producers = info.producers(sg)
        consumers = info.consumers(sg)
        name = op.op

        if name == "TRANSPOSE_CONV":
            findings.append(
                _finding(
                    info,
                    op,
                    "transpose_conv",
                    "TRANSPOSE_CONV: phones' delegates lag the converter's op version and reject it",
                    op.inputs + op.outputs,
                )
            )
        if name == "RELU_0_TO_1":
            findings.append(
                _finding(
                    info,
                    op,
                    "relu_0_to_1",
                    "RELU_0_TO_1 is rejected by LiteRT >= 2.1.5 GPU delegates",
                    ins + op.outputs,
                )
            )
        if name in ("GATHER", "GATHER_ND"):
            findings.append(_finding(info, op, "gather_nd", f"{name} does not run on the GPU", ins + op.outputs))
        if name in ("SELECT", "SELECT_V2"):
            findings.append(
                _finding(
                    info,
                    op,
                    "select",
                    f"{name} is declined unless both branches have the output shape",
                    ins + op.outputs,
                )
            )
        if name in ("SPLIT", "SPLIT_V"):
            findings.append(_finding(info, op, "split", f"{name} is rejected by the GPU delegate", ins + op.outputs))
        if name == "CONV_2D" and len(ins) >= 2:
            x_t, w_t = info.tensor(ins[0], sg), info.tensor(ins[1], sg)
            if x_t.rank == 4 and w_t.rank == 4 and w_t.shape[3] and x_t.shape[3] != w_t.shape[3]:
                groups = x_t.shape[3] // w_t.shape[3]
                cig, cog = w_t.shape[3], w_t.shape[0] // max(groups, 1)
                if groups > 1 and cig > 1 and (cig % 4 or cog % 4):
                    findings.append(
                        _finding(
                            info,
                            op,
                            "grouped_conv",
                            f"grouped CONV_2D ({groups} groups of "
                            f"{cig} -> {cog} channels): GPUs compute it wrongly unless both are "
                            "multiples of 4",
                            ins + op.outputs,
                        )
                    )
        if name == "REVERSE_V2":
            findings.append(
                _finding(
                    info,
                    op,
                    "reverse_v2",
                    "REVERSE_V2 (torch.flip) compiles on GPUs that then compute it wrongly",
                    ins + op.outputs,
                )
            )
        if name == "CAST":
            findings.append(
                _finding(info, op, "cast", "CAST (typically an int/bool mask) lands on the CPU", ins + op.outputs)
            )
        if name in _FFT_OPS or name.startswith("CUSTOM:") and "FFT" in name.upper():
            findings.append(
                _finding(info, op, "fft", f"{name}: FFT / complex ops have no GPU kernel", ins + op.outputs)
            )
        if name == "BROADCAST_TO":
            runtime = ins and not _is_const(info, ins[0], sg)
            findings.append(
                _finding(
                    info,
                    op,
                    "broadcast_to",
                    "runtime BROADCAST_TO is rejected by phone GPU delegates even at rank 4"
                    if runtime
                    else "BROADCAST_TO of a constant that did not fold",
                    ins + op.outputs,
                )
            )
        if name == "PADV2" and len(ins) >= 3:
            value = info.constant_value(ins[2], sg)
            if (
                value is not None
                and value.size == 1
                and np.issubdtype(value.dtype, np.floating)
                and (not np.isfinite(value).all() or float(value.ravel()[0]) <= -1e30)
            ):
                findings.append(
                    _finding(
                        info,
                        op,
                        "maxpool_neg_inf_pad",
                        "PADV2 with -inf (MaxPool padding) is declined or miscomputed on phones",
                        ins + op.outputs,
                    )
                )

        if name in ("MEAN", "SUM") and len(ins) >= 2:
            count = _reduced_count(info, ins[0], ins[1], sg)
            if count is not None and count >= LONG_REDUCTION:
                findings.append(
                    _finding(
                        info,
                        op,
                        "long_reduction",
                        f"{name} reduces {count} elements per output: an fp16 accumulator overflows or stalls",
                        ins + op.outputs,
                    )
                )

        # identical inputs / all-constant inputs (LiteRT#9192)
        if name not in _SHAPE_OPERAND_OPS and len(ins) >= 2:
            if len(set(ins)) < len(ins):
                findings.append(
                    _finding(
                        info,
                        op,
                        "identical_or_constant_inputs",
                        f"{name} takes the same tensor twice ('identical inputs' on phones)",
                        ins,
                    )
                )
            elif all(_is_const(info, t, sg) for t in ins):
                findings.append(
                    _finding(
                        info,
                        op,
                        "identical_or_constant_inputs",
                        f"{name} has only constant inputs ('Expected 1 const input tensor(s)')",
                        ins,
                    )
                )

        # output aliasing (LiteRT#8599): ADD of two runtime tensors, output is a graph output and consumed
        if name == "ADD" and len(ins) == 2 and op.outputs and not any(_is_const(info, t, sg) for t in ins):
            out = op.outputs[0]
            if out in info.graph_outputs[sg] and consumers.get(out):
                findings.append(
                    _finding(
                        info,
                        op,
                        "output_aliasing",
                        "ADD of two runtime tensors is a graph output and also consumed: phones may "
                        "return an operand instead of the sum",
                        ins + op.outputs,
                    )
                )

        # masked attention: ADD(BATCH_MATMUL result, mask with a size-1 head axis); the scores may pass
        # through the RESHAPE / TRANSPOSE (and scalar scaling) litert-torch puts between the two
        if name == "ADD" and len(ins) == 2 and op.outputs:
            out_t = info.tensor(op.outputs[0], sg)
            for a, b in ((ins[0], ins[1]), (ins[1], ins[0])):
                ta, tb = info.tensor(a, sg), info.tensor(b, sg)
                if (
                    tb.rank == 4
                    and tb.shape[1] == 1
                    and out_t.rank == 4
                    and out_t.shape[1] > 1
                    and ta.rank >= 3
                    and scores_source(info, a, sg, producers) is not None
                ):
                    findings.append(
                        _finding(
                            info,
                            op,
                            "masked_attention",
                            "mask [.,1,S,S] broadcast-added onto a BATCH_MATMUL result: miscomputed by "
                            "older phone runtimes",
                            [a, b] + op.outputs,
                        )
                    )
                    break

        # rank > 4, reported once per tensor at the op that produces it
        for t in (t for t in op.outputs if t >= 0):
            if info.tensor(t, sg).rank > 4 and (sg, t) not in high_rank_reported:
                high_rank_reported.add((sg, t))
                findings.append(
                    _finding(
                        info,
                        op,
                        "rank_gt_4",
                        f"{name} produces a rank-{info.tensor(t, sg).rank} tensor; GPUs handle rank <= 4",
                        ins + [t],
                    )
                )

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


def run(args: argparse.Namespace) -> int:
    """Exit 0: no findings; 1: findings; 2: not a readable model, or the --json file cannot be written."""
    import sys

    from ..core.arguments import refuse_output_path, write_output

    if refuse_output_path("--json", args.json, inputs=(args.model,)):
        return 2
    try:
        findings = lint_for_mobile(args.model)
    except InvalidModelError as exc:
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
