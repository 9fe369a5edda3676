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

import importlib
import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .rewrites import PATCHES, Change

# Every rewrite module of the toolkit, imported for its registrations. A module that is not there
# (a partial vendoring of the toolkit) is skipped and listed in `missing_rewrite_modules()`;
# a module that is there but fails to import raises: a broken rewrite must not pass silently.
REWRITE_MODULES = ("gather", "rank", "conv_transpose", "elementwise", "norms", "spectral", "state", "normalize")
_MISSING: list[str] = []
_LOADED = False


def load_rewrites() -> list[str]:
    """Import every rewrite module that exists; return the names of those that do not."""
    global _LOADED
    if not _LOADED:
        for name in REWRITE_MODULES:
            full = f"{__package__}.rewrites.{name}"
            try:
                importlib.import_module(full)
            except ModuleNotFoundError as e:
                if e.name != full:          # the module exists but one of *its* imports is missing
                    raise
                _MISSING.append(name)
        _LOADED = True
    return list(_MISSING)


def missing_rewrite_modules() -> list[str]:
    return load_rewrites()


# --------------------------------------------------------------------------------------- inputs

def split_example_inputs(example_inputs, kwargs: dict | None = None) -> tuple[tuple, dict]:
    """(args, kwargs) from a tensor, a tuple / list of inputs, a dict of keyword inputs, or (args, kwargs)."""
    import torch

    if isinstance(example_inputs, torch.Tensor):
        args, kw = (example_inputs,), {}
    elif isinstance(example_inputs, dict):
        args, kw = (), dict(example_inputs)
    elif (isinstance(example_inputs, tuple) and len(example_inputs) == 2 and isinstance(example_inputs[0], tuple)
          and isinstance(example_inputs[1], dict)):
        args, kw = example_inputs[0], dict(example_inputs[1])
    elif example_inputs is None:
        args, kw = (), {}
    else:
        args, kw = tuple(example_inputs), {}
    kw.update(kwargs or {})
    return args, kw


def _handler_names() -> list[str]:
    from .rewrites.functional import HANDLERS

    names: list[str] = []
    for entries in HANDLERS.values():
        names += [n for n, _ in entries if n not in names]
    return names


def _selected(name: str, include, exclude, approximate: bool) -> bool:
    spec = PATCHES.get(name)
    if include is not None and name not in include:
        return False
    if name in exclude:
        return False
    if spec is not None and not spec.exact and not approximate:
        return False
    if spec is not None and not spec.default and (include is None or name not in include):
        return False
    return True


def functional_selection(include=None, exclude=None, approximate: bool = False) -> list[str]:
    """The functional handler names `convert_for_gpu` activates for these filters."""
    load_rewrites()
    exclude = set(exclude or ())
    include = None if include is None else set(include)
    return [n for n in _handler_names() if _selected(n, include, exclude, approximate)]


# ------------------------------------------------------------------------------------- patches

def apply_patches(model, example_inputs=None, *, include: Sequence[str] | None = None,
                  exclude: Sequence[str] | None = None, approximate: bool = False) -> list[Change]:
    """Apply the registered module patches to `model` in place; list the functional rewrites too.

    include: only these rewrite names (module patches or functional handlers); exclude: never these.
    Patches registered with default=False run only when named in `include`; approximate ones
    (exact=False) only with approximate=True. A patch that takes `example_inputs` gets them.
    Functional rewrites are not applied to the module tree: they are listed (from one forward pass on
    `example_inputs` with the handlers active) and applied by `convert_for_gpu` / `GpuRewriteWrapper`.
    """
    import torch

    load_rewrites()
    exclude_set = set(exclude or ())
    include_set = None if include is None else set(include)
    unknown = (include_set or set()) - set(PATCHES) - set(_handler_names())
    if unknown:
        raise ValueError(f"unknown rewrite names: {sorted(unknown)}")
    changes: list[Change] = []
    for name, spec in PATCHES.items():
        if not _selected(name, include_set, exclude_set, approximate):
            continue
        params = inspect.signature(spec.fn).parameters
        kwargs = {}
        if "example_inputs" in params:
            kwargs["example_inputs"] = example_inputs
        if "functional" in params:
            kwargs["functional"] = False          # functional rewrites: applied by the wrapper instead
        changes += spec.fn(model, **kwargs)
    names = functional_selection(include, exclude, approximate)
    if example_inputs is not None and names:            # (an empty include list would mean "all" to the mode)
        from .rewrites.functional import GpuRewriteMode

        args, kw = split_example_inputs(example_inputs)
        mode = GpuRewriteMode(include=names)
        with torch.no_grad(), mode:
            model(*args, **kw)
        changes += [c for c in mode.changes if c not in changes]
    return changes


# ------------------------------------------------------------------------------------- convert

@dataclass
class TorchCheck:
    """Strict GPU run vs torch, used when `checker.check_gpu_compatibility` is not available."""
    verdict: str
    summary: str
    comparisons: dict = field(default_factory=dict)     # "sig/output" -> metrics.Comparison
    run: Any = None

    @property
    def ok(self) -> bool:
        return self.verdict == "PASS"


