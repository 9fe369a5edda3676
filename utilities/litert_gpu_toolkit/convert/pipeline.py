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
import time
from pathlib import Path
from typing import Any

from .result import STAGES, ConvertResult, describe, np_tree, quality  # noqa: F401 - re-exported
from ..core.error_lines import NotSpecialisable, error_text, telling_line, with_log
from ..core.inputs import as_declared
from ..core.model_state import restore_training, training_flags
from ..core.quiet import converter_output, quiet_import_litert_torch, stage
from ..rewrites.apply import apply_patches, split_example_inputs  # public API, re-exported
from ..rewrites.registry import PATCHES, Change, functional_selection, known_rewrites  # noqa: F401
from ..rewrites.parametrized_weights import fold_parametrizations  # noqa: F401 - registers the fold
from ..rewrites.rank_gt_4.fold_graph import NAME as FOLD, fold_inputs
from ..rewrites.registry import selected as _selected
from ..legalize import NAME as LEGALIZE
from .options import ConvertOptions
from .rewrite import legalize_inputs
from .repair import diagnose_and_repair, diagnose_beaten
from .sensitivity import input_share

# ------------------------------------------------------------------------------------- convert

def _check(path: Path, inputs: dict, reference: dict, check_kwargs: dict):
    from ..check.checker import check_gpu_compatibility

    return check_gpu_compatibility(path, inputs=as_declared(path, inputs), reference=reference, **check_kwargs)


class _StageError(Exception):
    """An error in the caller's model at a known stage (the text already worded); never the user's exception
    object itself, which may not even take an attribute (a frozen dataclass exception)."""

    def __init__(self, stage: str, text: str):
        super().__init__(text)
        self.stage, self.text = stage, text


def convert_for_gpu(model, example_inputs, output_path: str | os.PathLike,
                    options: ConvertOptions | None = None, *, kwargs: dict | None = None,
                    signatures: dict[str, Any] | None = None, **overrides) -> ConvertResult:
    """Rewrite a copy of `model`, convert it with litert-torch to `output_path`, check it on the GPU.

    example_inputs: a tensor, a tuple of positional inputs, a dict of keyword inputs, or (args, kwargs);
        `kwargs` adds keyword inputs. Converted input names: args_0, args_1, ... then the keywords.
    signature_name: the name of the one signature; `signatures={name: example_inputs, ...}` converts
        the same model once per entry into a multi-signature file (example_inputs is then unused).
    options: a `ConvertOptions` (the defaults when None); keyword `overrides` change its fields for this call
        (`convert_for_gpu(m, x, p, exclude=[...])` is `ConvertOptions(exclude=[...])`), and a keyword that is no
        field goes to litert_torch's convert (e.g. dynamic_shapes). The fields, in `ConvertOptions`:
    patches: apply the toolkit's rewrites (`apply_patches`) and convert inside `GpuRewriteWrapper`, so
        functional rewrites apply during tracing only. include: opt-in rewrites added to the defaults;
        only: nothing but these; exclude: never these; approximate: allow labelled approximations.
        An unknown name raises ValueError (the only error this function raises for bad arguments).
    inplace: False (default) rewrites a deep copy: `model` is never changed (the torch reference runs in
        eval mode; the train/eval flag of every submodule is restored exactly before returning). True applies
        the module patches to `model` itself (saves the copy) and disables `fallback`.
    output_path: every conversion is written in a private folder beside it and the chosen file is renamed
        onto it (a symbolic link there is replaced, never followed); its converter log is
        `<output>.convert.log`. A dict output is named by its keys, or flattened to output_0, ... in insertion
        order when a key is not a string (`outputs.FlatOutputs`).
    check: run `checker.check_gpu_compatibility` with the example inputs and the torch outputs as the
        reference.
    fallback: never return a result worse than plain conversion. When the rewritten file does not PASS,
        the model is also converted without rewrites; when that is better (verdict, then GPU residency,
        then corr vs torch), the rewrites are dropped one at a time (at most `max_tries` conversions)
        and the best file is kept. A rewrite that raises is dropped too. `result.dropped` and
        `result.summary()` say which rewrites were kept and why the others were not.
    diagnose_budget_s: a NUMERICS_FAIL file -- or the rewritten one when a FALLBACK file beat it -- is bisected
        within this many seconds (`repair`; `result.diagnosis`, `diagnosis_of`) and the rewrites matching the
        measured class tried, kept only if better. 0: off.
    verbose: show the converter's own output live (default: LITERT_GPU_VERBOSE); otherwise it goes to
        `<output>.convert.log` and the toolkit prints one line per stage.
    Never raises but for bad options (ValueError: an unknown rewrite name, max_tries < 1, ...) and Ctrl-C: a
    conversion failure, a failing rewrite, a model that cannot be copied or run (its forward raising anything,
    sys.exit included: stage "run"), a checker error all return a result with `error` set (`error_line` is its
    telling line, `stage` where it happened) and `ok` False; `ok` is True only when the check ran and
    passed. weight_norm / spectral_norm / parametrize weights are folded into plain parameters on the copy
    (`fold_parametrizations`, exact). When torch.export fails on a data-dependent Python branch (`if
    torch.min(y) < -1:`, `.item()`) or on a bool-mask index (`h[mask]`), the conversion is retried with each such
    branch or mask fixed to the example input's outcome (`specialise`): exact for inputs taking the same
    branches and selecting the same positions; a warning and `result.specialised` name each source line. A
    rank-5 positional input (a video network's [N, C, T, H, W]) is converted with its last two axes merged --
    the same bytes -- and the graph carried at rank 4 (`fold_rank5`; where that cannot carry the whole graph,
    the graph pass views the input back to rank 5 and carries it).
    """

    opts = (options or ConvertOptions()).with_overrides(**overrides)   # ValueError: an unknown rewrite name
    flags = training_flags(model)           # the reference runs in eval mode; the caller's state comes back
    try:
        return _convert(model, example_inputs, Path(output_path), opts, kwargs, signatures)
    except _StageError as e:
        return ConvertResult(None, [], error=e.text, stage=e.stage)
    except (Exception, SystemExit) as e:                     # noqa: BLE001 - never raises (see the docstring)
        return ConvertResult(None, [], error=error_text(e), stage="convert")
    finally:
        restore_training(flags)


