"""What `convert_for_gpu` returns (`ConvertResult`) and how two conversions of one model are ranked (`quality`).

No torch import at module level; numpy only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.error_lines import telling_line
from ..rewrites.registry import Change
from .sensitivity import is_weak

# verdict -> how good a returned file is (higher is better); a fallback with wrong numbers scores as NUMERICS_FAIL
_SCORE = {"PASS": 5, "FALLBACK": 3, "NUMERICS_FAIL": 2, "COMPILE_FAIL": 1, "NO_GPU": 0, "INVALID_MODEL": 0,
          "UNCHECKED": 0, "CONVERT_FAIL": -1, "ERROR": -1}
GOOD_CORR = 0.999          # a GPU output correlated at least this well with torch is not "wrong numbers"


@dataclass
class ConvertResult:
    """What `convert_for_gpu` did. `ok` is True only when the model converted and the GPU check passed.

    changes: the rewrites in the returned file (kept); dropped: rewrite name -> why it was left out
    (it raised, or the file was worse with it than without); attempts: one line per conversion tried.
    error: what went wrong when there is no checked file (the full text; `error_line` is its telling line);
    stage: where it went wrong ("convert", or "run" / "copy" / "rewrite" / "check" for an unexpected error).
    specialised: data-dependent Python branches fixed to the example input's outcome ('file:line: code -> value').
    """
    path: Path | None
    changes: list[Change]
    report: Any = None                  # checker.Report; None when check=False or no file
    error: str | None = None            # the conversion error, when it failed
    suggestions: list[str] = field(default_factory=list)   # rewrite names for the error / failed check
    signatures: dict = field(default_factory=dict)         # signature -> {"inputs": [...], "outputs": [...]}
    dropped: dict = field(default_factory=dict)            # rewrite name -> reason it is not in the file
    attempts: list = field(default_factory=list)           # "label: verdict (...)" per conversion tried
    log_path: Path | None = None                           # the converter's output, when the conversion failed
    stage: str = "convert"
    specialised: list = field(default_factory=list)
    diagnosis: Any = None               # bisect.BisectReport when the numbers were wrong and a diagnosis ran
    repaired: list = field(default_factory=list)           # rewrites the diagnosis added (they are in `kept`)
    diagnosis_of: str = ""              # set when `diagnosis` bisected another file than this one (which one)
    graph_fault: Any = None             # diagnose.graph_bisect.GraphFault: the first op the GPU gets wrong
    graph_fault_error: str = ""         # why the graph bisect could not name one, when it ran and failed
    respellings: list = field(default_factory=list)        # "name: verdict (kept / not better)" per respelling tried
    input_share: float | None = None    # how much of the output the input drives (`sensitivity`); None: unmeasured
    quantized: Any = None               # quantize.QuantizeResult when ConvertOptions.weights is not fp32
    inputs: dict = field(default_factory=dict)     # signature -> {input name: array}: what the file was checked with
    reference: dict = field(default_factory=dict)  # signature -> {output name: array}: torch's outputs for them
    timings: dict = field(default_factory=dict)    # seconds per stage: reference, rewrite, legalize, convert
                                                   # (torch.export + lowering), check, quantize; and total

    def unresolved(self) -> str:
        """One line for a diagnosis that found no fix: what it concluded and everything it tried; "" when there
        was no diagnosis or it repaired the file."""
        d = self.diagnosis
        if d is None or self.repaired:
            return ""
        if d.diagnosis == "clean":
            cause = (f"no block diverges (every bisected boundary, the output included, at corr >= {d.min_corr} in "
                     "fp16) although the checked file does not match: the loss is not in one block")
        else:
            cause = f"{d.diagnosis} at {d.module or d.first_divergent or 'the output'}"
        tried = [f"a bisect over {len(d.boundaries)} boundaries"
                 + (f" ({len(d.not_run)} left out for time)" if d.not_run else "")]
        if d.fp16_fault is not None:
            tried.append("an fp16 range search in torch")
        if self.graph_fault is not None:
            cause += f"; the graph bisect names {self.graph_fault.kind} at op {self.graph_fault.op_index} " \
                     f"{self.graph_fault.op}"
            tried.append(f"a graph bisect of the file ({len(self.graph_fault.probes)} cuts)")
        elif self.graph_fault_error:
            tried.append(f"a graph bisect of the file ({self.graph_fault_error[:160]})")
        if self.respellings:
            tried.append(f"respelling the op ({'; '.join(self.respellings)})")
        after = [n for n, why in self.dropped.items() if str(why).startswith("tried after bisect")]
        applied = [n for n in d.rewrites if n in self.applied]
        if after:
            tried.append(f"{', '.join(after)} (not better)")
        if applied:
            tried.append(f"the matching {', '.join(applied)} (already in the file)")
        if not d.rewrites:
            tried.append("no rewrite matches this class and block")
        return f"diagnosis found no fix: {cause}; tried {'; '.join(tried)}"

    @property
    def ok(self) -> bool:
        """The file at `path` converted and passed the GPU check (quantized or, when quantizing did not pass,
        the float file: `quantized.ok` says which)."""
        return self.error is None and self.report is not None and bool(self.report.ok)

    @property
    def verdict(self) -> str:
        if self.error is not None:
            return "CONVERT_FAIL" if self.stage == "convert" else "ERROR"
        if self.report is None:
            return "UNCHECKED"
        return str(self.report.verdict)

    @property
    def applied(self) -> list[str]:
        """The rewrites that changed the model in this attempt, whether or not a file came of it."""
        return list(dict.fromkeys(c.rewrite for c in self.changes))

    @property
    def kept(self) -> list[str]:
        """The rewrites in the returned file: none when no file was written (a failed conversion keeps nothing)."""
        return self.applied if self.path is not None and Path(self.path).exists() else []

    @property
    def runtime_dependent(self) -> list[str]:
        """For each kept rewrite that meets a wall only some ai-edge-litert versions have (RELU_0_TO_1: accepted up
        to 2.1.4), which versions need it and which do not, from the measured runtime-walls suite."""
        from ..lint.runtime_walls import versions_needing

        return [line for name in self.kept for line in versions_needing(name)]

    @property
    def error_line(self) -> str | None:
        """The one line of `error` that says what failed and where (never the converter's generic trailer)."""
        return telling_line(self.error) if self.error else None

    def summary(self, command: bool = False) -> str:
        """What happened, one fact a line. command=True: for a command-line tool (`export`), whose user cannot pass
        a rewrite: the suggestions are named as the Python API's, not as something to "try" with the command."""
        lines = [f"{self.verdict}: {self.path or '-'}"]
        if self.error:
            what = "conversion failed" if self.stage == "convert" else f"failed while {STAGES.get(self.stage)}"
            lines.append(f"  {what}: {self.error_line}")
            if self.log_path is not None:
                lines.append(f"  converter output: {self.log_path}")
        elif self.report is not None:
            lines.append(f"  check: {self.report.summary}")
            if is_weak(self.input_share):
                lines.append(f"  WARNING: a weak check: the input drives {self.input_share:.1%} of the output (the "
                             "rest is the same for any input), so corr barely sees the network's arithmetic; "
                             "check with weights and inputs that make the output depend on the input")
        if self.changes:
            lines.append(f"  rewrites kept: {', '.join(self.kept)}" if self.kept else
                         f"  rewrites tried (no file was written): {', '.join(self.applied)}")
        lines += [f"    {'exact' if c.exact else 'APPROX'} {c.rewrite}: {c.path or '<root>'}: {c.what}"
                  for c in self.changes]
        lines += [f"  runtime-dependent: {line}" for line in self.runtime_dependent]
        if self.specialised:
            lines.append("  WARNING: data-dependent branches specialised on the example input (the file is right only "
                         "for inputs that take the same branches):")
            lines += [f"    {s}" for s in self.specialised]
        for name, why in self.dropped.items():
            lines.append(f"  rewrite dropped: {name}: {why}")
        if len(self.attempts) > 1:
            lines.append("  conversions tried: " + "; ".join(self.attempts))
        if self.diagnosis is not None:
            lines.append(f"  diagnosis (bisect of {self.diagnosis_of or 'the converted model'}; GPU vs torch per "
                         "block):")
            lines += [f"    {line}" for line in self.diagnosis.summary().splitlines()]
            if self.graph_fault is not None:
                lines.append(f"  graph bisect (the file, op by op, GPU vs CPU): {self.graph_fault.line()}")
            if self.respellings:
                lines.append(f"  respellings tried: {'; '.join(self.respellings)}")
            if self.repaired:
                lines.append(f"  repaired by: {', '.join(self.repaired)} (kept: the file is better with them)")
            else:
                lines.append(f"  {self.unresolved()}")
        if self.suggestions and command:
            lines.append(f"  this command has no switch for what is left; from Python, the toolkit's "
                         f"{', '.join(self.suggestions)} (utilities/litert_gpu_toolkit/REFERENCE.md; rewrites go in "
                         "convert_for_gpu(..., include=[...]))")
        elif self.suggestions:
            lines.append(f"  try: {', '.join(self.suggestions)}")
        if self.quantized is not None:
            lines += [f"  weights {line.strip()}" if i == 0 else line
                      for i, line in enumerate(self.quantized.summary(check=False).splitlines())]
        return "\n".join(lines)


STAGES = {"run": "running the model in torch on the example inputs", "copy": "copying the model",
          "outputs": "reading the model's outputs",
           "rewrite": "rewriting the model", "check": "checking the converted file", "convert": "converting",
           "quantize": "quantizing the weights"}


def np_tree(value) -> list[np.ndarray]:
    """The tensors of a (nested) output as numpy arrays, in the order the converter flattens them
    (`outputs.flat_tensors`); int64 as int32 and other floats as float32, as the converted file holds them."""
    import torch

    from ..core.outputs import flat_tensors

    arrays = []
    for t in flat_tensors(value):
        t = t.detach().cpu()
        if t.dtype == torch.int64:
            t = t.to(torch.int32)
        if t.dtype in (torch.float64, torch.bfloat16, torch.float16):
            t = t.to(torch.float32)
        arrays.append(t.numpy())
    return arrays


def signature_arrays(args: tuple, kwargs: dict) -> dict:
    """The example inputs as numpy arrays by the names the converted file gives them (a list input: args_0_0,
    args_0_1, ...); when they cannot be named so, the single-tensor positional and keyword inputs."""
    from ..core.outputs import input_names

    leaves = input_names(args, kwargs)
    if leaves is not None:
        return {name: np_tree(t)[0] for name, t in leaves}
    named = {}
    for key, value in [(f"args_{i}", a) for i, a in enumerate(args)] + list(kwargs.items()):
        arrays = np_tree(value)
        if len(arrays) == 1:
            named[key] = arrays[0]
    return named


def _corrs(report) -> list[float]:
    """Every GPU output's corr vs torch; a non-finite or all-zero one counts as -1 (its corr, taken over the
    finite values or left out, would rank an inf-producing file above a finite, slightly degraded one)."""
    gpu = [c for outs in (getattr(report, "signatures", None) or {}).values() for e in outs.values()
           for lbl, c in e.get("vs_reference", {}).items() if lbl != "cpu"]
    wrong = ("nonfinite", "all_zero")
    return [-1.0 if c.get("symptom") in wrong else c["corr"] for c in gpu
            if c.get("symptom") in wrong or c.get("corr") is not None]

def _min_corr(report) -> float:
    corrs = _corrs(report)
    return float(min(corrs)) if corrs else -1.0


def wrong_outputs(report) -> list[str]:
    """The GPU outputs of a checked file whose numbers are wrong, as 'signature/output on label: why'.

    Judged against torch (`vs_reference`) where the check had it, else against the file's own CPU run: wrong
    when non-finite where torch is not, all zero, or correlated below GOOD_CORR. An output outside the caller's
    rtol / atol that still correlates >= GOOD_CORR is not wrong, nor is a GPU output that matches torch while
    the file's CPU run does not (then the CPU run is what differs). These are what made a checker problem
    'outside tolerance' while every corr read 1.000000."""
    wrong = []
    for sig, outs in (getattr(report, "signatures", None) or {}).items():
        for name, e in outs.items():
            judged = {lbl: c for lbl, c in e.get("vs_reference", {}).items() if lbl != "cpu"} or e.get("vs_cpu", {})
            for lbl, c in judged.items():
                if c.get("within_tolerance", True):
                    continue
                corr = c.get("corr")
                if c.get("symptom") in ("nonfinite", "all_zero"):
                    wrong.append(f"{sig}/{name} on {lbl}: {c['symptom'].replace('_', '-')}")
                elif corr is None or corr < GOOD_CORR:
                    wrong.append(f"{sig}/{name} on {lbl}: corr {'-' if corr is None else f'{corr:.6f}'}")
    return wrong


def quality(result: ConvertResult) -> tuple:
    """A sortable score of a conversion: verdict first, then GPU residency, then the worst corr vs torch.

    A FALLBACK file ranks as NUMERICS_FAIL only when a GPU output's numbers are wrong (`wrong_outputs`)."""
    score = float(_SCORE.get(result.verdict, 0))
    report = result.report
    if result.verdict == "FALLBACK" and wrong_outputs(report):
        score = _SCORE["NUMERICS_FAIL"]
    res = getattr(report, "residency", None) or {}
    frac = (res.get("gpu_ops") or 0) / res["total_ops"] if res.get("total_ops") else 0.0
    return (score, round(frac, 4), round(_min_corr(report), 6) if report is not None else -1.0)


def describe(result: ConvertResult) -> str:
    score, frac, corr = quality(result)
    parts = [result.verdict]
    if score < float(_SCORE.get(result.verdict, 0)):      # demoted by quality(): say why, or the ranking reads wrong
        parts.append(f"(wrong numbers: {'; '.join(wrong_outputs(result.report)[:2])})")
    if frac:
        parts.append(f"{frac:.0%} ops on GPU")
    if corr > -1:
        parts.append(f"min corr {corr:.6f}")
    return " ".join(parts)
