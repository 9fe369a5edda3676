"""torch -> .tflite with litert-torch, plus the one comparison every proof needs: GPU output vs torch.

litert-torch names a converted graph's inputs `args_0, args_1, ...` (positional) or by keyword,
and its outputs `output_0, output_1, ...` in the order the module returns them; int64 inputs
become int32. The helpers here follow those conventions so callers can stay in torch terms.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..core.metrics import Comparison, compare
from ..core.model_info import ModelInfo, read_model_info
from ..core.quiet import converter_output, quiet_import_litert_torch, stage
from ..runtime.compiled import RunResult, compile_and_run


def export_tflite(module, args: Sequence[Any], path: str | os.PathLike, *, kwargs: dict | None = None,
                  verbose: bool | None = None, **convert_kwargs) -> Path:
    """Convert `module` (put in eval mode) with litert-torch and write it to `path`.

    The converter's output goes to `<path>.convert.log` (named on failure); verbose=True (or
    LITERT_GPU_VERBOSE=1) shows it live instead."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    litert_torch = quiet_import_litert_torch(verbose)
    stage(f"converting {type(module).__name__} -> {path.name}")
    with converter_output(path.with_name(path.name + ".convert.log"), verbose=verbose):
        edge = litert_torch.convert(module.eval(), tuple(args), sample_kwargs=kwargs, **convert_kwargs)
        edge.export(str(path))
    return path


def _np(value) -> np.ndarray:
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype == torch.int64:
            value = value.to(torch.int32)
        return value.numpy()
    return np.asarray(value)


def torch_outputs(module, args: Sequence[Any], kwargs: dict | None = None) -> list[np.ndarray]:
    import torch

    with torch.no_grad():
        out = module(*args, **(kwargs or {}))
    if isinstance(out, dict):
        out = list(out.values())
    if not isinstance(out, (list, tuple)):
        out = [out]
    return [_np(o).astype(np.float32) if _np(o).dtype == np.float64 else _np(o) for o in out]


def signature_inputs(args: Sequence[Any], kwargs: dict | None = None) -> dict[str, np.ndarray]:
    named = {f"args_{i}": _np(a) for i, a in enumerate(args)}
    named.update({k: _np(v) for k, v in (kwargs or {}).items()})
    return named


@dataclass
class GpuVsTorch:
    """One strict-GPU run of a converted module, compared output by output with torch."""
    path: Path
    info: ModelInfo
    run: RunResult
    comparisons: list[Comparison] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.run.ok

    def min_corr(self) -> float:
        return min(c.corr for c in self.comparisons)

    def summary(self) -> str:
        if not self.run.ok:
            rejected = ", ".join(f"{r.op} ({r.reason})" for r in self.run.gpu.rejected) or "-"
            return f"{self.run.status}: {self.run.error}; rejected: {rejected}"
        return "; ".join(f"out{i}: corr={c.corr:.6f} max_abs={c.max_abs:.3g} nonfinite={c.nonfinite}"
                         for i, c in enumerate(self.comparisons))


def gpu_vs_torch(module, args: Sequence[Any], path: str | os.PathLike, *, kwargs: dict | None = None,
                 enforce_f32: bool = False, accelerator: str = "gpu", convert: bool = True,
                 **convert_kwargs) -> GpuVsTorch:
    """Convert `module` to `path` (unless convert=False), run it GPU-only, compare each output to torch."""
    if convert:
        export_tflite(module, args, path, kwargs=kwargs, **convert_kwargs)
    info = read_model_info(path)
    key = info.signatures[0].key if info.signatures else "serving_default"
    run = compile_and_run(path, {key: signature_inputs(args, kwargs)}, accelerator=accelerator,
                          enforce_f32=enforce_f32)
    result = GpuVsTorch(Path(path), info, run)
    if run.ok:
        expected = torch_outputs(module, args, kwargs)
        got = list(run.outputs[key].values())
        names = list(run.outputs[key])
        if all(n.startswith("output_") for n in names):
            got = [run.outputs[key][n] for n in sorted(names, key=lambda n: int(n.split("_")[1]))]
        result.comparisons = [compare(g, e) for g, e in zip(got, expected)]
    return result
