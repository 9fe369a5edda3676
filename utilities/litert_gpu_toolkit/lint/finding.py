"""One lint finding: a node of a .tflite that carries a wall (`mobile` for phone-only walls, `runtime_walls` for
a runtime version's)."""
from __future__ import annotations

from dataclasses import asdict, dataclass


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