def _reference(model, entries: dict, single: bool, kwargs, verbose) -> tuple[dict, dict, dict, bool, float | None]:
    """(parsed inputs, named numpy inputs, torch outputs by converted name, whether the outputs need flattening)
    per signature, and the input share; an error is marked as the "run" stage."""
    import torch

    from .result import signature_arrays
    from ..core.outputs import output_names

    quiet_import_litert_torch(verbose)                 # (its naming of the outputs is used)
    parsed, inputs, reference, flatten = {}, {}, {}, False
    try:
        for name, value in entries.items():
            parsed[name] = split_example_inputs(value[0], kwargs) if single else split_example_inputs(value)
        model.eval()
        with torch.no_grad():
            for name, (args, kw) in parsed.items():
                inputs[name] = signature_arrays(args, kw)
                out = model(*args, **kw)
                arrays = np_tree(out)
                if not arrays:
                    raise _StageError("outputs", _no_tensor_text(out))
                _warn_non_tensor_outputs(out)
                names, flat = output_names(out, len(arrays))
                flatten = flatten or flat
                reference[name] = dict(zip(names, arrays))
    except _StageError:
        raise
    except (Exception, SystemExit) as e:                     # noqa: BLE001 - the model's own error is a result
        raise _StageError("run", error_text(e)) from None
    if flatten:                                        # every signature then returns output_0, ...
        reference = {n: {f"output_{i}": a for i, a in enumerate(ref.values())} for n, ref in reference.items()}
    return parsed, inputs, reference, flatten, input_share(model, *next(iter(parsed.values())))


def _no_tensor_text(out) -> str:
    """A model returning no tensor cannot become a .tflite (the converter would say "no operators"): what it
    returns instead."""
    from ..core.outputs import non_tensor_outputs

    return ("the model returns no tensor (" + ("; ".join(non_tensor_outputs(out)) or "None") + "): a .tflite "
            "returns tensors only; return torch.tensor(...) for a value the graph should compute")


def _warn_non_tensor_outputs(out) -> None:
    """Values beside the tensors (an int, a string) are left out of the file: say which."""
    import warnings

    from ..core.outputs import non_tensor_outputs

    others = non_tensor_outputs(out)
    if others:
        warnings.warn("not tensors, so not in the .tflite: " + "; ".join(others), stacklevel=5)


