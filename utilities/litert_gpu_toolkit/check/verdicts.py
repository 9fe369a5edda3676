"""The checker's verdicts, exit codes, tolerance and report (the data; `checker` does the work)."""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field

import numpy as np

from ..core.atomic_file import write_text_atomic


PASS, FALLBACK, COMPILE_FAIL, NUMERICS_FAIL, NO_GPU, INVALID_MODEL = (
    "PASS", "FALLBACK", "COMPILE_FAIL", "NUMERICS_FAIL", "NO_GPU", "INVALID_MODEL")
VERDICTS = (PASS, FALLBACK, COMPILE_FAIL, NUMERICS_FAIL, NO_GPU, INVALID_MODEL)
EXIT_CODES = {PASS: 0, FALLBACK: 1, COMPILE_FAIL: 1, NUMERICS_FAIL: 1, INVALID_MODEL: 2, NO_GPU: 3}
PRECISIONS = ("fp16", "fp32")
_LOG_NOISE = ("RegisterAccelerator", "DestroyAccelerator", "compiler_plugin", "_registry.cc", "Creating LiteRT "
              "environment", "Adding options to the existing", "libLiteRtCompilerPlugin", "Logging before InitGoogle",
              "All log messages before absl", "artificially reduced from", "Failed to load OpenCL",
              "# of threads to", "WebGPU environment (use_low_power", "Created a WebGPU environment",
              "Created LiteRT GpuEnvironment", "initialized directly from incoming")


@dataclass
class Tolerance:
    """When is a GPU output close enough to its reference? Finite and non-zero always; then these."""
    min_corr: float | None = 0.999   # Pearson correlation floor (None: not used)
    rtol: float | None = None        # with atol: np.allclose(out, ref, rtol, atol) must hold
    atol: float | None = None

    def describe(self) -> str:
        parts = ["finite where the reference is", "not all-zero"]
        if self.min_corr is not None:
            parts.append(f"corr >= {self.min_corr:g}")
        if self.rtol is not None or self.atol is not None:
            parts.append(f"allclose(rtol={self.rtol or 0:g}, atol={self.atol or 0:g})")
        return ", ".join(parts)


@dataclass
class Report:
    """Everything a check found. `to_dict()` is the JSON form; `outputs` (arrays) stays out of it."""
    model: str
    verdict: str
    summary: str
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    static: dict = field(default_factory=dict)
    inputs: list[dict] = field(default_factory=list)
    unsupported_ops: list[dict] = field(default_factory=list)   # [{op, reason, in_graph}]
    residency: dict | None = None                               # recipe.Residency fields (+ line)
    signatures: dict = field(default_factory=dict)              # sig -> output -> {shape, dtype, vs_cpu, vs_reference}
    suggestions: list[dict] = field(default_factory=list)       # [{symptom, seen, evidence, rewrites, ...}]
    environment: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)                 # step -> seconds
    runs: dict = field(default_factory=dict)                    # label -> status, compile_s, run_s, error, ...
    tolerance: dict = field(default_factory=dict)
    phone_risks: list[dict] = field(default_factory=list)      # lint.lint_for_mobile findings
    phone_risk: str | None = None                               # "passes here; phone risks: ..." on a PASS
    log_tail: str = ""
    outputs: dict = field(default_factory=dict, repr=False)     # label -> sig -> name -> array (not serialised)

    @property
    def ok(self) -> bool:
        return self.verdict == PASS

    @property
    def suggested_rewrites(self) -> list[str]:
        seen: list[str] = []
        for s in self.suggestions:
            seen += [r for r in s.get("rewrites", []) if r not in seen]
        return seen

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("outputs")
        return _json_safe(d)

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:               # atomically: a failed write never leaves half a report
            write_text_atomic(path, text + "\n")
        return text


def _json_safe(value):
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value
