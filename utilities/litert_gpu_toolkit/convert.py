"""From a torch model to a checked GPU .tflite in one call: rewrites, conversion, GPU check.

    from litert_gpu_toolkit import convert_for_gpu
    result = convert_for_gpu(model, (x,), "artifacts/model.tflite")
    print(result.summary())          # result.ok is True only when the GPU check passed

`apply_patches` applies every registered exact module patch (`rewrites.PATCHES`) in place and lists
the functional rewrites (`rewrites.functional` handlers) that a forward pass on the example inputs
triggers; `convert_for_gpu` then converts the model wrapped in `GpuRewriteWrapper` (so those
functional rewrites apply while litert-torch traces it, and nowhere else) and checks the result with
`checker.check_gpu_compatibility` against the torch outputs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .quiet import converter_output, quiet_import_litert_torch, stage
from .rewrites.apply import apply_patches, split_example_inputs  # public API, re-exported
from .rewrites.registry import (PATCHES, Change, check_names, functional_selection, known_rewrites,  # noqa: F401
                                load_rewrites)
from .rewrites.registry import selected as _selected

# ------------------------------------------------------------------------------------- convert

@dataclass
class ConvertResult:
    """What `convert_for_gpu` did. `ok` is True only when the model converted and the GPU check passed.

    changes: the rewrites in the returned file (kept); dropped: rewrite name -> why it was left out
    (it raised, or the file was worse with it than without); attempts: one line per conversion tried.
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

    @property
    def ok(self) -> bool:
        return self.error is None and self.report is not None and bool(self.report.ok)

    @property
    def verdict(self) -> str:
        if self.error is not None:
            return "CONVERT_FAIL"
        if self.report is None:
            return "UNCHECKED"
        return str(self.report.verdict)

    @property
    def kept(self) -> list[str]:
        return list(dict.fromkeys(c.rewrite for c in self.changes))

    def summary(self) -> str:
        lines = [f"{self.verdict}: {self.path or '-'}"]
        if self.error:
            lines.append(f"  conversion failed: {self.error.strip().splitlines()[-1][:300]}")
            if self.log_path is not None:
                lines.append(f"  converter output: {self.log_path}")
        elif self.report is not None:
            lines.append(f"  check: {self.report.summary}")
        if self.changes:
            lines.append(f"  rewrites kept: {', '.join(self.kept)}")
        lines += [f"    {'exact' if c.exact else 'APPROX'} {c.rewrite}: {c.path or '<root>'}: {c.what}"
                  for c in self.changes]
        for name, why in self.dropped.items():
            lines.append(f"  rewrite dropped: {name}: {why}")
        if len(self.attempts) > 1:
            lines.append("  conversions tried: " + "; ".join(self.attempts))
        if self.suggestions:
            lines.append(f"  try: {', '.join(self.suggestions)}")
        return "\n".join(lines)


def _np_tree(value) -> list[np.ndarray]:
    import torch

    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if t.dtype == torch.int64:
            t = t.to(torch.int32)
        if t.dtype in (torch.float64, torch.bfloat16, torch.float16):
            t = t.to(torch.float32)
        return [t.numpy()]
    if isinstance(value, dict):
        return [a for v in value.values() for a in _np_tree(v)]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _np_tree(v)]
    return []


def _signature_inputs(args: tuple, kwargs: dict) -> dict[str, np.ndarray]:
    named = {}
    for i, a in enumerate(args):
        arrays = _np_tree(a)
        if len(arrays) == 1:
            named[f"args_{i}"] = arrays[0]
    for k, v in kwargs.items():
        arrays = _np_tree(v)
        if len(arrays) == 1:
            named[k] = arrays[0]
    return named


def _check(path: Path, inputs: dict, reference: dict, check_kwargs: dict):
    from .checker import check_gpu_compatibility

    return check_gpu_compatibility(path, inputs=inputs, reference=reference, **check_kwargs)