def _convert(model, example_inputs, path: Path, opts: ConvertOptions, kwargs, signatures):
    import shutil
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    entries = signatures or {opts.signature_name: (example_inputs, kwargs)}
    # the reference is the source model, taken before any rewrite touches it
    t0 = time.perf_counter()
    parsed, inputs, reference, flatten, share = _reference(model, entries, signatures is None, kwargs, opts.verbose)
    job = _Job(model, opts, parsed, inputs, reference, single=signatures is None)
    job.timings["reference"] = time.perf_counter() - t0   # torch on the example inputs, the input share
    job.flatten, job.input_share = flatten, share
    # Every conversion is written into a private folder (mkdtemp: mode 0700, an unpredictable name, made with
    # O_EXCL) beside the output, and the chosen file is renamed onto `output_path`: fixed try names in a shared
    # folder would let anyone plant a link there first, and a rename replaces a link instead of following it.
    work = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tries", dir=path.parent))
    try:
        tries = [work / f"try{i}{path.suffix}" for i in range(opts.max_tries + 3)]   # the last: a repair's
        result = _attempts(job, path, tries)
        result.timings = {k: round(v, 2) for k, v in job.timings.items()}
        result.timings["total"] = round(time.perf_counter() - t0, 2)
        # what the file was checked with: the inputs as the file declares them, and torch's outputs
        result.inputs, result.reference = as_declared(path, inputs) if path.exists() else inputs, reference
        if opts.weights != "fp32":
            with job.timed("quantize"):
                _quantize(job, result, path, work / f"float{path.suffix}")
            result.timings["quantize"] = round(job.timings["quantize"], 2)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _quantize(job, result: ConvertResult, path: Path, float_copy: Path) -> None:
    """Quantize the chosen float file's weights in place at `path` (`quantize_for_gpu`), checked against the torch
    outputs; only a file that passed is quantized (a quantized file is never checked less than the float one)."""
    from ..quantize.gpu import QuantizeResult, quantize_for_gpu

    mode = job.opts.weights
    if result.verdict not in ("PASS", "NUMERICS_FAIL"):       # NUMERICS_FAIL: GPU-only, numbers below the floor
        why = f"the float file is {result.verdict}, not fully on the GPU: not quantized"
        result.quantized = QuantizeResult(mode, result.path, False, why=why)
        return
    job.stage = "quantize"
    stage(f"quantizing the weights ({mode}); each try is checked on the GPU against torch")
    os.replace(path, float_copy)
    try:
        result.quantized = quantize_for_gpu(float_copy, path, mode, inputs=as_declared(float_copy, job.inputs),
                                            reference=job.reference, min_corr=job.opts.weights_min_corr,
                                            float_report=result.report)
    except Exception as e:                                  # noqa: BLE001 - the float file stays; the reason is kept
        os.replace(float_copy, path)
        result.quantized = QuantizeResult(mode, path, False, why=f"quantizing failed: {error_text(e)[:300]}")
        return
    if result.quantized.ok and result.quantized.report is not None:
        result.report = result.quantized.report          # the file at `path` is the quantized one: its check


def _attempts(job, path, tries):
    """Convert (rewritten, then plain and with rewrites dropped when that is better) into `tries`; the best
    attempt ends up at `path`."""
    opts = job.opts
    if not opts.patches:
        return job.finish(job.attempt(tries[0], None, "plain", copy_model=False), path)
    excluded = set(opts.exclude or ())
    dropped: dict[str, str] = {}
    result = job.attempt(tries[0], excluded, "rewritten", copy_model=not opts.inplace, dropped=dropped)
    if result.ok or not opts.falls_back:
        return job.finish(result, path, dropped)
    raised = set(dropped)                    # what the rewritten file was converted without
    best = _fall_back(job, result, tries, excluded, dropped)
    budget = float(opts.diagnose_budget_s or 0)
    if budget and best.verdict == "NUMERICS_FAIL":
        best = diagnose_and_repair(job, best, path, lambda: tries[-1], excluded, dropped, budget)
    elif budget and best is not result and result.verdict == "NUMERICS_FAIL":
        best = diagnose_beaten(job, result, best, path, lambda: tries[-1], excluded | raised, dropped, budget)
    return job.finish(best, path, dropped)


