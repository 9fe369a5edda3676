"""litert_gpu_toolkit: get PyTorch models onto LiteRT's GPU accelerator, fully and correctly.

Works with nothing but the `utilities/` folder on PYTHONPATH (vendored) or pip-installed
(`pip install -e .` at the repository root). Importing the package pulls in numpy only; torch and
ai_edge_litert are imported by the modules that need them, when first used:

    from litert_gpu_toolkit import check_gpu_compatibility, print_report   # no torch needed
    from litert_gpu_toolkit import convert_for_gpu, apply_patches, bisect   # these import torch
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it (imported on first access)
_EXPORTS = {
    "RunResult": "runtime", "compile_and_run": "runtime", "probe_gpu": "runtime",
    "Report": "checker", "check_gpu_compatibility": "checker", "print_report": "report",
    "read_model_info": "model_info", "ModelInfo": "model_info", "InvalidModelError": "model_info",
    "compare": "metrics", "Comparison": "metrics",
    "lint_for_mobile": "lint", "LintFinding": "lint",
    "BisectReport": "bisect", "plan_precision": "precision_plan", "PrecisionPlan": "precision_plan",
    "apply_patches": "convert", "convert_for_gpu": "convert", "ConvertResult": "convert",
    "export_tflite": "export", "gpu_vs_torch": "export",
    "SYMPTOMS": "symptoms",
    "known_rewrites": "rewrites.registry", "GpuRewriteWrapper": "rewrites.functional",
    "signature_inputs": "export", "native_stderr_captured": "runtime", "resolve_model_dir": "weights",
    "add_device_argument": "recipe", "report_gates": "recipe", "residency_line": "recipe",
    "run_on_device": "recipe", "device_label": "recipe", "DeviceError": "recipe",
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