# verdict -> how good a returned file is (higher is better); a fallback with wrong numbers scores as NUMERICS_FAIL
_SCORE = {"PASS": 5, "FALLBACK": 3, "NUMERICS_FAIL": 2, "COMPILE_FAIL": 1, "NO_GPU": 0, "INVALID_MODEL": 0,
          "UNCHECKED": 0, "CONVERT_FAIL": -1}


def _min_corr(report) -> float:
    corrs = [c.get("corr") for outs in (getattr(report, "signatures", None) or {}).values() for e in outs.values()
             for lbl, c in e.get("vs_reference", {}).items() if lbl != "cpu" and c.get("corr") is not None]
    return float(min(corrs)) if corrs else -1.0


def quality(result: ConvertResult) -> tuple:
    """A sortable score of a conversion: verdict first, then GPU residency, then the worst corr vs torch."""
    score = float(_SCORE.get(result.verdict, 0))
    report = result.report
    if result.verdict == "FALLBACK" and any("outside tolerance" in p for p in getattr(report, "problems", [])):
        score = _SCORE["NUMERICS_FAIL"]
    res = getattr(report, "residency", None) or {}
    frac = (res.get("gpu_ops") or 0) / res["total_ops"] if res.get("total_ops") else 0.0
    return (score, round(frac, 4), round(_min_corr(report), 6) if report is not None else -1.0)


def _describe(result: ConvertResult) -> str:
    score, frac, corr = quality(result)
    parts = [result.verdict]
    if score < float(_SCORE.get(result.verdict, 0)):      # demoted by quality(): say why, or the ranking reads wrong
        parts.append("(outputs outside tolerance)")
    if frac:
        parts.append(f"{frac:.0%} ops on GPU")
    if corr > -1:
        parts.append(f"min corr {corr:.6f}")
    return " ".join(parts)