def _fall_back(job, result, tries, excluded, dropped):
    """The best of the rewritten file, plain conversion, and the rewritten file less one rewrite at a time. The
    drops are tried when plain beats the rewritten file, and also when the rewritten file is held off the GPU
    (FALLBACK, COMPILE_FAIL) even though it beats plain: with the graph pass on, one rewrite can keep an op off
    the GPU that the pass would otherwise clear (pvt_v2: 68% on the GPU with every rewrite, 27% plain, PASS
    without patch_safe_softmax). Wrong numbers at full residency go to the diagnosis instead."""
    plain = job.attempt(tries[1], None, "plain", copy_model=True)
    best = result
    if quality(plain) > quality(result) or result.verdict in ("FALLBACK", "COMPILE_FAIL"):
        n = 2
        for name in result.applied:
            if n >= len(tries) - 1:
                break
            cand = job.attempt(tries[n], excluded | set(dropped) | {name}, f"without {name}", copy_model=True,
                               dropped={})
            n += 1
            if quality(cand) > quality(best):
                dropped[name] = (f"with it: {describe(best)}; without it: {describe(cand)}")
                best = cand
                if best.ok:
                    break
        if quality(plain) > quality(best):
            for name in best.applied:
                dropped[name] = (f"plain conversion ({describe(plain)}) beats every rewritten file tried "
                                 f"(best: {describe(best)})")
            best = plain
    return best


