"""amax: channel_max matches torch.amax / max."""

import pytest
import torch
from torch import nn

from litert_gpu_toolkit.rewrites.amax import channel_max
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper

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
