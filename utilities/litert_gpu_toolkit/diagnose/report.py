"""What bisect measured: one row per boundary (`BoundaryResult`) and the report with its diagnosis (`BisectReport`)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from ..core.metrics import Comparison

DEFAULT_MAX_BOUNDARIES = 32
_FLAT_SNR_DB = 40.0      # a constant tap has no correlation; below this SNR it counts as diverging
FP16_MAX = 65504.0


@dataclass
class BoundaryResult:
    name: str                          # module path; "" is the model's output
    fp16: Comparison | None
    fp32: Comparison | None
    status: str                       # runtime status of the fp16 run ("ok", "ops_rejected", ...)
    reductions: list[str] = field(default_factory=list)   # norm-like submodules and reduction ops in the block
    cpu: Comparison | None = None     # LiteRT's CPU runtime vs torch
    ops: list[str] = field(default_factory=list)   # op types this graph has more of than the previous boundary's
    seconds: float = 0.0
    histogram: dict = field(default_factory=dict, repr=False)
    torch16: Comparison | None = None  # torch with fp16 tensors vs torch fp32: what fp16 storage keeps
    fp16_value: Any = field(default=None, repr=False)    # the GPU's fp16 output of this tap (numpy), not saved

    @property
    def label(self) -> str:
        return self.name or "<output>"

    def to_dict(self) -> dict:
        return {"name": self.label, "status": self.status, "reductions": self.reductions, "ops": self.ops,
                "seconds": round(self.seconds, 2),
                **{k: (c.to_dict() if c else None) for k, c in (("fp16", self.fp16), ("fp32", self.fp32),
                                                                ("cpu", self.cpu), ("torch16", self.torch16))}}


def diverges(cmp: Comparison | None, min_corr: float) -> bool:
    """True when a run's output is wrong: missing, non-finite, all-zero, or correlated below `min_corr`
    (a constant output, which has no correlation, by SNR instead)."""
    if cmp is None:
        return True
    if cmp.nonfinite or cmp.all_zero:
        return True
    if math.isfinite(cmp.corr):
        return cmp.corr < min_corr
    return not (cmp.snr_db >= _FLAT_SNR_DB)


@dataclass
class BisectReport:
    boundaries: list[BoundaryResult]
    first_divergent: str | None
    diagnosis: str   # overflow underflow compounding degraded miscompute conversion_error clean not_on_gpu
    #                  export_failed
    explanation: str
    min_corr: float
    module: str | None = None         # the first diverging module inside the first diverging block
    ops: list[str] = field(default_factory=list)         # the op types that module adds to the graph
    rewrites: list[str] = field(default_factory=list)    # toolkit rewrites that match the class and the block
    not_run: list[str] = field(default_factory=list)     # boundaries the time budget left out
    inside: list[BoundaryResult] = field(default_factory=list)   # the first diverging block's children
    fp16_fault: Any = None            # fp16_emulation.Fp16Fault behind an overflow / underflow class, if reproduced
    # the model's output needs more than fp16 storage (torch with fp16 tensors is wrong too); None: not measured
    storage_bound: bool | None = None

    def to_dict(self) -> dict:
        return {"boundaries": [b.to_dict() for b in self.boundaries], "first_divergent": self.first_divergent,
                "diagnosis": self.diagnosis, "explanation": self.explanation, "min_corr": self.min_corr,
                "module": self.module, "ops": self.ops, "rewrites": self.rewrites, "not_run": self.not_run,
                "inside": [b.to_dict() for b in self.inside],
                "fp16_fault": None if self.fp16_fault is None else dataclasses.asdict(self.fp16_fault),
                "storage_bound": self.storage_bound}

    def summary(self) -> str:
        rows = [f"{'boundary':38s} {'corr fp16':>10s} {'SNR fp16':>9s} {'SNR fp32':>9s} {'corr CPU':>9s} "
                f"{'torch16':>9s} {'nonfin':>6s}  new ops"]
        for b in self.boundaries:
            rows.append(_table_row(b))
        if any(b.torch16 is not None for b in self.boundaries):
            rows.append("(torch16: torch with fp16 tensors vs torch fp32 -- what storing every value in fp16 keeps)")
        if self.not_run:
            rows.append(f"(not run within the time budget: {', '.join(self.not_run[:8])}"
                        f"{' ...' if len(self.not_run) > 8 else ''})")
        if self.inside:
            rows.append(f"inside {self.first_divergent}:")
            rows += ["  " + _table_row(b) for b in self.inside]
        rows.append(f"diagnosis: {self.diagnosis} -- {self.explanation}")
        if self.rewrites:
            rows.append(f"matching rewrites: {', '.join(self.rewrites)}")
        return "\n".join(rows)


def _table_row(b: BoundaryResult) -> str:
    f16, f32, cpu = b.fp16, b.fp32, b.cpu
    return (f"{b.label[:38]:38s} {_f(f16.corr if f16 else None):>10s} {_db(f16):>9s} {_db(f32):>9s} "
            f"{_f(cpu.corr if cpu else None):>9s} {_f(b.torch16.corr if b.torch16 else None):>9s} "
            f"{(f16.nonfinite if f16 else '-')!s:>6s}  "
            f"{' '.join(b.ops[:6])}" + ("" if b.status == "ok" else f"  [{b.status[:80]}]"))


def _f(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.6g}"


def _db(c: Comparison | None) -> str:
    if c is None or math.isnan(c.snr_db):
        return "-"
    return "exact" if math.isinf(c.snr_db) and c.snr_db > 0 else f"{c.snr_db:.1f}"
