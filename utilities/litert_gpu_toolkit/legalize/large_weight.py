"""Rule: a linear layer whose weight is larger than the GPU binds as one buffer is computed in row blocks.

Measured on llvmpipe, ai-edge-litert 2.3.0 (tests/toolkit/legalize/test_large_weight.py): `nn.Linear(8192, 4090)`,
127.8 MiB of fp32 weight, runs GPU-only and right; `nn.Linear(8192, 4100)`, 128.1 MiB, runs GPU-only and returns
all zeros, in fp16 and in fp32 alike -- 128 MiB is WebGPU's default largest storage-buffer binding. Nothing is
rejected and no op leaves the GPU: the output is silently zero. VGG's first classifier layer (25088 x 4096, 392
MiB) is one; so is a language model's head over a large vocabulary. Phone GPUs have limits of their own (an
OpenCL allocation or an image's width), usually no lower.

The layer becomes one linear per block of at most BLOCK_BYTES of weight rows, their outputs concatenated: every
output is the same dot product over the same values as before. Equal to fp32 rounding: a CPU BLAS orders a dot
product's sum by the matrix's shape, which a block changes (measured in torch on the test's 8192 x 4100 layer:
3 of 8200 outputs differ, by at most 1.0e-6, 4e-7 of the output's largest magnitude). It costs one
FULLY_CONNECTED per block and a CONCATENATION.

An embedding table over the limit has the same fault (measured: a 160000 x 256 table, 156 MiB, looked up GPU-only
returns all zeros; a language model's vocabulary at real size is 100-600 MiB). It is split by columns, not rows,
so the ids need no arithmetic: one lookup per block of at most BLOCK_BYTES of table columns, the rows
concatenated along the last axis. Bit-exact (copies of the same values).
"""
from __future__ import annotations

import math

import torch

from .nodes import attr_value, calls, source_line

_aten = torch.ops.aten
LIMIT_BYTES = 128 * 2 ** 20          # the largest weight measured right, rounded to the binding limit
BLOCK_BYTES = 96 * 2 ** 20           # each block's weight: under the limit with room for the runtime's padding
BYTES = 4                            # the GPU holds the weight as fp32 (fp16 inference fails at the same size)


def _blocks(rows: int, row_bytes: int) -> list[tuple[int, int]]:
    parts = math.ceil(rows * row_bytes / BLOCK_BYTES)
    size = math.ceil(rows / parts)
    return [(a, min(a + size, rows)) for a in range(0, rows, size)]


def _oversized(gm: torch.fx.GraphModule, w) -> torch.Tensor | None:
    """The 2-D constant `w` names when it is over the binding limit, else None."""
    if not isinstance(w, torch.fx.Node) or w.op != "get_attr":
        return None
    value = attr_value(gm, w.target)
    return value if value.dim() == 2 and value.numel() * BYTES > LIMIT_BYTES else None


def _concatenated(n: torch.fx.Node, parts: list, value: torch.Tensor, kind: str) -> str:
    """`n` replaced by its blocks' results concatenated on the last axis; the line that describes it."""
    with n.graph.inserting_before(n):
        y = n.graph.call_function(_aten.cat.default, (parts, -1))
    y.meta = dict(n.meta)
    n.replace_all_uses_with(y)
    return (f"{list(value.shape)} {kind} ({value.numel() * BYTES / 2 ** 20:.0f} MiB) in {len(parts)} blocks"
            f"{f' at {source_line(n)}' if source_line(n) else ''}")


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    done = []
    for n in calls(graph, _aten.linear.default):
        x, w, *rest = n.args
        b = rest[0] if rest else n.kwargs.get("bias")
        weight = _oversized(gm, w)
        if weight is None:
            continue
        bias = attr_value(gm, b.target) if isinstance(b, torch.fx.Node) and b.op == "get_attr" else None
        if b is not None and bias is None:
            continue                                    # a runtime bias: not this rule's shape
        parts = []
        with graph.inserting_before(n):
            for i, (lo, hi) in enumerate(_blocks(weight.shape[0], weight.shape[1] * BYTES)):
                name = f"_legal_block_{len(done)}_{i}"
                gm.register_buffer(f"{name}_w", weight[lo:hi].detach().clone(), persistent=False)
                args = [x, graph.get_attr(f"{name}_w")]
                if bias is not None:
                    gm.register_buffer(f"{name}_b", bias[lo:hi].detach().clone(), persistent=False)
                    args.append(graph.get_attr(f"{name}_b"))
                parts.append(graph.call_function(_aten.linear.default, tuple(args)))
        done.append(_concatenated(n, parts, weight, "weight"))
    tables = _embeddings(gm)
    return ([f"linear with a weight over the GPU's {LIMIT_BYTES // 2 ** 20} MiB buffer -> row blocks, "
             f"concatenated (fp32 rounding): {'; '.join(done)}"] * bool(done)
            + [f"embedding table over the GPU's {LIMIT_BYTES // 2 ** 20} MiB buffer -> column blocks, "
               f"concatenated (bit-exact): {'; '.join(tables)}"] * bool(tables)), []


def _embeddings(gm: torch.fx.GraphModule) -> list[str]:
    graph = gm.graph
    done = []
    for n in calls(graph, _aten.embedding.default):
        w, ids = n.args[:2]
        table = _oversized(gm, w)
        if table is None:
            continue
        parts = []
        with graph.inserting_before(n):
            for i, (lo, hi) in enumerate(_blocks(table.shape[1], table.shape[0] * BYTES)):
                name = f"_legal_table_{len(done)}_{i}"
                gm.register_buffer(name, table[:, lo:hi].detach().contiguous(), persistent=False)
                parts.append(graph.call_function(_aten.embedding.default, (graph.get_attr(name), ids)))
        done.append(_concatenated(n, parts, table, "table"))
    return done

