"""litert_gpu_toolkit: get PyTorch models onto LiteRT's GPU accelerator, fully and correctly.

Works with nothing but the `utilities/` folder on PYTHONPATH (vendored) or pip-installed
(`pip install -e .` at the repository root). Importing the package pulls in numpy only; torch and
ai_edge_litert are imported by the modules that need them.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .runtime import RunResult, compile_and_run, probe_gpu
from .checker import Report, check_gpu_compatibility  # noqa: E402
from .report import print_report  # noqa: E402

__all__ = ["Report", "check_gpu_compatibility", "print_report", "RunResult", "compile_and_run", "probe_gpu", "__version__"]
