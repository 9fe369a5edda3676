"""Bisect by intermediate: find the first block whose GPU output diverges from torch.

When a model runs fully on the GPU but returns wrong numbers, the cause is usually one reduction
in one block. `bisect(model, example_inputs)` exports one graph per block boundary whose *single*
output is the tensor at that boundary (extra output taps would change how the GPU fuses ops),
runs each on the GPU in fp16 and fp32 and in torch, and reports per boundary: correlation, max
error, non-finite count, all-zero. Then the diagnosis:

  * non-finite or all-zero starting at one block (and fine in fp32) -> an fp16 overflow inside
    that block: the reductions in it are named (LayerNorm / RMSNorm / mean / sum ...);
  * correlation falling steadily with depth -> precision compounding: no overflow rewrite and no
    fp32 flag fixes it (reduce depth in fp16, keep activations small, or accept the error);
  * otherwise the first boundary below the threshold is named as where precision is lost.

    report = bisect(model, (x,)); print(report.summary())
    python -m litert_gpu_toolkit bisect my_script.py:build    # build() -> (model, example_inputs)
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .files import special_file_problem
from .metrics import Comparison, compare
from .model_info import read_model_info
from .ops import REDUCTION_OPS
from .runtime import compile_and_run


@dataclass
class BoundaryResult:
    name: str
    fp16: Comparison | None
    fp32: Comparison | None
    status: str                       # runtime status of the fp16 run ("ok", "ops_rejected", ...)
    reductions: list[str] = field(default_factory=list)   # norm-like submodules and reduction ops in the block

    def to_dict(self) -> dict:
        d = asdict(self)
        d["fp16"] = self.fp16.to_dict() if self.fp16 else None
        d["fp32"] = self.fp32.to_dict() if self.fp32 else None
        return d


@dataclass
class BisectReport:
    boundaries: list[BoundaryResult]
    first_divergent: str | None
    diagnosis: str                    # "overflow", "compounding", "degraded", "clean", "not_on_gpu", "export_failed"
    explanation: str
    min_corr: float

    def to_dict(self) -> dict:
        return {"boundaries": [b.to_dict() for b in self.boundaries], "first_divergent": self.first_divergent,
                "diagnosis": self.diagnosis, "explanation": self.explanation, "min_corr": self.min_corr}

    def summary(self) -> str:
        rows = [
            f"{'boundary':40s} {'corr fp16':>10s} {'max err':>10s} {'nonfinite':>9s} {'zero':>5s} {'corr fp32':>10s}"
        ]
        for b in self.boundaries:
            f16, f32 = b.fp16, b.fp32
            rows.append(
                f"{b.name[:40]:40s} {_f(f16.corr if f16 else None):>10s} {_f(f16.max_abs if f16 else None):>10s} "
                f"{(f16.nonfinite if f16 else '-')!s:>9s} {('yes' if f16 and f16.all_zero else 'no'):>5s} "
                f"{_f(f32.corr if f32 else None):>10s}" + ("" if b.status == "ok" else f"  [{b.status}]")
            )
        rows.append(f"diagnosis: {self.diagnosis} -- {self.explanation}")
        return "\n".join(rows)


def _f(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.6g}"


def auto_boundaries(model) -> list[str]:
    """The top-level repeated blocks: children of the largest ModuleList/Sequential, else the root's children."""
    import torch.nn as nn

    best, best_n = None, 1
    for name, module in model.named_modules():
        if isinstance(module, (nn.ModuleList, nn.Sequential)) and len(module) > best_n:
            best, best_n = name, len(module)
    if best is not None:
        return [f"{best}.{i}" if best else str(i) for i in range(best_n)]
    return [name for name, _ in model.named_children()]


