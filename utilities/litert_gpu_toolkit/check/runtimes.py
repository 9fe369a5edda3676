"""One .tflite checked under several ai-edge-litert versions: the matrix a user needs before pinning a runtime.

`runtime_matrix(model, ["2.1.3", "2.3.0"])` checks the file under the installed runtime first (the baseline: its
CPU outputs become the reference every other version is compared with, unless the caller gives one), then under
each other version in a side environment (`runtime.versions`), with the same inputs. Per version: does the strict
GPU-only compile pass, the residency line, the lowest fp16 GPU correlation with the reference, and the ops the GPU
rejected with their reasons. `transitions` says, per rejected op type, the first version listed that accepts it
(or the first that stops accepting it): what an upgrade or a downgrade does to the file.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .checker import check_gpu_compatibility, check_under_runtime
from .verdicts import PASS, Report


@dataclass
class RuntimeRow:
    version: str
    report: Report
    installed: bool = False

    @property
    def rejected(self) -> dict[str, str]:
        """op type -> the GPU's reason, for the ops the strict compile rejected."""
        return {r["op"]: r.get("reason", "") for r in self.report.unsupported_ops}

    @property
    def min_corr(self) -> float | None:
        """The lowest fp16 GPU correlation with the reference (the caller's, else the baseline CPU's) over every
        output; None when no GPU output was compared."""
        found = []
        for outputs in self.report.signatures.values():
            for entry in outputs.values():
                for side in ("vs_reference", "vs_cpu"):
                    corr = next((c.get("corr") for label, c in (entry.get(side) or {}).items()
                                 if label.startswith("gpu_fp16")), None)
                    if corr is not None:
                        found.append(corr)
                        break
        finite = [c for c in found if isinstance(c, float) and math.isfinite(c)]
        return min(finite) if finite else (float("nan") if found else None)

    def cells(self) -> list[str]:
        res = (self.report.residency or {}).get("line") or "-"
        corr = self.min_corr
        rejected = "; ".join(f"{op}: {why}"[:90] for op, why in self.rejected.items()) or "-"
        return [f"{self.version}{' (installed)' if self.installed else ''}", self.report.verdict,
                res.replace("GPU residency: ", ""), "-" if corr is None else f"{corr:.6f}", rejected]


@dataclass
class RuntimeMatrix:
    model: str
    rows: list[RuntimeRow] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)    # version -> why it could not be used

    @property
    def ok(self) -> bool:
        return all(r.report.verdict == PASS for r in self.rows)

    def transitions(self) -> list[str]:
        """Per op type rejected under some version and accepted under another (a version whose strict compile
        passed accepts every op), in version order: where it changes."""
        from ..runtime.versions import parse_version

        rows = sorted(self.rows, key=lambda r: parse_version(r.version))
        lines = []
        for op in dict.fromkeys(op for r in rows for op in r.rejected):
            # known under a version when it rejected the op, or compiled strictly (every op accepted), or listed
            # other rejections (the delegate names every op it declines); unknown after a crash or with no GPU
            state = [(r.version, op not in r.rejected) for r in rows
                     if op in r.rejected or r.report.verdict in (PASS, "NUMERICS_FAIL") or r.rejected]
            for (_, before), (version, now) in zip(state, state[1:]):
                if before != now:
                    lines.append(f"{op}: {'accepted' if now else 'rejected'} from {version} on "
                                 f"({'rejected' if now else 'accepted'} before)")
        return lines

    def table(self) -> str:
        head = ["ai-edge-litert", "verdict", "residency", "min corr fp16", "rejected ops (reason)"]
        rows = [head, ["---"] * len(head)] + [r.cells() for r in self.rows]
        return "\n".join("| " + " | ".join(cells) + " |" for cells in rows)

    def to_dict(self) -> dict:
        return {"model": self.model, "ok": self.ok, "transitions": self.transitions(), "skipped": self.skipped,
                "runtimes": {r.version: {"installed": r.installed, "min_corr_fp16": r.min_corr,
                                         "report": r.report.to_dict()} for r in self.rows}}


def runtime_matrix(model, versions: list[str], *, progress=None, skip_unusable: bool = False,
                   **check_kwargs) -> RuntimeMatrix:
    """Check `model` under the installed runtime, then under each of `versions` (the installed one is not run
    twice). check_kwargs go to `check_gpu_compatibility` for every version; without a `reference` the baseline's
    CPU outputs are the reference of the others. Raises `RuntimeVersionError` for a version that cannot be made
    (before any check runs); with skip_unusable (`--runtime all`) such a version is left out and named in
    `skipped` instead."""
    from ..runtime.versions import RuntimeVersionError, installed_version, prepare

    say = progress or (lambda text: None)
    installed = installed_version()
    matrix = RuntimeMatrix(str(model))
    others = []
    for v in (v for v in dict.fromkeys(versions) if v != installed):
        try:
            prepare(v, say)
            others.append(v)
        except RuntimeVersionError as e:
            if not skip_unusable:
                raise
            matrix.skipped[v] = str(e)
    say(f"checking under ai-edge-litert {installed} (installed)")
    base = check_gpu_compatibility(model, **check_kwargs)
    matrix.rows.append(RuntimeRow(installed, base, installed=True))
    kwargs = dict(check_kwargs)
    if kwargs.get("reference") is None and base.outputs.get("cpu"):
        kwargs["reference"] = base.outputs["cpu"]
    for v in others:
        say(f"checking under ai-edge-litert {v}")
        matrix.rows.append(RuntimeRow(v, check_under_runtime(v, model, **kwargs)))
    return matrix
