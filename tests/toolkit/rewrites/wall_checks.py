"""Shared by the wall tests (tests/toolkit/rewrites): convert, run strict GPU-only, compare exactly."""

import torch

from litert_gpu_toolkit.lowering.export import export_tflite, gpu_vs_torch
from litert_gpu_toolkit.core.model_info import read_model_info

INF = float("inf")


def _convert(module, args, path, kwargs=None):
    return read_model_info(export_tflite(module.eval(), args, path, kwargs=kwargs))


def _gpu_clean(module, args, path):
    """Convert + strict GPU-only run; every output finite and correlated with torch."""
    res = gpu_vs_torch(module.eval(), args, path)
    assert res.ok, res.summary()
    assert res.run.gpu.cpu_ops in (None, 0), res.summary()
    assert res.comparisons
    for c in res.comparisons:
        assert c.nonfinite == 0 and c.corr >= 0.999, res.summary()
    return res


def _gpu_wrong(module, args, path):
    """Convert + strict GPU-only run that completes with a wrong first output (non-finite or corr < 0.99): what a
    rewrite's test shows the plain model does."""
    res = gpu_vs_torch(module.eval(), args, path)
    assert res.ok, res.summary()
    assert res.comparisons[0].nonfinite > 0 or res.comparisons[0].corr < 0.99, res.summary()
    return res


def _same(a, b):
    """Equal as numbers, NaN where NaN (zeros compare equal whatever their sign)."""
    return a.shape == b.shape and bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def _close(a, b, rel=2e-6):
    a, b = a.detach(), b.detach()
    fin = torch.isfinite(b)
    assert torch.equal(torch.isfinite(a), fin) and torch.equal(a[~fin & ~torch.isnan(b)], b[~fin & ~torch.isnan(b)])
    return float((a[fin] - b[fin]).abs().max() / b[fin].abs().max().clamp_min(1e-12)) <= rel if fin.any() else True


# ================================================================================== SELECT