class _Tap:
    """Wraps a model so its forward returns the output of one submodule (first tensor of it)."""

    def __new__(cls, model, boundary: str):
        import torch

        class Tap(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model
                self.target = model.get_submodule(boundary)

            def forward(self, *args):
                captured = []

                def hook(_mod, _inp, out):
                    captured.append(out[0] if isinstance(out, (tuple, list)) else out)

                handle = self.target.register_forward_hook(hook)
                try:
                    self.model(*args)
                finally:
                    handle.remove()
                return captured[0]

        return Tap()


def _block_reductions(model, boundary: str, ops: set[str]) -> list[str]:
    names = []
    for name, module in model.get_submodule(boundary).named_modules():
        cls = type(module).__name__
        if "norm" in cls.lower() or "Norm" in cls:
            names.append(f"{boundary}.{name}".rstrip(".") + f" ({cls})")
    names += sorted(f"op {o}" for o in ops & set(REDUCTION_OPS))
    return names


def _diagnose(rows: list[BoundaryResult], min_corr: float) -> tuple[str | None, str, str]:
    failed = next((r for r in rows if r.status.startswith("export_failed")), None)
    if failed is not None:
        return (
            failed.name,
            "export_failed",
            (
                f"the model does not convert with a tap at {failed.name} "
                f"({failed.status.partition(': ')[2]}); bisect needs a model that "
                "converts plain: fix the conversion first"
            ),
        )
    if any(r.status != "ok" for r in rows):
        bad = next(r for r in rows if r.status != "ok")
        return bad.name, "not_on_gpu", f"{bad.name}: the graph up to here does not run GPU-only ({bad.status})"
    for r in rows:
        f16 = r.fp16
        if f16.nonfinite or f16.all_zero:
            f32_ok = r.fp32 is not None and not r.fp32.nonfinite and not r.fp32.all_zero
            what = "non-finite values" if f16.nonfinite else "an all-zero output"
            red = ", ".join(r.reductions) or "no norm module found; look for mean/sum/variance"
            return (
                r.name,
                "overflow",
                (
                    f"{what} first at {r.name} in fp16{' (fp32 is fine)' if f32_ok else ''}: an "
                    f"fp16 overflow inside this block. Reductions in it: {red}. Rewrites: "
                    "patch_rmsnorm / patch_safe_layernorm / hierarchical_mean"
                ),
            )
    corrs = [r.fp16.corr for r in rows]
    first_bad = next((r for r in rows if not (r.fp16.corr >= min_corr)), None)
    if first_bad is None:
        return None, "clean", f"every boundary has correlation >= {min_corr} in fp16"
    # 1 - corr per boundary: a localized loss jumps by orders of magnitude at one block; compounding
    # grows by a similar factor block after block
    errs = [max(1.0 - c, 1e-9) if not math.isnan(c) else 1.0 for c in corrs]
    k = rows.index(first_bad)
    jump = errs[k] / errs[k - 1] if k > 0 else float("inf")
    growing = sum(b >= a for a, b in zip(errs, errs[1:]))
    if k >= 2 and jump < 20 and growing >= 0.8 * (len(errs) - 1) and errs[k - 1] > errs[0]:
        return (
            first_bad.name,
            "compounding",
            (
                f"correlation falls steadily with depth ({_f(corrs[0])} -> "
                f"{_f(corrs[-1])}, about x{(errs[-1] / errs[0]) ** (1 / max(len(errs) - 1, 1)):.1f} "
                "error per block): fp16 precision compounding across blocks; no "
                "overflow rewrite or fp32-precision flag fixes it"
            ),
        )
    f32_fine = first_bad.fp32 is not None and first_bad.fp32.corr >= min_corr
    if jump >= 20 and f32_fine:
        red = ", ".join(first_bad.reductions) or "none found by name; look for mean/sum/variance"
        return (
            first_bad.name,
            "overflow",
            (
                f"correlation drops at {first_bad.name} in fp16 only (corr "
                f"{_f(first_bad.fp16.corr)}, fp32 {_f(first_bad.fp32.corr)}): a localized "
                "fp16 loss, typically a reduction saturating for some rows. Reductions in "
                f"it: {red}. Rewrites: patch_rmsnorm / patch_safe_layernorm / "
                "hierarchical_mean"
            ),
        )
    return (
        first_bad.name,
        "degraded",
        (
            f"first boundary below corr {min_corr}: {first_bad.name} "
            f"(corr {_f(first_bad.fp16.corr)}); precision is lost inside this block"
        ),
    )


def bisect(
    model,
    example_inputs: Sequence,
    boundaries: str | list[str] = "auto",
    *,
    min_corr: float = 0.999,
    workdir: str | Path | None = None,
    fp32: bool = True,
    progress: bool = True,
    timeout: float = 600.0,
) -> BisectReport:
    """Export one single-output graph per boundary, run each on the GPU (fp16, fp32) and in torch, compare."""
    import torch

    from .export import export_tflite, signature_inputs

    model = model.eval()
    names = auto_boundaries(model) if boundaries == "auto" else list(boundaries)
    if not names:
        raise ValueError("no boundaries: pass module names, e.g. ['encoder.layer.0', 'encoder.layer.1']")
    for n in names:
        model.get_submodule(n)  # raises AttributeError naming the bad path
    tmp = tempfile.TemporaryDirectory(prefix="litert-bisect-") if workdir is None else None
    out_dir = Path(workdir or tmp.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    iterator = names
    if progress:
        from tqdm import tqdm

        iterator = tqdm(names, desc="bisect", unit="boundary")
    rows: list[BoundaryResult] = []
    feed = signature_inputs(example_inputs)
    prev_ops: dict[str, int] = {}
    try:
        for name in iterator:
            tap = _Tap(model, name).eval()
            try:
                with torch.no_grad():
                    ref = tap(*example_inputs).detach().float().numpy()
                path = export_tflite(tap, example_inputs, out_dir / f"{name.replace('.', '_')}.tflite")
            # every tap traces the whole model: the others would fail the same way (a sys.exit in forward too)
            except (Exception, SystemExit) as exc:  # noqa: BLE001
                msg = " ".join(str(exc).split())[:300]
                rows.append(BoundaryResult(name, None, None, f"export_failed: {type(exc).__name__}: {msg}"))
                break
            info = read_model_info(path)
            key = info.signatures[0].key
            hist = info.op_histogram()
            new_ops = {op for op, n in hist.items() if n > prev_ops.get(op, 0)}
            prev_ops = hist
            r16 = compile_and_run(path, {key: feed}, accelerator="gpu", timeout=timeout)
            c16 = compare(next(iter(r16.outputs[key].values())), ref) if r16.ok else None
            c32 = None
            if fp32 and r16.ok:
                r32 = compile_and_run(path, {key: feed}, accelerator="gpu", enforce_f32=True, timeout=timeout)
                c32 = compare(next(iter(r32.outputs[key].values())), ref) if r32.ok else None
            rows.append(BoundaryResult(name, c16, c32, r16.status, _block_reductions(model, name, new_ops)))
    finally:
        if tmp is not None:
            tmp.cleanup()
    first, diagnosis, why = _diagnose(rows, min_corr)
    corrs = [r.fp16.corr for r in rows if r.fp16 is not None and not math.isnan(r.fp16.corr)]
    return BisectReport(rows, first, diagnosis, why, min(corrs) if corrs else float("nan"))


class BuilderError(ValueError):
    """The SCRIPT.py:FUNCTION given to the bisect command cannot be loaded or called (the message says why)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .arguments import JSON_OUTPUT_HELP, add_verbose_argument, correlation

    p.add_argument("builder", help="SCRIPT.py:FUNCTION -- FUNCTION() returns (model, example_inputs_tuple)")
    p.add_argument("--boundaries", help="comma-separated module names (default: auto = top-level blocks)")
    p.add_argument("--min-corr", type=correlation, default=0.999, help="divergence threshold in (0, 1] (default 0.999)")
    p.add_argument("--no-fp32", action="store_true", help="skip the fp32 attribution runs")
    p.add_argument("--json", metavar="OUT", help="write the report as JSON; " + JSON_OUTPUT_HELP)
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

    from .arguments import refuse_output_path, write_output

    if refuse_output_path("--json", args.json, inputs=(args.builder.rpartition(":")[0],)):
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
    report = bisect(model, example, bounds, min_corr=args.min_corr, fp32=not args.no_fp32)
    print(report.summary())
    if args.json:
        problem = write_output(args.json, json.dumps(report.to_dict(), indent=1, default=float))
        if problem:
            print(f"error: {problem}", file=sys.stderr)
    return 0 if report.diagnosis == "clean" else 1


def _has_submodule(model, name: str) -> bool:
    try:
        model.get_submodule(name)
        return True
    except AttributeError:
        return False


def as_numpy(x) -> np.ndarray:
    return np.asarray(x)