class _Job:
    """The fixed parts of one `convert_for_gpu` call; `attempt` converts and checks one rewrite selection."""

    def __init__(self, model, opts: ConvertOptions, parsed, inputs, reference, single: bool):
        self.model, self.opts, self.parsed, self.inputs, self.reference = model, opts, parsed, inputs, reference
        self.single = single
        self.log: list[str] = []
        self.tried: set[str] = set()         # rewrite names active in some attempt
        self.stage = "run"                   # what the job is doing (an unexpected error names it)
        self.specialise = False              # set once a conversion needed data-dependent branches fixed
        self.flatten = False                 # the outputs are returned as a flat tuple (outputs.FlatOutputs)
        self.input_share = None              # how much of the output the input drives (`sensitivity`)
        self.timings: dict[str, float] = {}  # seconds per stage, summed over the attempts (`ConvertResult.timings`)

    def timed(self, key: str):
        """A context that adds its wall time to `timings[key]`."""
        import contextlib
        import time

        @contextlib.contextmanager
        def clock():
            t0 = time.perf_counter()
            try:
                yield
            finally:
                self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - t0
        return clock()

    def attempt(self, path: Path, exclude: set | None, label: str, *, copy_model: bool,
                dropped: dict | None = None) -> ConvertResult:
        """exclude=None: plain (no rewrites). A rewrite that raises is added to `dropped` and excluded.
        Never raises: an unexpected error (copying, rewriting, converting, checking) is a result with `error`."""
        self.stage = "copy"
        try:
            return self._attempt(path, exclude, label, copy_model=copy_model, dropped=dropped)
        except (Exception, SystemExit) as e:                 # noqa: BLE001 - returned as the result's error
            result = ConvertResult(None, [], error=error_text(e), stage=self.stage)
            if self.stage == "copy":
                result.error += ("\n(convert_for_gpu rewrites a deep copy of the model; inplace=True rewrites "
                                 "the model itself)")
            self.log.append(f"{label}: {result.verdict} ({self.stage})")
            stage(f"{label}: {result.verdict} while {STAGES[self.stage]}: {result.error_line}")
            return result

    def _copy(self):
        from ..core.model_copy import copy_model

        self.stage = "copy"
        model = copy_model(self.model)
        self.stage = "rewrite"
        return model

    def _rewrite(self, exclude: set, copy_model: bool, dropped: dict | None):
        """(model, runnable, changes): the module patches applied (weight folds first), the functional ones
        wrapped. Each round drops the rewrites that raised."""
        model = self._copy() if copy_model else self.model
        self.stage = "rewrite"
        runnable, changes = model, []
        o = self.opts
        include, only = set(o.include or ()), None if o.only is None else set(o.only)
        for _ in range(8):
            errors: dict[str, str] = {}
            changes = []
            if _selected("fold_parametrizations", include, exclude, o.approximate, only):
                try:                                       # before the patches that read a layer's weight
                    changes = fold_parametrizations(model)
                except Exception as e:                     # noqa: BLE001 - dropped like any patch that raises
                    errors["fold_parametrizations"] = f"{type(e).__name__}: {e}"[:300]
            try:
                first_args, first_kwargs = next(iter(self.parsed.values()))
                changes += apply_patches(model, (first_args, first_kwargs), include=o.include, only=o.only,
                                         exclude=sorted(exclude), approximate=o.approximate, errors=errors)
            except Exception as e:                         # noqa: BLE001 - outside any one patch
                errors["apply_patches"] = f"{type(e).__name__}: {e}"[:300]
            for name, err in errors.items():
                if dropped is not None:
                    dropped[name] = f"raised while rewriting: {err}"
                exclude.add(name)
            if not errors or not copy_model:              # (in place: keep what was applied)
                names = functional_selection(o.include, sorted(exclude), o.approximate, o.only)
                self.tried |= set(names) | {n for n in PATCHES if _selected(n, include, exclude, o.approximate,
                                                                             only)}
                if names and "functional rewrites" not in errors:
                    from ..rewrites.functional import GpuRewriteWrapper

                    runnable = GpuRewriteWrapper(model, include=names).eval()
                return model, runnable, changes
            model = runnable = self._copy()
            if "apply_patches" in errors or "functional rewrites" in errors:
                return model, runnable, []                 # give up on rewrites for this attempt
        return model, runnable, changes

    def _attempt(self, path: Path, exclude: set | None, label: str, *, copy_model: bool,
                 dropped: dict | None = None) -> ConvertResult:
        import torch

        from ..core.symptoms import applicable, for_log, suggestions

        if exclude is None:                               # plain: no rewrites
            model = runnable = self._copy() if copy_model else self.model
            changes: list[Change] = []
        else:
            with self.timed("rewrite"):
                model, runnable, changes = self._rewrite(set(exclude), copy_model, dropped)
        if self.flatten:
            from ..core.outputs import FlatOutputs

            runnable = FlatOutputs(runnable)
        parsed = self.parsed
        o = self.opts
        with self.timed("legalize"):
            if exclude is not None and _selected(FOLD, set(o.include or ()), exclude, o.approximate, o.only):
                runnable, parsed = fold_inputs(runnable, parsed, changes, self.log, self.tried)   # rank 5 -> 4
            if exclude is not None and _selected(LEGALIZE, set(o.include or ()), exclude, o.approximate, o.only):
                self.tried.add(LEGALIZE)
                runnable, parsed = legalize_inputs(runnable, parsed, changes, self.log)   # the GPU's op contract
        self.stage = "convert"
        litert_torch = quiet_import_litert_torch(self.opts.verbose)
        result = ConvertResult(path, changes)
        log_path = path.with_name(path.name + ".convert.log")
        stage(f"converting ({label}{', ' + str(len(changes)) + ' module rewrites' if changes else ''})")
        try:
            with self.timed("convert"):
                runnable, specialised = self._convert_specialising(litert_torch, runnable, path, log_path, parsed)
        except Exception as e:                               # noqa: BLE001 - reported, never swallowed as success
            log = log_path.read_text(errors="replace")[-200_000:] if log_path.exists() and not o.verbose else None
            result.error = with_log(error_text(e), log)
            result.path = None
            result.log_path = None if self.opts.verbose else log_path
            result.suggestions = suggestions(for_log(result.error, stage="convert"), self.module_types)
            self.log.append(f"{label}: CONVERT_FAIL")
            stage(f"{label}: CONVERT_FAIL: {telling_line(result.error)}")
            return result
        if isinstance(runnable, torch.nn.Module) and hasattr(runnable, "changes"):
            result.changes += [c for c in runnable.changes if c not in result.changes]
        if specialised or getattr(runnable, "specialised_lines", None):
            result.specialised = runnable.lines() if specialised else list(runnable.specialised_lines)
            from ..lowering.specialise import warn_specialised

            warn_specialised(result.specialised)
        for name in self.parsed:
            result.signatures[name] = {"inputs": list(self.inputs[name]), "outputs": list(self.reference[name])}
        if self.opts.check:
            self.stage = "check"
            stage(f"checking {path.name} on the GPU (strict GPU-only, fp16 and fp32)")
            with self.timed("check"):
                report = _check(path, self.inputs, self.reference, dict(self.opts.check_kwargs))
            result.report = report
            if not report.ok:
                result.suggestions = applicable(list(getattr(report, "suggested_rewrites", []) or []),
                                                self.module_types)
        self.log.append(f"{label}: {describe(result)}")
        stage(f"{label}: {describe(result)}")
        return result

    @property
    def module_types(self) -> set[str]:
        return {c.__name__ for m in self.model.modules() for c in type(m).__mro__}

    def _convert_specialising(self, litert_torch, runnable, path: Path, log_path: Path, parsed: dict):
        """Convert `runnable`; when torch.export fails on a data-dependent Python branch (single signature),
        convert again with each branch fixed to the example input's outcome (`specialise`). Returns what was
        converted and whether it was specialised. Raises the conversion error, naming the guard's source line
        when specialising did not help."""
        if not self.specialise:
            try:
                with converter_output(log_path, verbose=self.opts.verbose, announce=False):
                    self._convert(litert_torch, runnable, path, parsed)
                return runnable, False
            except Exception as e:                           # noqa: BLE001 - re-raised below unless specialised
                from ..lowering.specialise import is_data_dependent_error

                if not (is_data_dependent_error(error_text(e)) and len(self.parsed) == 1):
                    raise
                first = e
        from ..lowering.specialise import Specialised, record

        args, kw = next(iter(self.parsed.values()))
        special = Specialised(runnable, record(runnable, args, kw))
        stage("retrying with the data-dependent branches fixed to the example input's outcome")
        try:
            with converter_output(log_path, verbose=self.opts.verbose, announce=False):
                self._convert(litert_torch, special, path, parsed)
        except Exception as e:
            if not self.specialise:
                raise NotSpecialisable(f"{error_text(first)}\n(retried with the data-dependent branches fixed to the "
                                       f"example input's outcome; that failed too: {telling_line(error_text(e))})")
            raise
        self.specialise = True                               # later attempts specialise at once
        return special, True

    def _convert(self, litert_torch, runnable, path: Path, parsed: dict) -> None:
        if self.single and len(parsed) == 1 and self.opts.signature_name == "serving_default":
            args, kw = parsed[self.opts.signature_name]
            edge = litert_torch.convert(runnable, args, sample_kwargs=kw or None, **self.opts.convert_kwargs)
        else:
            converter = None
            for name, (args, kw) in parsed.items():
                converter = (litert_torch.signature if converter is None else converter.signature)(
                    name, runnable, args, kw or None)
            edge = converter.convert(**self.opts.convert_kwargs)
        edge.export(str(path))

    def finish(self, result: ConvertResult, path: Path, dropped: dict | None = None) -> ConvertResult:
        """Rename the chosen file (and its converter log) onto `path` -- a link there is replaced, never followed
        -- and record what was dropped. The other tries go with the private folder they are in."""
        final_log = path.with_name(path.name + ".convert.log")
        if result.path is not None and Path(result.path) != path:
            chosen_log = Path(result.path).with_name(Path(result.path).name + ".convert.log")
            os.replace(result.path, path)
            if chosen_log.exists():
                os.replace(chosen_log, final_log)
            result.path = path
            if result.report is not None and hasattr(result.report, "model"):
                result.report.model = str(path)
        if result.log_path is not None and Path(result.log_path) != final_log and Path(result.log_path).exists():
            os.replace(result.log_path, final_log)          # a failed conversion: its log is the only record
            result.log_path = final_log
        if result.log_path is not None:
            stage(f"the converter's output is in {result.log_path}")
        if dropped:
            result.dropped = {k: v for k, v in dropped.items() if k not in result.kept}
        result.attempts, result.input_share = list(self.log), self.input_share
        if self.tried:          # a rewrite that already ran (kept or dropped) is no suggestion
            result.suggestions = [r for r in result.suggestions if r not in self.tried and r not in result.dropped]
        if result.diagnosis is not None and not result.ok:
            from .repair import suggestions_after_diagnosis

            result.suggestions = suggestions_after_diagnosis(result)
        return result
