"""Precision plans in a recipe: export a model as graphs cut at a named module (one part with fp32 arithmetic), and
run the chain on a device, each part strictly on the GPU.

`export_plan` is what an export script's `--fp32-until MODULE` does: `plan_precision` cuts the model, the parts go
into one folder with their provenance sidecars and a `plan.json` naming them relative to the folder (so the folder
can move). `run_plan` is what a verify script's `--plan PLAN_JSON` does: every sample through the parts in order,
the fp32 part on the device's fp32 twin (`host-gpu` -> `host-gpu-fp32`), the others on the device as asked, and
returns what a results row needs. The cut's inputs follow `plan_precision`: the first part takes the model's inputs
(`args_0..`), a later part the previous part's output as `args_0` and the model's inputs after it (only those its
signature kept).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from ..runtime.residency import Residency, residency
from .artifacts import load_model
from .devices import print_failure, run_on_device

# the device with fp32 arithmetic that runs a plan's fp32 part, for each device a plan can run on
FP32_DEVICE = {"host-gpu": "host-gpu-fp32", "host-gpu-fp32": "host-gpu-fp32",
               "host-native": "host-native-fp32", "host-native-fp32": "host-native-fp32"}


def export_plan(model, example_inputs, folder: Path, args, *, cut: str, fp32_part: int = 0, options=None):
    """Cut `model` after module `cut` into two graphs in `folder` (part0.tflite, part1.tflite), part `fp32_part`
    marked fp32, with provenance (from the export script's `args`) and plan.json. Returns the PrecisionPlan.
    The front door's rewrites (`options`: a ConvertOptions, the defaults when None) are applied to `model` in
    place first, so both parts carry what `convert_for_gpu` would have given the whole graph.
    Raises precision_plan.CutError when `cut` names no module or the pieces do not reproduce the model."""
    from ..convert.precision_plan import CutError, plan_precision
    from ..convert.rewrite import rewrite_for_gpu
    from .scripts import finish_export

    start = time.perf_counter()
    try:
        model.get_submodule(cut)
    except AttributeError:       # before rewriting: a patch may rename what it replaces
        raise CutError(f"no module {cut!r} in the model") from None
    runnable, changes = rewrite_for_gpu(model, example_inputs, options)
    for change in changes:
        print(f"  rewrite ({'exact' if change.exact else 'approximate'}): {change.path}: {change.what}")
    if runnable is not model:
        cut = f"model.{cut}"     # the wrapper holds the network as .model
    model = runnable
    plan = plan_precision(model, tuple(example_inputs), cuts=[cut], fp32=[fp32_part], out_dir=folder,
                          export_whole=False)
    print(f"converted in {time.perf_counter() - start:.0f} s: " + ", ".join(
        f"{Path(g.path).name} {g.ops} ops ({'fp32' if g.fp32 else 'fp16'})" for g in plan.graphs))
    for g in plan.graphs:
        g.path = Path(g.path).name            # plan.json names its graphs relative to its own folder
        finish_export(Path(folder) / g.path, args, graph=f"{Path(folder).name}/{Path(g.path).stem}")
    print(f"wrote {plan.save(Path(folder) / 'plan.json')}")
    return plan


@dataclasses.dataclass
class PlanRun:
    """One run of a plan over a list of samples."""
    folder: Path                      # the plan's folder (its name is the results row's graph)
    runs: list                        # one RunResult per part that ran
    residencies: list[Residency]      # per part, the line prefixed with the part and its precision
    outputs: list | None              # per sample, the last part's first output; None when a part failed
    models: dict[str, Path]           # "<folder>/<part>" -> .tflite, for the results row's provenance

    @property
    def ok(self) -> bool:
        return self.outputs is not None

    @property
    def line(self) -> str:
        return "; ".join(r.line for r in self.residencies)

    @property
    def run_s(self) -> float:
        """Seconds per sample through the chain: the sum of the parts' median run times."""
        return sum(next(iter(r.run_s.values())) for r in self.runs)


def run_plan(plan_json: Path, samples: list, device: str, how: str) -> PlanRun:
    """Every sample (a tuple of the model's input arrays, batch axis included) through the plan's parts on `device`,
    the fp32 part on FP32_DEVICE[device]. `how` names the export command for a missing / corrupt part."""
    from ..convert.precision_plan import PrecisionPlan

    plan = PrecisionPlan.load(plan_json)
    folder = Path(plan_json).parent
    done = PlanRun(folder, [], [], None, {})
    fed = None
    for g in plan.graphs:
        path = Path(g.path)
        info = load_model(path, how)
        sig = info.signatures[0]
        where = FP32_DEVICE[device] if g.fp32 else device
        feeds = []
        for i, sample in enumerate(samples):
            values = ([] if fed is None else [fed[i]]) + list(sample)
            feeds.append({f"args_{k}": v for k, v in enumerate(values) if f"args_{k}" in sig.inputs})
        start = time.perf_counter()
        run = run_on_device(path, {sig.key: feeds}, where)
        res = residency(info, run)
        precision = "fp32" if g.fp32 else "fp16" if where in ("host-gpu", "host-native") else where
        line = f"{path.stem} ({precision}): {res.line}"
        print(f"{line}; {len(samples)} samples in {time.perf_counter() - start:.0f} s")
        done.runs.append(run)
        done.residencies.append(dataclasses.replace(res, line=line))
        done.models[f"{folder.name}/{path.stem}"] = path
        if not run.ok:
            print_failure(run, path.stem)
            return done
        fed = list(next(iter(run.outputs[sig.key].values())))     # stacked over samples: one row each
    done.outputs = fed
    return done


def plan_cost(plan_json: Path, whole: Path, samples: list, device: str = "host-gpu", *, rounds: int = 3,
              how: str = "") -> dict:
    """What a precision plan costs, side by side in one process: per sample, the whole graph in fp16 on `device`,
    the whole graph in fp32 on its fp32 twin, and the plan's chain (its fp32 part there, the rest on `device`),
    taken in turn for `rounds` rounds; medians over the rounds, and the chain's ratio to each whole graph. A run
    that fails is named and leaves its figure out (None), never a guess. Wall times of this machine: compare the
    ratios, not the milliseconds."""
    import statistics

    info = load_model(whole, how)
    sig = info.signatures[0]
    feeds = [dict(zip(sig.inputs, sample)) for sample in samples]
    times: dict[str, list[float]] = {"fp16": [], "fp32": [], "chain": []}
    lines, failed = {}, {}
    for _ in range(rounds):
        for name, where in (("fp16", device), ("fp32", FP32_DEVICE[device])):
            run = run_on_device(whole, {sig.key: feeds}, where)
            lines[name] = residency(info, run).line
            if run.ok:
                times[name].append(run.run_s[sig.key])
            else:
                failed[name] = f"{run.status}: {(run.error or '')[:200]}"
        chain = run_plan(plan_json, samples, device, how)
        lines["chain"] = chain.line
        if chain.ok:
            times["chain"].append(chain.run_s)
        else:
            failed["chain"] = "a part failed: " + chain.line
    ms = {k: round(1e3 * statistics.median(v), 3) if v else None for k, v in times.items()}
    ratio = {f"chain_over_{k}": round(ms["chain"] / ms[k], 3) if ms["chain"] and ms[k] else None
             for k in ("fp16", "fp32")}
    return {"ms_per_sample": ms, **ratio, "rounds": rounds, "samples": len(samples), "device": device,
            "residency": lines, "failed": failed}
