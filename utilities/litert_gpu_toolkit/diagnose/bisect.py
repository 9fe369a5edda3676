"""Bisect by intermediate: find the first block whose GPU output diverges from torch, and say why.

A model that runs fully on the GPU can still return wrong numbers. `bisect(model, example_inputs)`
exports one graph per block boundary whose *single* output is the tensor at that boundary (extra
output taps would change how the GPU fuses ops) and runs it three ways -- LiteRT's CPU runtime, the
GPU in fp16, the GPU in fp32 -- each compared with torch (correlation, SNR in dB, max error,
non-finite count, all-zero).

Boundaries ("auto"): every block in execution order -- each non-leaf member of a ModuleList /
Sequential (a transformer layer, a ResNet bottleneck, an inverted residual; in a container with no torch
leaf layer, also a member that is the model's own module without children), without descending into
a block -- then the model's own output. A model whose containers hold only leaf layers falls back to
those layers. At most `max_boundaries`, spread evenly over the model.

Search: the output first, then a binary search for the first diverging boundary, then the rest of
the table while `budget_s` lasts; then the children of the first diverging block, to name the module
and the ops it adds to the graph.

The first diverging boundary is classified from the measurements, never from names alone:
  * conversion_error -- LiteRT's CPU runtime disagrees with torch: the converted graph is wrong;
  * miscompute -- the CPU runtime is right, the GPU is wrong in fp32 as well: a GPU kernel is wrong;
  * overflow -- fp16 non-finite / all-zero, or a sudden fp16-only drop (fp32 right): a range problem;
  * underflow -- fp16-only, and torch run with fp16 tensors (`fp16_emulation`) names an op in the block that turns
    non-finite although its fp32 result is in range: a constant or value rounds to zero (an eps of 1e-12);
  * compounding -- an fp16-only error growing by a similar factor block after block;
  * degraded -- an fp16-only loss inside one block that is none of the above.
For any fp16-only divergence the model also runs in torch with fp16 tensors: when the first op that turns
non-finite there lies in the diverging block, the class follows its fp32 result (overflow or underflow), the
report names that op and module (`report.fp16_fault`) and its fp16-safe rewrite comes first in `report.rewrites`.
`report.rewrites` lists the toolkit rewrites that match the class and what the block contains.
Every row also has `torch16`, what fp16 *storage* alone keeps there (torch with fp16 tensors vs fp32); for a
precision class it tells the GPU's own arithmetic (an exact rewrite's job) from fp16 itself (a precision plan's):
`bisect_diagnosis.storage_note`, `report.storage_bound`.

    report = bisect(model, (x,)); print(report.summary())
    python -m litert_gpu_toolkit bisect my_script.py:build    # build() -> (model, example_inputs)
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .boundaries import _children_in_order, _Tap, auto_boundaries, execution_order  # noqa: F401 - public
from .classify import (_block_facts, _block_reductions, _diagnose, _new_miscompute_nodes,  # noqa: F401
                               add_storage, fault_in_block, matching_rewrites, storage_note)
from .report import (DEFAULT_MAX_BOUNDARIES, BisectReport, BoundaryResult, diverges)  # noqa: F401 - public
from ..core.files import special_file_problem
from .fp16_emulation import first_fp16_fault
from ..core.metrics import Comparison, compare
from ..core.model_info import read_model_info
from ..runtime.compiled import compile_and_run


@dataclass(frozen=True)
class BisectOptions:
    """How `bisect` measures. min_corr: a boundary whose fp16 corr with torch is below this diverges. fp32 / cpu:
    also run each tap with enforce_f32 and on LiteRT's CPU (what tells the classes apart). timeout: seconds per
    run. budget_s: stop starting new conversions after this many seconds (None: no limit). refine: tap the
    children of the first diverging block. max_boundaries: how many blocks `auto` picks. workdir: keep the taps'
    .tflite files there (default: a temporary folder). progress: a progress bar. forward: the module to call
    instead of the model (boundaries still name the model's submodules)."""
    min_corr: float = 0.999
    workdir: str | Path | None = None
    fp32: bool = True
    cpu: bool = True
    progress: bool = True
    timeout: float = 600.0
    budget_s: float | None = None
    refine: bool = True
    max_boundaries: int = DEFAULT_MAX_BOUNDARIES
    forward: object = None


def bisect(model, example_inputs: Sequence, boundaries: str | list[str] = "auto",
           options: BisectOptions | None = None, **overrides) -> BisectReport:
    """Tap the model at each boundary, run each tap on LiteRT's CPU and on the GPU (fp16, fp32), compare with
    torch, classify the first divergence (module docstring). `options` (a `BisectOptions`; keywords override its
    fields: `bisect(m, x, min_corr=0.99)`); the boundaries a budget left out are listed in `not_run`. The model is
    put in eval mode for the run and given back in the mode it came in."""
    import torch

    opts = dataclasses.replace(options or BisectOptions(), **overrides)
    training = {name: m.training for name, m in model.named_modules()}
    model.eval()
    try:
        with torch.no_grad():
            return _bisect(model, tuple(example_inputs), boundaries, opts)
    finally:
        for name, m in model.named_modules():
            m.training = training.get(name, m.training)


class _Run:
    """One bisect call's measurements: each tap converted and run once, within the time budget."""

    def __init__(self, model, example_inputs, opts: BisectOptions, count: int, out_dir: Path):
        from ..lowering.export import signature_inputs

        self.model, self.example_inputs, self.opts, self.out_dir = model, example_inputs, opts, out_dir
        self.feed = signature_inputs(example_inputs)
        self.deadline = time.monotonic() + opts.budget_s if opts.budget_s else math.inf
        self.done: dict[str, BoundaryResult] = {}
        self.bar = None
        if opts.progress:
            from tqdm import tqdm

            self.bar = tqdm(total=count, desc="bisect", unit="boundary")

    def evaluate(self, name: str) -> BoundaryResult:
        o = self.opts
        return _evaluate(self.model, o.forward, name, self.example_inputs, self.feed, self.out_dir, o.fp32, o.cpu,
                         o.timeout)

    def run(self, name: str) -> BoundaryResult:
        if name not in self.done:
            self.done[name] = self.evaluate(name)
            if self.bar is not None:
                self.bar.update(1)
        return self.done[name]

    def time_left(self) -> bool:
        return time.monotonic() < self.deadline

    def bad(self, r: BoundaryResult) -> bool:
        return diverges(r.fp16, self.opts.min_corr) or r.status != "ok"

    def search(self, names: list[str]) -> list[BoundaryResult]:
        """The last boundary, the first diverging one by bisection (assuming the error grows), then the rest of
        the table while the budget lasts; stops at a tap that does not export (every tap traces the whole model)."""
        last = self.run(names[-1])
        broken = last.status.startswith("export_failed")
        if not broken and self.bad(last):
            lo, hi = -1, len(names) - 1
            while hi - lo > 1 and self.time_left() and not broken:
                mid = (lo + hi) // 2
                r = self.run(names[mid])
                broken = r.status.startswith("export_failed")
                lo, hi = (lo, mid) if self.bad(r) else (mid, hi)
        for name in names:
            if broken or not self.time_left():
                break
            broken = self.run(name).status.startswith("export_failed")
        return [self.done[n] for n in names if n in self.done]

    def refine(self, order, block: str) -> list[BoundaryResult]:
        """The children of `block`, in execution order, up to the first that diverges (or does not export)."""
        inside = []
        for sub in _children_in_order(self.model, block, order):
            if not self.time_left():
                break
            r = self.evaluate(sub)
            inside.append(r)
            if r.status.startswith("export_failed") or diverges(r.fp16, self.opts.min_corr):
                break
        return inside

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _checked_names(model, example_inputs, boundaries, opts: BisectOptions, traced) -> list[str]:
    names = (auto_boundaries(model, example_inputs, opts.max_boundaries, opts.forward, traced)
             if boundaries == "auto" else list(boundaries))
    if not names:
        raise ValueError("no boundaries: pass module names, e.g. ['encoder.layer.0', 'encoder.layer.1']")
    for n in names:
        if n:
            model.get_submodule(n)  # raises AttributeError naming the bad path
    return names


def _bisect(model, example_inputs, boundaries, opts: BisectOptions) -> BisectReport:
    traced = execution_order(model, example_inputs, opts.forward)     # one torch run: block order and the output
    names = _checked_names(model, example_inputs, boundaries, opts, traced)
    tmp = tempfile.TemporaryDirectory(prefix="litert-bisect-") if opts.workdir is None else None
    out_dir = Path(opts.workdir or tmp.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    run = _Run(model, example_inputs, opts, len(names), out_dir)
    try:
        rows = run.search(names)
        return _classify(run, rows, names, traced)
    finally:
        run.close()
        if tmp is not None:
            tmp.cleanup()


def _classify(run: _Run, rows: list[BoundaryResult], names: list[str], traced) -> BisectReport:
    """Name the first divergence's class and module, and the rewrites that match it."""
    model, example_inputs, forward, min_corr = run.model, run.example_inputs, run.opts.forward, run.opts.min_corr
    _mark_new_ops(rows)
    for r in rows:
        r.reductions = _block_reductions(model, r.name, set(r.ops))
    until = add_storage(model, example_inputs, forward, rows)
    cache: dict[str, dict] = {}

    def facts(block: str) -> dict:
        if block not in cache:
            cache[block] = _block_facts(model, block, example_inputs, forward)
        return cache[block]

    faults: list = []

    def fault():
        if not faults:
            faults.append(first_fp16_fault(model, example_inputs, forward))
        return faults[0]

    first, kind, why = _diagnose(rows, min_corr, facts, fault)
    inside: list[BoundaryResult] = []
    module, ops, k = first, [], None
    if first is not None and kind not in ("export_failed", "not_on_gpu", "clean"):
        k = next(i for i, r in enumerate(rows) if r.label == first)
        ops, block = rows[k].ops, rows[k].name
        if run.opts.refine and block and run.time_left():
            inside = run.refine(traced[0], block)
            _mark_new_ops(([rows[k - 1]] if k > 0 else []) + inside)
            add_storage(model, example_inputs, forward, inside)
            culprit = next((r for r in inside if r.status != "ok" or diverges(r.fp16, min_corr)), None)
            if culprit is not None:
                module, ops = culprit.name, culprit.ops
        why += f". First diverging module: {module}" + (f" (ops it adds: {', '.join(ops)})" if ops else "")
    rewrites = matching_rewrites(kind, facts(model_path_of(first, rows)), ops) if first is not None else []
    bound, note = storage_note(rows, first, kind, min_corr, until)
    why += note
    if bound:           # split-K only improves accumulation, which the fp16 run in torch does in fp32 already
        rewrites = [r for r in rewrites if r != "patch_split_k"]
    if kind == "miscompute":
        why, rewrites = _miscompute_nodes(run.out_dir, rows, k, inside, module, first, why, rewrites)
    found = faults[0] if faults else None
    used = found if kind == getattr(found, "kind", None) and fault_in_block(found, model_path_of(first, rows)) \
        else None
    if used is not None:
        rewrites = list(dict.fromkeys(([used.rewrite] if used.rewrite else []) + rewrites))
        module = used.module if module == first and used.module else module
    corrs = [r.fp16.corr for r in rows if r.fp16 is not None and not math.isnan(r.fp16.corr)]
    return BisectReport(rows, first, kind, why, min(corrs) if corrs else float("nan"), module=module, ops=ops,
                        rewrites=rewrites, not_run=[n or "<output>" for n in names if n not in run.done],
                        inside=inside, fp16_fault=used, storage_bound=bound)


def _miscompute_nodes(out_dir, rows, k, inside, module, first, why, rewrites):
    """A GPU miscompute: the nodes new between the culprit's tap and the tap before it (which measured right) that
    match the GPU's known elementwise miscompute, and the rewrite for it."""
    taps = [r.name for r in rows[:k]] + ([r.name for r in inside] if module != first else [rows[k].name])
    nodes = _new_miscompute_nodes(out_dir, taps[-1], taps[-2] if len(taps) > 1 else None)
    if nodes:
        why += (f". Its graph has the GPU's known elementwise miscompute (a constant operand at rank 2/3, or "
                f"broadcast over the batch axis): {', '.join(nodes[:4])}")
        rewrites = list(dict.fromkeys(["patch_constant_operand_rank4"] + rewrites))
    return why, rewrites


def model_path_of(label: str | None, rows: list[BoundaryResult]) -> str:
    return next((r.name for r in rows if r.label == label), "")


def _mark_new_ops(rows: list[BoundaryResult]) -> None:
    """Each row's `ops`: the op types its graph has more of than the previous row's (the first row: all)."""
    prev: dict[str, int] = {}
    for r in rows:
        if r.histogram:
            r.ops = sorted(op for op, n in r.histogram.items() if n > prev.get(op, 0))
            prev = r.histogram


def _evaluate(model, forward, name, example_inputs, feed, out_dir, fp32, cpu, timeout) -> BoundaryResult:
    from ..lowering.export import export_tflite

    start = time.monotonic()
    tap = _Tap(model, name, forward).eval()
    try:
        ref = tap(*example_inputs).detach().float().numpy()
        path = export_tflite(tap, example_inputs, out_dir / f"{(name or 'output').replace('.', '_')}.tflite")
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - every tap traces the whole model (a sys.exit in forward
        # too): the caller stops here
        msg = " ".join(str(exc).split())[:300]
        return BoundaryResult(name, None, None, f"export_failed: {type(exc).__name__}: {msg}",
                              seconds=time.monotonic() - start)
    info = read_model_info(path)
    key = info.signatures[0].key
    hist = info.op_histogram()

    values = []

    def one(accelerator: str, f32: bool) -> tuple[Comparison | None, str]:
        r = compile_and_run(path, {key: feed}, accelerator=accelerator, enforce_f32=f32, timeout=timeout)
        values.append(next(iter(r.outputs[key].values())) if r.ok else None)
        return (compare(values[-1], ref) if r.ok else None), r.status

    c16, status = one("gpu", False)
    c32 = one("gpu", True)[0] if fp32 and status == "ok" else None
    ccpu = one("cpu", False)[0] if cpu else None
    return BoundaryResult(name, c16, c32, status, cpu=ccpu, seconds=time.monotonic() - start, histogram=hist,
                          fp16_value=values[0])


class BuilderError(ValueError):
    """The SCRIPT.py:FUNCTION given to the bisect command cannot be loaded or called (the message says why)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..core.arguments import JSON_OUTPUT_HELP, add_verbose_argument, correlation

    p.add_argument("builder", help="SCRIPT.py:FUNCTION -- FUNCTION() returns (model, example_inputs_tuple); or a "
                                   "converted MODEL.tflite: the file is bisected op by op instead (each prefix "
                                   "strictly on the GPU in fp16 and fp32 against LiteRT's CPU) and the first op the "
                                   "GPU gets wrong is named, with its class (fp16 precision or GPU miscompute)")
    p.add_argument("--inputs", metavar="NPZ", help="with a .tflite: the inputs to run it on, by input name (default: "
                                                   "seeded random, as `check` makes them)")
    p.add_argument("--boundaries", help="comma-separated module names (default: auto = every block in execution "
                                        "order, then the output)")
    p.add_argument("--min-corr", type=correlation, default=0.999, help="divergence threshold in (0, 1] (default 0.999)")
    p.add_argument("--no-fp32", action="store_true", help="skip the fp32 GPU runs (then a GPU miscompute reads as "
                                                           "fp16 loss)")
    p.add_argument("--no-cpu", action="store_true", help="skip LiteRT's CPU runs (then a conversion error reads "
                                                          "as a GPU problem)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="stop starting conversions after this long; the table lists what was left out")
    p.add_argument("--max-boundaries", type=int, default=DEFAULT_MAX_BOUNDARIES,
                   help=f"auto boundaries spread over the model (default {DEFAULT_MAX_BOUNDARIES})")
    p.add_argument("--json", metavar="OUT", help="write the report as JSON; " + JSON_OUTPUT_HELP)
    p.add_argument("--explorer", metavar="DIR", help="also convert the whole model to DIR/<script>.tflite and write "
                                                     "DIR/<script>.bisect.json, Model Explorer node data with each "
                                                     "op's block's fp16 error, and print the command that opens it")
    add_verbose_argument(p)


def load_builder(spec_text: str):
    """(model, example_inputs tuple) from `SCRIPT.py:FUNCTION`; `BuilderError` for every way that can fail."""
    import traceback

    script, sep, func = spec_text.rpartition(":")
    if not sep or not script or not func.isidentifier():
        raise BuilderError(f"give SCRIPT.py:FUNCTION, got {spec_text!r}")
    path = Path(script)
    special = special_file_problem(path)
    if special:                         # a FIFO would block the import forever
        raise BuilderError(f"{special}, not a Python script")
    if not path.is_file():
        raise BuilderError(f"{script}: no such script")
    spec = importlib.util.spec_from_file_location("bisect_builder", path)
    if spec is None or spec.loader is None:
        raise BuilderError(f"{script}: not a Python script")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise BuilderError(f"{script}, line {exc.lineno}: syntax error: {exc.msg}") from None
    except SystemExit as exc:  # its exit status is not bisect's: a 0 would read as "every boundary clean"
        raise BuilderError(f"{script} called sys.exit({exc.code!r}) while loading; bisect needs a script that "
                           "defines the builder without exiting") from None
    except Exception as exc:  # noqa: BLE001 - the user's script raised while importing: show where, briefly
        where = traceback.extract_tb(exc.__traceback__)[-1]
        raise BuilderError(
            f"{script} raised {type(exc).__name__} while loading ({where.filename}, line {where.lineno}): {exc}"
        ) from None
    builder = getattr(module, func, None)
    if builder is None:
        found = sorted(
            n
            for n, v in vars(module).items()
            if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == "bisect_builder"
        )
        raise BuilderError(f"{script} has no function {func!r}; it defines: {', '.join(found) or 'none'}")
    if not callable(builder):
        raise BuilderError(f"{script}:{func} is not a function")
    try:
        built = builder()
    except SystemExit as exc:
        raise BuilderError(f"{script}:{func}() called sys.exit({exc.code!r}) instead of returning "
                           "(model, example_inputs)") from None
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        where = traceback.extract_tb(exc.__traceback__)[-1]
        raise BuilderError(
            f"{script}:{func}() raised {type(exc).__name__} ({where.filename}, line {where.lineno}): {exc}"
        ) from None
    if not (isinstance(built, (tuple, list)) and len(built) == 2):
        raise BuilderError(f"{script}:{func}() must return (model, example_inputs), got {type(built).__name__}")
    model, example = built
    import torch

    if not isinstance(model, torch.nn.Module):
        raise BuilderError(f"{script}:{func}() returned a {type(model).__name__} as the model, not a torch.nn.Module")
    example = tuple(example) if isinstance(example, (tuple, list)) else (example,)
    if not example or not all(isinstance(x, torch.Tensor) for x in example):
        raise BuilderError(f"{script}:{func}() must return example inputs as a tuple of tensors")
    return model, example


def run(args: argparse.Namespace) -> int:
    """Exit 0 when every boundary is clean, 1 when one diverges, 2 on bad arguments or a bad builder."""
    import json
    import sys

    from ..core.arguments import refuse_output_path, write_output

    if refuse_output_path("--json", args.json, inputs=(args.builder.rpartition(":")[0],)):
        return 2
    if args.builder.endswith(".tflite"):
        return _run_graph(args)
    if args.inputs:
        print("error: --inputs goes with a .tflite file (a builder returns its own example inputs)", file=sys.stderr)
        return 2
    try:
        model, example = load_builder(args.builder)
        bounds = [b.strip() for b in args.boundaries.split(",") if b.strip()] if args.boundaries else "auto"
        if bounds != "auto":
            missing = [b for b in bounds if not _has_submodule(model, b)]
            if missing:
                raise BuilderError(
                    f"no such module(s) in the model: {', '.join(missing)}; top-level children: "
                    + ", ".join(n for n, _ in model.named_children())
                )
    except BuilderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.budget is not None and not args.budget > 0 or args.max_boundaries < 2:
        print("error: --budget must be > 0 seconds and --max-boundaries >= 2", file=sys.stderr)
        return 2
    report = bisect(model, example, bounds, min_corr=args.min_corr, fp32=not args.no_fp32, cpu=not args.no_cpu,
                    budget_s=args.budget, max_boundaries=args.max_boundaries)
    print(report.summary())
    if args.json:
        problem = write_output(args.json, json.dumps(report.to_dict(), indent=1, default=float))
        if problem:
            print(f"error: {problem}", file=sys.stderr)
    if args.explorer:
        _write_explorer(model, example, report, Path(args.explorer), Path(args.builder.rpartition(":")[0]).stem)
    return 0 if report.diagnosis == "clean" else 1


def _run_graph(args: argparse.Namespace) -> int:
    """`bisect MODEL.tflite`: exit 0 when every op agrees with the CPU, 1 naming the first wrong op, 2 when the
    file or its inputs cannot be used."""
    import json
    import sys

    from ..core.arguments import write_output
    from .graph_bisect import GraphBisectError, first_wrong_op

    path = Path(args.builder)
    problem = (special_file_problem(path) or (None if path.is_file() else f"{path} is not a file")) \
        if path.exists() else f"no such file: {path}"
    if problem is None and args.inputs and not Path(args.inputs).is_file():
        problem = f"--inputs: no such file: {args.inputs}"
    if problem is None and args.budget is not None and not args.budget > 0:
        problem = "--budget must be > 0 seconds"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        fault = first_wrong_op(path, args.inputs, min_corr=args.min_corr, budget_s=args.budget or 1800.0,
                               progress=lambda text: print(text, file=sys.stderr))
    except (GraphBisectError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(fault.line() if fault else f"every op agrees with LiteRT's CPU on these inputs (min corr {args.min_corr})")
    if args.json:
        body = {"file": str(path), "fault": None if fault is None else
                {k: v for k, v in vars(fault).items()}}
        problem = write_output(args.json, json.dumps(body, indent=1, default=str))
        if problem:
            print(f"error: {problem}", file=sys.stderr)
    return 0 if fault is None else 1


def _write_explorer(model, example, report, folder: Path, stem: str) -> None:
    """The whole model's .tflite (the graph the overlay is drawn on) and the per-block fp16 error over it."""
    import sys

    from ..core.error_lines import error_text, telling_line
    from ..check.explorer import block_overlay, explorer_command, write_overlay
    from ..lowering.export import export_tflite

    graph = folder / f"{stem}.tflite"
    try:
        export_tflite(model, example, graph)
        path = write_overlay(folder, f"{stem}.bisect", block_overlay(graph, report))
    except Exception as exc:      # noqa: BLE001 - the bisect verdict stands; only the overlay is missing
        print(f"error: no Model Explorer overlay: {telling_line(error_text(exc))}", file=sys.stderr)
        return
    print(f"Model Explorer overlay: {path}\n  open it with: {explorer_command(graph, [path])}")


def _has_submodule(model, name: str) -> bool:
    try:
        model.get_submodule(name)
        return True
    except AttributeError:
        return False


def as_numpy(x) -> np.ndarray:
    return np.asarray(x)