@dataclass
class ConvertResult:
    """What `convert_for_gpu` did. `ok` is True only when the model converted and the GPU check passed."""
    path: Path | None
    changes: list[Change]
    report: Any = None                  # checker.Report (or TorchCheck); None when check=False or no file
    error: str | None = None            # the conversion error, when it failed
    suggestions: list[str] = field(default_factory=list)   # rewrite names for the error / failed check
    signatures: dict = field(default_factory=dict)         # signature -> {"inputs": [...], "outputs": [...]}

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

    def summary(self) -> str:
        lines = [f"{self.verdict}: {self.path or '-'}"]
        if self.error:
            lines.append(f"  conversion failed: {self.error.strip().splitlines()[-1][:300]}")
        elif self.report is not None:
            lines.append(f"  check: {self.report.summary}")
        lines += [f"  {'exact' if c.exact else 'APPROX'} {c.rewrite}: {c.path or '<root>'}: {c.what}"
                  for c in self.changes]
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


def _check_with_fallback(path: Path, inputs: dict, reference: dict, check_kwargs: dict):
    try:
        from .checker import check_gpu_compatibility
    except ImportError:                     # vendored without the checker: strict GPU run vs torch
        return _torch_check(path, inputs, reference, check_kwargs.get("min_corr", 0.999))
    return check_gpu_compatibility(path, inputs=inputs, reference=reference, **check_kwargs)


def _torch_check(path: Path, inputs: dict, reference: dict, min_corr: float) -> TorchCheck:
    from .metrics import compare
    from .runtime import compile_and_run

    run = compile_and_run(path, inputs, accelerator="gpu")
    if not run.ok:
        rejected = ", ".join(f"{r.op} ({r.reason})" for r in run.gpu.rejected) or "-"
        return TorchCheck("COMPILE_FAIL" if run.status != "no_gpu" else "NO_GPU",
                          f"{run.status}: {run.error}; rejected: {rejected}", run=run)
    comparisons, problems = {}, []
    for sig, outs in reference.items():
        for name, ref in outs.items():
            got = run.outputs.get(sig, {}).get(name)
            if got is None:
                problems.append(f"{sig}/{name} missing")
                continue
            c = compare(got, ref)
            comparisons[f"{sig}/{name}"] = c
            if c.nonfinite or c.all_zero or not (c.corr >= min_corr):
                problems.append(f"{sig}/{name}: corr={c.corr:.6f} nonfinite={c.nonfinite} all_zero={c.all_zero}")
    verdict = "NUMERICS_FAIL" if problems else "PASS"
    text = "; ".join(problems) or f"strict GPU, {len(comparisons)} output(s) corr >= {min_corr}"
    return TorchCheck(verdict, text, comparisons, run)


def convert_for_gpu(model, example_inputs, output_path: str | os.PathLike, *, patches: bool = True,
                    check: bool = True, kwargs: dict | None = None, signature_name: str = "serving_default",
                    signatures: dict[str, Any] | None = None, include: Sequence[str] | None = None,
                    exclude: Sequence[str] | None = None, approximate: bool = False,
                    check_kwargs: dict | None = None, **convert_kwargs) -> ConvertResult:
    """Patch `model` (in place), convert it with litert-torch to `output_path`, check it on the GPU.

    example_inputs: a tensor, a tuple of positional inputs, a dict of keyword inputs, or (args, kwargs);
        `kwargs` adds keyword inputs. Converted input names: args_0, args_1, ... then the keywords.
    signature_name: the name of the one signature; `signatures={name: example_inputs, ...}` converts
        the same model once per entry into a multi-signature file (example_inputs is then unused).
    patches: apply `apply_patches` (include / exclude / approximate as there) and convert the model
        inside `GpuRewriteWrapper`, so functional rewrites apply during tracing only.
    check: run `checker.check_gpu_compatibility` with the example inputs and the torch outputs as the
        reference (fallback without the checker: strict GPU run vs torch, corr >= 0.999).
    convert_kwargs: passed to litert_torch (e.g. dynamic_shapes, quant_config).
    Never raises for a conversion failure: `result.error` holds it and `result.ok` is False; `ok` is
    True only when the check ran and passed.
    """
    import litert_torch
    import torch

    from .symptoms import for_log, suggestions

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
    changes: list[Change] = []
    runnable = model
    if patches:
        first_args, first_kwargs = next(iter(parsed.values()))
        changes = apply_patches(model, (first_args, first_kwargs), include=include, exclude=exclude,
                                approximate=approximate)
        from .rewrites.functional import GpuRewriteWrapper

        names = functional_selection(include, exclude, approximate)
        if names:
            runnable = GpuRewriteWrapper(model, include=names).eval()
    result = ConvertResult(path, changes)
    try:
        if len(parsed) == 1 and signature_name == "serving_default" and signatures is None:
            args, kw = parsed[signature_name]
            edge = litert_torch.convert(runnable, args, sample_kwargs=kw or None, **convert_kwargs)
        else:
            converter = None
            for name, (args, kw) in parsed.items():
                converter = (litert_torch.signature if converter is None else converter.signature)(
                    name, runnable, args, kw or None)
            edge = converter.convert(**convert_kwargs)
        edge.export(str(path))
    except Exception as e:                                   # noqa: BLE001 - reported, never swallowed as success
        result.error = f"{type(e).__name__}: {e}"
        result.path = None
        result.suggestions = suggestions(for_log(str(e)))
        return result
    if isinstance(runnable, torch.nn.Module) and hasattr(runnable, "changes"):
        result.changes += [c for c in runnable.changes if c not in result.changes]
    for name in parsed:
        result.signatures[name] = {"inputs": list(inputs[name]), "outputs": list(reference[name])}
    if check:
        report = _check_with_fallback(path, inputs, reference, dict(check_kwargs or {}))
        result.report = report
        if not report.ok:
            result.suggestions = list(getattr(report, "suggested_rewrites", []) or [])
    return result
