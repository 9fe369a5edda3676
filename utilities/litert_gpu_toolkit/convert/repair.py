"""Wrong numbers at full GPU residency: bisect, classify, apply the matching rewrite, keep it only if better.

`convert_for_gpu` calls `diagnose_and_repair` when its file runs strictly on the GPU but an output
is outside tolerance (NUMERICS_FAIL). Within a time budget it bisects the model as it was converted
(the same rewrites, applied while each tap is traced), so the table describes the file the user got:
per block, corr and SNR in fp16 and fp32 against torch and corr of LiteRT's CPU runtime. The class of
the first divergence (`bisect` docstring: overflow, compounding, degraded, miscompute,
conversion_error) and what the block holds select known rewrites (`bisect.matching_rewrites`); the
model is converted again with them and the new file replaces the old only when `quality` ranks it
higher. Everything measured is on the result (`result.diagnosis`, `result.attempts`).
"""
from __future__ import annotations

import time
from pathlib import Path

from .result import ConvertResult, describe, quality
from ..rewrites.registry import Change
from ..core.quiet import stage


def by_position(module, n_args: int, names: tuple[str, ...]):
    """`module` called as `module(*args, **dict(zip(names, rest)))` from positional inputs `(*args, *rest)`: how
    bisect, which feeds each tap positionally, runs a model its user calls by keyword (`input_ids=...`). The
    module is held as `model`, so the bisect's block names read `model.<block>`."""
    import torch

    class ByPosition(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = module

        def forward(self, *xs):
            return self.model(*xs[:n_args], **dict(zip(names, xs[n_args:])))

    return ByPosition()


def diagnose_and_repair(job, best: ConvertResult, path: Path, try_path, excluded: set, dropped: dict,
                        budget_s: float, plain_result: ConvertResult | None = None) -> ConvertResult:
    """Bisect the model behind `best` within `budget_s` seconds, attach the report, try the matching rewrites.

    job: convert._Job; try_path(i) gives a fresh scratch file name. Returns the better of `best` and the
    repaired conversion; never raises (a failing diagnosis is recorded in the result's attempts)."""
    from ..diagnose.bisect import bisect

    start = time.monotonic()
    if len(job.parsed) != 1:
        job.log.append("diagnosis: skipped (several signatures)")
        return best
    args, kw = next(iter(job.parsed.values()))
    plain = not best.changes
    stage(f"{best.verdict} at full residency: bisecting to find where the numbers go wrong "
          f"(budget {budget_s:.0f} s)")
    try:
        if plain:
            model = runnable = job._copy()
        else:
            model, runnable, _ = job._rewrite(set(excluded) | set(dropped), True, None)
        if kw:                                           # bisect feeds its taps positionally
            model, runnable = (by_position(m, len(args), tuple(kw)) for m in (model, runnable))
            args = (*args, *kw.values())
        report = bisect(model, args, forward=runnable, budget_s=budget_s, progress=False,
                        timeout=max(60.0, budget_s))
    except Exception as e:                               # noqa: BLE001 - a diagnosis never breaks the conversion
        job.log.append(f"diagnosis: bisect failed ({type(e).__name__}: {str(e)[:200]})")
        return best
    best.diagnosis = report
    bound = ("; needs more than fp16 (torch with fp16 tensors is wrong too): see the precision plan in the "
             "diagnosis") if report.storage_bound else ""
    job.log.append(f"diagnosis: {report.diagnosis} at {report.module or report.first_divergent or '-'}{bound}")
    from ..rewrites.registry import PATCHES, load_rewrites

    load_rewrites()
    # the defaults were in the conversion already: only opt-in rewrites are new
    new = [r for r in report.rewrites if r in PATCHES and not PATCHES[r].default and r not in excluded
           and r not in (job.opts.include or ())]
    had = [r for r in report.rewrites if r not in new and r in best.applied]
    stage(f"bisect: {report.diagnosis} at {report.module or report.first_divergent or '-'}{bound}"
          + (f"; trying {', '.join(new)}" if new else "; no new rewrite to try")
          + (f" ({', '.join(had)} already applied: the cause is not there)" if had else ""))
    if had:
        job.log.append(f"diagnosis: {', '.join(had)} matched but already applied")
    if not new or time.monotonic() - start > budget_s:
        if not new:
            return _name_the_op(job, best, try_path, budget_s, plain_result, report.diagnosis)
        return best
    saved = job.opts
    job.opts = saved.with_overrides(include=(*(saved.include or ()), *new))
    try:
        cand = job.attempt(try_path(), set(excluded) | set(dropped), f"with {', '.join(new)} (bisect: "
                           f"{report.diagnosis})", copy_model=True, dropped={})
    finally:
        job.opts = saved
    cand.diagnosis = report
    if quality(cand) > quality(best):
        stage(f"kept: {describe(cand)} beats {describe(best)}")
        cand.repaired = new
        return cand
    for name in new:
        dropped[name] = f"tried after bisect ({report.diagnosis}): {describe(cand)}, not better than {describe(best)}"
    best.dropped.update({n: dropped[n] for n in new})
    return _name_the_op(job, best, try_path, budget_s, plain_result, report.diagnosis)


PRECISION_CLASSES = ("overflow", "compounding", "degraded", "clean")


def suggestions_after_diagnosis(result: ConvertResult) -> list[str]:
    """The suggestions once the diagnosis ran: the checker's (already filtered by class and by op in the graph)
    and the rewrites matching the diagnosed class and block, less what the file holds or the repair tried --
    never `bisect` itself, which just ran. A precision class left with nothing gets `plan_precision` (the
    diverging part in fp32), the one step that needs no new rule."""
    d = result.diagnosis
    done = {"bisect", *result.applied, *result.dropped}
    left = [r for r in dict.fromkeys([*result.suggestions, *d.rewrites]) if r not in done]
    if not left and d.diagnosis in PRECISION_CLASSES:
        left = ["plan_precision"]
    return left


def _name_the_op(job, best: ConvertResult, try_path, budget_s: float, plain: ConvertResult | None,
                 kind: str) -> ConvertResult:
    """After the block diagnosis found no rewrite that helps: the graph bisect names the op, a respelling of a GPU
    miscompute is kept when the GPU then agrees; else `best`, with the unresolved line shown."""
    _graph_fault(job, best, budget_s, plain, kind)
    respelled = _respell(job, best, try_path)
    if respelled is not None:
        return respelled
    stage(best.unresolved())
    return best


def _respell(job, best: ConvertResult, try_path) -> ConvertResult | None:
    """For a GPU miscompute the graph bisect named: each exact respelling of the file (`diagnose.respell`), checked
    against torch like any conversion; the first that ranks above `best` is returned, else None (each tried one
    is recorded on `best.respellings`)."""
    fault = best.graph_fault
    if fault is None or fault.kind != "GPU miscompute" or best.path is None:
        return None
    import dataclasses

    from ..check.checker import check_gpu_compatibility
    from ..core.inputs import as_declared
    from ..diagnose.respell import candidates

    for cand in candidates(Path(best.path).read_bytes(), fault):
        path = Path(try_path())
        path.write_bytes(cand.data)
        stage(f"respelling the miscomputed form: {cand.what}")
        try:
            report = check_gpu_compatibility(path, inputs=as_declared(path, job.inputs), reference=job.reference,
                                             **dict(job.opts.check_kwargs))
        except Exception as e:                           # noqa: BLE001 - a diagnosis never breaks the conversion
            best.respellings.append(f"{cand.name}: check failed ({type(e).__name__})")
            continue
        change = Change("<file>", cand.what, f"respell:{cand.name}", True)
        result = dataclasses.replace(best, path=path, report=report, changes=[*best.changes, change],
                                     repaired=[f"respell:{cand.name}"], respellings=[*best.respellings])
        line = f"{cand.name}: {describe(result)}"
        job.log.append(f"respell {line}")
        if quality(result) > quality(best):
            stage(f"kept: {describe(result)} beats {describe(best)} (respelled: {cand.name})")
            result.respellings.append(f"{line} (kept)")
            return result
        best.respellings.append(f"{line} (not better)")
    return None


# the classes where a block is not enough: the op is what a user (or a respelling) acts on
GRAPH_BISECT_CLASSES = ("miscompute", "clean", "conversion_error")


def _gpu_op_types(result: ConvertResult) -> set[str] | None:
    """The op types of `result`'s file that ran on the GPU (all of its types less those the GPU rejected)."""
    from ..core.model_info import read_model_info

    try:
        types = set(read_model_info(result.path).op_histogram())
    except Exception:                                    # noqa: BLE001 - no file to compare with
        return None
    rejected = {u.get("op") for u in (getattr(result.report, "unsupported_ops", None) or [])}
    return types - rejected


def _graph_fault(job, best: ConvertResult, budget_s: float, plain: ConvertResult | None, kind: str) -> None:
    """Bisect the checked file itself, op by op (`diagnose.graph_bisect`), when the block bisect cannot name the
    op: a GPU miscompute, no diverging block, or a rewritten file that is wrong where the plain one (`plain`) is
    right. The fault goes on `best.graph_fault`; a bisect that cannot run says why in the log."""
    if plain is None and kind not in GRAPH_BISECT_CLASSES:
        return
    from ..core.inputs import as_declared
    from ..diagnose.graph_bisect import GraphBisectError, first_wrong_op

    if best.path is None or not Path(best.path).is_file() or len(job.inputs) != 1:
        job.log.append("graph bisect: skipped (no file, or several signatures)")
        return
    stage("graph bisect: cutting the file op by op to name the first op the GPU gets wrong")
    try:
        feeds = next(iter(as_declared(best.path, job.inputs).values()))
        best.graph_fault = first_wrong_op(best.path, feeds,
                                          plain_gpu_ops=_gpu_op_types(plain) if plain is not None else None,
                                          budget_s=max(60.0, budget_s / 2), progress=stage)
    except GraphBisectError as e:
        job.log.append(f"graph bisect: {e}")
        best.graph_fault_error = str(e)
        return
    except Exception as e:                               # noqa: BLE001 - a diagnosis never breaks the conversion
        job.log.append(f"graph bisect failed ({type(e).__name__}: {str(e)[:200]})")
        best.graph_fault_error = f"{type(e).__name__}: {str(e)[:200]}"
        return
    line = best.graph_fault.line() if best.graph_fault else "every op agrees with the CPU on these inputs"
    job.log.append(f"graph bisect: {line}")
    stage(f"graph bisect: {line}")


def diagnose_beaten(job, rewritten: ConvertResult, best: ConvertResult, path: Path, try_path, excluded: set,
                    dropped: dict, budget_s: float) -> ConvertResult:
    """The rewritten file ran fully on the GPU with wrong numbers and a partly-CPU file (`best`) won: bisect the
    rewritten one anyway -- why it is wrong is what the user needs to get the whole model onto the GPU -- and
    return its repair when that ranks above `best`; else `best`, carrying the report (`diagnosis_of` says which
    file it describes). excluded: what the rewritten file was converted without."""
    tried: dict[str, str] = {}
    repaired = diagnose_and_repair(job, rewritten, path, try_path, excluded, tried, budget_s, plain_result=best)
    dropped.update(tried)
    if repaired is not rewritten and quality(repaired) > quality(best):
        stage(f"kept: {describe(repaired)} beats {describe(best)}")
        return repaired
    if repaired.diagnosis is not None:
        best.diagnosis, best.diagnosis_of = repaired.diagnosis, f"the rewritten file ({describe(rewritten)})"
        best.graph_fault, best.graph_fault_error = rewritten.graph_fault, rewritten.graph_fault_error
    return best