def convert_for_gpu(model, example_inputs, output_path: str | os.PathLike, *, patches: bool = True,
                    check: bool = True, kwargs: dict | None = None, signature_name: str = "serving_default",
                    signatures: dict[str, Any] | None = None, include: Sequence[str] | None = None,
                    only: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
                    approximate: bool = False, check_kwargs: dict | None = None, inplace: bool = False,
                    fallback: bool = True, max_tries: int = 6, verbose: bool | None = None,
                    **convert_kwargs) -> ConvertResult:
    """Rewrite a copy of `model`, convert it with litert-torch to `output_path`, check it on the GPU.

    example_inputs: a tensor, a tuple of positional inputs, a dict of keyword inputs, or (args, kwargs);
        `kwargs` adds keyword inputs. Converted input names: args_0, args_1, ... then the keywords.
    signature_name: the name of the one signature; `signatures={name: example_inputs, ...}` converts
        the same model once per entry into a multi-signature file (example_inputs is then unused).
    patches: apply the toolkit's rewrites (`apply_patches`) and convert inside `GpuRewriteWrapper`, so
        functional rewrites apply during tracing only. include: opt-in rewrites added to the defaults;
        only: nothing but these; exclude: never these; approximate: allow labelled approximations.
        An unknown name raises ValueError (the only error this function raises for bad arguments).
    inplace: False (default) rewrites a deep copy: `model` is never changed. True applies the module
        patches to `model` itself (saves the copy) and disables `fallback`.
    check: run `checker.check_gpu_compatibility` with the example inputs and the torch outputs as the
        reference.
    fallback: never return a result worse than plain conversion. When the rewritten file does not PASS,
        the model is also converted without rewrites; when that is better (verdict, then GPU residency,
        then corr vs torch), the rewrites are dropped one at a time (at most `max_tries` conversions)
        and the best file is kept. A rewrite that raises is dropped too. `result.dropped` and
        `result.summary()` say which rewrites were kept and why the others were not.
    verbose: show the converter's own output live (default: LITERT_GPU_VERBOSE); otherwise it goes to
        `<output>.convert.log` and the toolkit prints one line per stage.
    convert_kwargs: passed to litert_torch (e.g. dynamic_shapes, quant_config).
    Never raises for a conversion failure or a failing rewrite: `result.error` holds it and `result.ok`
    is False; `ok` is True only when the check ran and passed.
    """

    import torch

    check_names(include, "include")
    check_names(only, "only")
    check_names(exclude, "exclude")
    path = Path(output_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model.eval()
    entries = signatures or {signature_name: (example_inputs, kwargs)}
    parsed = {}
    for name, value in entries.items():
        if signatures is None:
            parsed[name] = split_example_inputs(example_inputs, kwargs)
        else:
            parsed[name] = split_example_inputs(value)
    # the reference is the source model, taken before any rewrite touches it
    inputs, reference = {}, {}
    with torch.no_grad():
        for name, (args, kw) in parsed.items():
            inputs[name] = _signature_inputs(args, kw)
            reference[name] = {f"output_{i}": o for i, o in enumerate(_np_tree(model(*args, **kw)))}
    job = _Job(model, parsed, inputs, reference, signature_name, signatures is None, check,
               dict(check_kwargs or {}), convert_kwargs, include, only, approximate, verbose)
    if not patches:
        return job.finish(job.attempt(path, None, "plain", copy_model=False), path)
    fallback = fallback and check and not inplace
    excluded = set(exclude or ())
    dropped: dict[str, str] = {}
    tries = [path.parent / f".{path.stem}.try{i}{path.suffix}" for i in range(max_tries + 2)]
    result = job.attempt(tries[0] if fallback else path, excluded, "rewritten", copy_model=not inplace,
                         dropped=dropped)
    if result.ok or not fallback:
        return job.finish(result, path, tries, dropped)
    plain = job.attempt(tries[1], None, "plain", copy_model=True)
    best = result
    if quality(plain) > quality(result):
        n = 2
        for name in result.kept:
            if n >= len(tries):
                break
            cand = job.attempt(tries[n], excluded | set(dropped) | {name}, f"without {name}", copy_model=True,
                               dropped={})
            n += 1
            if quality(cand) > quality(best):
                dropped[name] = (f"with it: {_describe(best)}; without it: {_describe(cand)}")
                best = cand
                if best.ok:
                    break
        if quality(plain) > quality(best):
            for name in best.kept:
                dropped[name] = (f"plain conversion ({_describe(plain)}) beats every rewritten file tried "
                                 f"(best: {_describe(best)})")
            best = plain
    return job.finish(best, path, tries, dropped)


class _Job:
    """The fixed parts of one `convert_for_gpu` call; `attempt` converts and checks one rewrite selection."""

    def __init__(self, model, parsed, inputs, reference, signature_name, single, check, check_kwargs,
                 convert_kwargs, include, only, approximate, verbose=None):
        self.model, self.parsed, self.inputs, self.reference = model, parsed, inputs, reference
        self.signature_name, self.single, self.check = signature_name, single, check
        self.check_kwargs, self.convert_kwargs = check_kwargs, convert_kwargs
        self.include, self.only, self.approximate = include, only, approximate
        self.verbose = verbose
        self.log: list[str] = []
        self.tried: set[str] = set()         # rewrite names active in some attempt

    def attempt(self, path: Path, exclude: set | None, label: str, *, copy_model: bool,
                dropped: dict | None = None) -> ConvertResult:
        """exclude=None: plain (no rewrites). A rewrite that raises is added to `dropped` and excluded."""
        import copy

        import torch

        from .symptoms import for_log, suggestions

        litert_torch = quiet_import_litert_torch(self.verbose)

        plain = exclude is None
        exclude = set(exclude or ())
        changes: list[Change] = []
        model = copy.deepcopy(self.model) if copy_model else self.model
        runnable = model
        for _ in range(8):                                # each round drops the rewrites that raised
            if plain:
                break
            errors: dict[str, str] = {}
            try:
                first_args, first_kwargs = next(iter(self.parsed.values()))
                changes = apply_patches(model, (first_args, first_kwargs), include=self.include, only=self.only,
                                        exclude=sorted(exclude), approximate=self.approximate, errors=errors)
            except Exception as e:                         # noqa: BLE001 - outside any one patch
                errors["apply_patches"] = f"{type(e).__name__}: {e}"[:300]
            for name, err in errors.items():
                if dropped is not None:
                    dropped[name] = f"raised while rewriting: {err}"
                exclude.add(name)
            if not errors or not copy_model:              # (in place: keep what was applied)
                names = functional_selection(self.include, sorted(exclude), self.approximate, self.only)
                self.tried |= set(names) | {n for n in PATCHES if _selected(
                    n, set(self.include or ()), exclude, self.approximate,
                    None if self.only is None else set(self.only))}
                if names and "functional rewrites" not in errors:
                    from .rewrites.functional import GpuRewriteWrapper

                    runnable = GpuRewriteWrapper(model, include=names).eval()
                break
            if "apply_patches" in errors or "functional rewrites" in errors:
                model = runnable = copy.deepcopy(self.model)     # give up on rewrites for this attempt
                changes = []
                break
            model = runnable = copy.deepcopy(self.model)         # retry without the ones that raised
        result = ConvertResult(path, changes)
        log_path = path.with_name(path.name + ".convert.log")
        stage(f"converting ({label}{', ' + str(len(changes)) + ' module rewrites' if changes else ''})")
        try:
            with converter_output(log_path, verbose=self.verbose):
                self._convert(litert_torch, runnable, path)
        except Exception as e:                               # noqa: BLE001 - reported, never swallowed as success
            result.error = f"{type(e).__name__}: {e}"
            result.path = None
            result.log_path = None if self.verbose else log_path
            result.suggestions = suggestions(for_log(str(e)))
            self.log.append(f"{label}: CONVERT_FAIL")
            return result
        if isinstance(runnable, torch.nn.Module) and hasattr(runnable, "changes"):
            result.changes += [c for c in runnable.changes if c not in result.changes]
        for name in self.parsed:
            result.signatures[name] = {"inputs": list(self.inputs[name]), "outputs": list(self.reference[name])}
        if self.check:
            stage(f"checking {path.name} on the GPU (strict GPU-only, fp16 and fp32)")
            report = _check(path, self.inputs, self.reference, dict(self.check_kwargs))
            result.report = report
            if not report.ok:
                result.suggestions = list(getattr(report, "suggested_rewrites", []) or [])
        self.log.append(f"{label}: {_describe(result)}")
        stage(f"{label}: {_describe(result)}")
        return result

    def _convert(self, litert_torch, runnable, path: Path) -> None:
        if self.single and len(self.parsed) == 1 and self.signature_name == "serving_default":
            args, kw = self.parsed[self.signature_name]
            edge = litert_torch.convert(runnable, args, sample_kwargs=kw or None, **self.convert_kwargs)
        else:
            converter = None
            for name, (args, kw) in self.parsed.items():
                converter = (litert_torch.signature if converter is None else converter.signature)(
                    name, runnable, args, kw or None)
            edge = converter.convert(**self.convert_kwargs)
        edge.export(str(path))

    def finish(self, result: ConvertResult, path: Path, tries=(), dropped: dict | None = None) -> ConvertResult:
        """Move the chosen file to `path`, delete the other tries, record what was dropped."""
        import shutil

        if result.path is not None and Path(result.path) != path:
            shutil.move(str(result.path), str(path))
            chosen_log = Path(result.path).with_name(Path(result.path).name + ".convert.log")
            if chosen_log.exists():
                shutil.move(str(chosen_log), str(path.with_name(path.name + ".convert.log")))
            result.path = path
            if result.report is not None and hasattr(result.report, "model"):
                result.report.model = str(path)
        for t in tries:
            for leftover in (Path(t), Path(t).with_name(Path(t).name + ".convert.log")):
                if Path(t) != path and leftover.exists():
                    leftover.unlink()
        if dropped:
            result.dropped = {k: v for k, v in dropped.items() if k not in result.kept}
        result.attempts = list(self.log)
        if self.tried:          # a rewrite that already ran (kept or dropped) is no suggestion
            result.suggestions = [r for r in result.suggestions if r not in self.tried and r not in result.dropped]
        return result
