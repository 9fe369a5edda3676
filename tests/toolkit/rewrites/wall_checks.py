"""Shared by the wall tests (tests/toolkit/rewrites): convert, run strict GPU-only, compare exactly."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from litert_gpu_toolkit.export import export_tflite, gpu_vs_torch
from litert_gpu_toolkit.model_info import read_model_info
from litert_gpu_toolkit.rewrites import PATCHES
from litert_gpu_toolkit.rewrites.select import arith_where, patch_select
from litert_gpu_toolkit.rewrites.amax import channel_max, patch_amax
from litert_gpu_toolkit.rewrites.split import chunk_slices, patch_chunk, split_slices
from litert_gpu_toolkit.rewrites.relu_0_to_1 import clamp01, hardsigmoid_arith, patch_hardsigmoid
from litert_gpu_toolkit.rewrites.broadcast_to import expand_by_cat, patch_broadcast_to, patch_repeat_kv, repeat_kv_cat
from litert_gpu_toolkit.rewrites.linear_channel_attention import patch_channel_attention_linear
from litert_gpu_toolkit.rewrites.identical_or_constant_inputs import patch_degenerate_softmax
from litert_gpu_toolkit.rewrites.scoping import scope_rewrites, scoped_rewrites
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.runtime import compile_and_run

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


def _same(a, b):
    """Equal as numbers, NaN where NaN (zeros compare equal whatever their sign)."""
    return a.shape == b.shape and bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def _close(a, b, rel=2e-6):
    a, b = a.detach(), b.detach()
    fin = torch.isfinite(b)
    assert torch.equal(torch.isfinite(a), fin) and torch.equal(a[~fin & ~torch.isnan(b)], b[~fin & ~torch.isnan(b)])
    return float((a[fin] - b[fin]).abs().max() / b[fin].abs().max().clamp_min(1e-12)) <= rel if fin.any() else True


# ================================================================================== SELECT

