"""Model Explorer overlays: node data that `ai-edge-model-explorer` paints onto a .tflite graph.

The file is Model Explorer's node-data JSON (its `ModelNodeData` form): graph id -> {"name", "results":
{node id -> {"value", "bgColor"}}}. For a .tflite, Model Explorer's graph ids are the subgraphs' names
("main" for litert-torch's single subgraph; the signature key for an unnamed one) and an op's node id is its
index in the subgraph's operator list -- the same index the GPU delegate reports. Writing it needs no Model
Explorer install; viewing it does: `explorer_command` gives the line that opens the graph with the overlay.

`residency_overlay`: per op, where the checker's run put it -- GPU, or CPU because the GPU delegate rejected
its op type (with the delegate's reason). When the run was a fallback whose CPU ops outnumber the rejected
ones, the others cannot be placed op by op from the delegate's log, and say so.
"""
from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from ..core.model_info import ModelInfo, read_model_info

GPU, CPU_REJECTED, UNRESOLVED, NOT_RUN = "#9be7a0", "#ff8a80", "#ffe082", "#e0e0e0"   # CSS background colours


def graph_ids(info: ModelInfo) -> dict[int, str]:
    """Subgraph index -> Model Explorer graph id: the subgraph's name in the file ("main" from litert-torch), else
    the key of the signature that runs it, else Model Explorer's name for an unnamed subgraph."""
    by_signature = {s.subgraph: s.key for s in info.signatures}
    ids = {}
    for i in sorted({op.subgraph for op in info.ops}) or [0]:
        name = info.subgraph_names[i] if i < len(info.subgraph_names) else ""
        ids[i] = name or by_signature.get(i) or f"subgraph_{i}"
    return ids


def _graph(name: str, results: dict) -> dict:
    # showExpandedSummaryOnGroupNode: a layer's group box lists how many of its ops are on each side
    return {"name": name, "results": results, "showExpandedSummaryOnGroupNode": True,
            "showLabelCountColumnsInChildrenStatsTable": True}


def residency_overlay(model: str | os.PathLike | ModelInfo, report) -> dict:
    """Node data for a checked model: per op "GPU", "CPU: rejected by the GPU (<reason>)", or (a fallback whose
    extra CPU ops the delegate does not name) "GPU or CPU: not resolved per op"; "not run on the GPU" when the
    check compiled nothing (NO_GPU, INVALID_MODEL, a compile failure)."""
    info = model if isinstance(model, ModelInfo) else read_model_info(model)
    rejected = {u["op"]: u.get("reason") or "rejected" for u in (report.unsupported_ops or [])}
    res = report.residency or {}
    ran = res.get("gpu_ops") is not None or report.verdict == "PASS"
    n_rejected = sum(op.op in rejected for op in info.ops)
    resolved = report.verdict == "PASS" or (res.get("cpu_ops") is not None and res["cpu_ops"] <= n_rejected)
    ids = graph_ids(info)
    graphs: dict[str, dict] = {gid: {} for gid in ids.values()}
    for op in info.ops:
        if op.op in rejected:
            value, colour = f"CPU: rejected by the GPU ({rejected[op.op]})", CPU_REJECTED
        elif not ran:
            value, colour = f"not run on the GPU ({report.verdict})", NOT_RUN
        elif resolved:
            value, colour = "GPU", GPU
        else:
            value, colour = "GPU or CPU: not resolved per op", UNRESOLVED
        graphs[ids[op.subgraph]][str(op.index)] = {"value": f"{op.op}: {value}" if op.op in rejected else value,
                                                    "bgColor": colour}
    return {gid: _graph("GPU residency", results) for gid, results in graphs.items()}


def write_overlay(folder: str | os.PathLike, name: str, data: dict) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def explorer_command(model: str | os.PathLike, overlays: list[str | os.PathLike]) -> str:
    """The shell line that opens `model` in Model Explorer with the overlays (pip install ai-edge-model-explorer)."""
    paths = ",".join(str(p) for p in overlays)
    return shlex.join(["model-explorer", str(model), f"--node_data_paths={paths}"])


def module_path(tensor_name: str) -> list[str]:
    """The attribute path of the module that made a tensor, from litert-torch's tensor name: its '/'-separated
    scopes are '<qualified class>_<attribute>' (then ';N'); a scope without an attribute (the root) adds none."""
    path = []
    for scope in tensor_name.split(";")[0].split("/"):
        cls_and_attr = scope.rsplit(".", 1)[-1]
        if "_" in cls_and_attr:
            path.append(cls_and_attr.split("_", 1)[1])
    return path


def _block_of(path: list[str], blocks: list[list[str]]) -> int | None:
    """The index of the deepest block whose attribute path occurs, contiguously, in `path` (wrappers add scopes
    in front of the user's model, so a block is matched anywhere in the path rather than at its start)."""
    best = None
    for i, block in enumerate(blocks):
        n = len(block)
        if n and any(path[j:j + n] == block for j in range(len(path) - n + 1)):
            if best is None or n > len(blocks[best]):
                best = i
    return best


def block_overlay(model: str | os.PathLike | ModelInfo, report) -> dict:
    """Node data from a bisect report: each op of the model's .tflite gets the fp16 error (1 - correlation of
    the GPU's fp16 output with torch) measured at the output of the block it belongs to, coloured on a
    green-to-red gradient; ops outside every measured block carry no value."""
    import math

    info = model if isinstance(model, ModelInfo) else read_model_info(model)
    rows = [b for b in report.boundaries if b.name]
    blocks = [b.name.split(".") for b in rows]
    ids = graph_ids(info)
    graphs: dict[str, dict] = {gid: {} for gid in ids.values()}
    for op in info.ops:
        names = [info.tensor(t, op.subgraph).name for t in op.outputs if t >= 0]
        block = _block_of(module_path(names[0]), blocks) if names else None
        if block is None:
            continue
        fp16 = rows[block].fp16
        if fp16 is None or not math.isfinite(fp16.corr):
            continue
        graphs[ids[op.subgraph]][str(op.index)] = {"value": round(1.0 - fp16.corr, 9)}
    gradient = [{"stop": 0, "bgColor": GPU}, {"stop": 1, "bgColor": CPU_REJECTED}]
    return {gid: {"name": "fp16 error (1 - corr) per block", "results": results, "gradient": gradient}
            for gid, results in graphs.items()}
