"""litert_gpu_toolkit: get PyTorch models onto LiteRT's GPU accelerator, fully and correctly.

Works with nothing but the `utilities/` folder on PYTHONPATH (vendored) or pip-installed
(`pip install -e .` at the repository root). Importing the package pulls in numpy only; torch and
ai_edge_litert are imported by the modules that need them, when first used:

    from litert_gpu_toolkit import check_gpu_compatibility, print_report   # no torch needed
    from litert_gpu_toolkit import convert_for_gpu, ConvertOptions, bisect  # these import torch

The names below are the library. The packages underneath are layers that import one way only
(core <- runtime / lint / rewrites <- check <- lowering <- diagnose / quantize <- convert <- export / recipe <- cli;
tests/toolkit/test_structure.py holds them to it); the recipe scripts' plumbing lives in
`litert_gpu_toolkit.recipe`, every rewrite in `litert_gpu_toolkit.rewrites`.
"""
from __future__ import annotations

import importlib

from .core import __version__

# public name -> module that defines it (imported on first access)
_EXPORTS = {
    # torch -> checked GPU .tflite
    "convert_for_gpu": "convert.pipeline", "ConvertOptions": "convert.options", "ConvertResult": "convert.result",
    "apply_patches": "rewrites.apply", "known_rewrites": "rewrites.registry",
    "GpuRewriteWrapper": "rewrites.functional",
    "plan_precision": "convert.precision_plan", "PrecisionPlan": "convert.precision_plan",
    # a .tflite on the GPU: residency and numerics
    "check_gpu_compatibility": "check.checker", "Report": "check.verdicts", "print_report": "check.report",
    "compile_and_run": "runtime.compiled", "RunResult": "runtime.compiled", "probe_gpu": "runtime.compiled",
    "lint_for_mobile": "lint.mobile", "LintFinding": "lint.mobile",
    # wrong numbers at full residency: where, and why
    "bisect": "diagnose.bisect", "BisectOptions": "diagnose.bisect", "BisectReport": "diagnose.report",
    # quantized weights that stay on the GPU
    "quantize_for_gpu": "quantize.gpu", "QuantizeResult": "quantize.gpu", "fc_rank2": "quantize.fc_rank2",
    # the pieces underneath
    "export_tflite": "lowering.export", "gpu_vs_torch": "lowering.export", "signature_inputs": "lowering.export",
    "read_model_info": "core.model_info", "ModelInfo": "core.model_info", "InvalidModelError": "core.model_info",
    "compare": "core.metrics", "Comparison": "core.metrics", "SYMPTOMS": "core.symptoms",
    "resolve_model_dir": "core.weights",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'litert_gpu_toolkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
