"""amax: channel_max matches torch.amax / max."""
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

from wall_checks import INF, _close, _convert, _gpu_clean, _same  # noqa: F401


def test_channel_max_matches_amax_and_max():
    torch.manual_seed(4)
    x = torch.randn(2, 5, 7, 3) - 1
    for dim, keep in [(1, True), (1, False), (-1, False), ((2, 3), True), ((1, 2), False), ((), False), (0, True)]:
        assert torch.equal(channel_max(x, dim, keep), x.amax(dim, keep)), (dim, keep)
    with pytest.raises(ValueError):
        channel_max(x, (1, 3))

    class M(nn.Module):
        def forward(self, x):
            v, i = torch.max(x, dim=1, keepdim=True)
            return x - x.amax(1, keepdim=True), torch.amax(x, dim=(2, 3)), v, i, x.max(-1).values, x.max()
    wrapped = GpuRewriteWrapper(M(), include=["patch_amax"])
    for out, r in zip(wrapped(x), M()(x)):
        assert torch.equal(out, r)
