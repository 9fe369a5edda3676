"""The runtime walls per ai-edge-litert version, as measured, and the lint that reads them.

`runtime_walls.json` beside this file is written by `scripts/runtime_walls.py --record`: one tiny graph per known
wall (the spec's table and the runtime's upstream reproducers), run under each version, classed accepted / wrong /
rejected on the GPU the run found (docs/runtime-walls.md is the same data as a table). `runtime_findings(model,
version)` finds, by graph structure, the nodes of a .tflite that carry a wall that version rejects or computes
wrong: `python -m litert_gpu_toolkit lint MODEL --runtime 2.1.5`. A wall measured as accepted under a version is
not reported for it; a version never measured is an error naming the ones that were.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..core.model_info import ModelInfo, read_model_info
from ..core.symptoms import BY_ID

DATA = Path(__file__).with_name("runtime_walls.json")
BAD = ("rejected", "wrong")


class UnmeasuredRuntime(ValueError):
    """No measurement of the walls under that version."""


def load() -> dict:
    return json.loads(DATA.read_text()) if DATA.exists() else {"versions": [], "walls": {}}


def _ops_of_type(kind: str):
    return lambda info, op: op.op == kind


def _rank_above_4(info: ModelInfo, op) -> bool:
    return any(t >= 0 and info.tensor(t, op.subgraph).rank > 4 for t in op.outputs)


def _identical_inputs(info: ModelInfo, op) -> bool:
    ins = [t for t in op.inputs if t >= 0]
    return len(ins) != len(set(ins))


def _pad_rank3(info: ModelInfo, op) -> bool:
    return op.op in ("PAD", "PADV2") and bool(op.inputs) and info.tensor(op.inputs[0], op.subgraph).rank == 3


def _returned_and_consumed(kinds: tuple[str, ...]):
    def match(info: ModelInfo, op) -> bool:
        consumers = info.consumers(op.subgraph)
        return op.op in kinds and any(t in info.graph_outputs[op.subgraph] and consumers.get(t) for t in op.outputs)
    return match


# wall name (scripts/runtime_walls.py) -> does this node carry it?
MATCHERS = {
    "relu_0_to_1": _ops_of_type("RELU_0_TO_1"),
    "broadcast_to": _ops_of_type("BROADCAST_TO"),
    "identical_inputs": _identical_inputs,
    "rank5_elementwise": _rank_above_4,
    "select_v2_bool": _ops_of_type("SELECT_V2"),
    "cumsum": _ops_of_type("CUMSUM"),
    "reverse_v2": _ops_of_type("REVERSE_V2"),
    "gather": lambda info, op: op.op in ("GATHER", "GATHER_ND"),
    "pad_rank3": _pad_rank3,
    "output_aliasing": _returned_and_consumed(("ADD",)),
    "returned_fc": _returned_and_consumed(("FULLY_CONNECTED",)),
    "long_sum": _ops_of_type("SUM"),
}


def runtime_findings(model: str | os.PathLike | bytes | ModelInfo, version: str, data: dict | None = None):
    """Lint findings (`mobile.LintFinding`) for the walls `version` rejects or computes wrong, at each node of the
    model that carries one. Raises UnmeasuredRuntime when the walls were never measured under `version`."""
    from .finding import LintFinding

    data = load() if data is None else data
    if version not in data.get("versions", []):
        raise UnmeasuredRuntime(f"no runtime-wall measurements for ai-edge-litert {version} (measured: "
                                f"{', '.join(data.get('versions', [])) or 'none'}); measure it with "
                                f"scripts/runtime_walls.py --runtime {version} --record")
    info = model if isinstance(model, ModelInfo) else read_model_info(model)
    findings = []
    for name, wall in data.get("walls", {}).items():
        result = (wall.get("results") or {}).get(version) or {}
        match = MATCHERS.get(name)
        if result.get("class") not in BAD or match is None:
            continue
        symptom = BY_ID.get(wall.get("symptom"))
        for op in info.ops:
            if match(info, op):
                findings.append(LintFinding(
                    node=op.index, op=op.op, symptom=wall.get("symptom", name),
                    tensors=[f"{info.tensor(t, op.subgraph).name} {list(info.tensor(t, op.subgraph).shape)}"
                             for t in op.inputs if t >= 0][:3],
                    why=f"ai-edge-litert {version}: {result['class']} on the GPU ({wall.get('what', name)}: "
                        f"{result.get('why', '')}; measured on {data.get('device', '?')})",
                    rewrites=list(symptom.rewrites) if symptom else [], upstream=wall.get("upstream") or None,
                    desktop_reproduces=True, subgraph=op.subgraph))
    return findings


def versions_needing(rewrite: str, data: dict | None = None) -> list[str]:
    """One line when `rewrite` meets walls of the suite that only some runtime versions have: the versions that
    reject one of them or compute it wrong (they need the rewrite) and those that accept them all. Empty when the
    rewrite meets no measured wall, or when every measured version needs it."""
    data = load() if data is None else data
    walls = [(name, wall) for name, wall in sorted(data.get("walls", {}).items())
             if BY_ID.get(wall.get("symptom")) is not None and rewrite in BY_ID[wall["symptom"]].rewrites]
    if not walls:
        return []
    versions = data.get("versions", [])
    classes = {v: [((w.get("results") or {}).get(v) or {}).get("class") for _, w in walls] for v in versions}
    needed = [v for v in versions if any(c in BAD for c in classes[v])]
    fine = [v for v in versions if all(c == "accepted" for c in classes[v])]
    if not needed or not fine:
        return []
    what = "; ".join(w.get("what", n) for n, w in walls)
    return [f"{rewrite} meets {what}: needed on ai-edge-litert {', '.join(needed)}; not on {', '.join(fine)} "
            "(measured, docs/runtime-walls.md)"]
