"""Registration and scoping of the functional rewrites (per instance, survive deepcopy)."""
import math

import pytest
import torch
from torch import nn

from litert_gpu_toolkit.rewrites import PATCHES
from litert_gpu_toolkit.rewrites.scoping import scope_rewrites, scoped_rewrites

from wall_checks import INF, _close, _convert, _gpu_clean, _same  # noqa: F401


def test_patches_registered_with_their_walls():
    walls = {"patch_select": "select", "patch_repeat_kv": "broadcast_to", "patch_broadcast_to": "broadcast_to",
             "patch_hardsigmoid": "relu_0_to_1", "patch_amax": "amax", "patch_chunk": "split",
             "patch_channel_attention_linear": "linear_channel_attention",
             "patch_degenerate_softmax": "identical_or_constant_inputs"}
    for name, wall in walls.items():
        assert PATCHES[name].wall == wall and PATCHES[name].exact


def test_scope_is_per_instance_survives_deepcopy_and_leaves_torch_alone():
    import copy

    class M(nn.Module):
        def forward(self, x):
            return torch.where(x > 0, x, x.new_tensor(-INF)) * self.k

    a, b = M(), M()
    a.k = b.k = 2.0
    x = torch.tensor([1.0, -1.0])
    change = scope_rewrites(a, ["patch_select"])
    scope_rewrites(a, ["patch_chunk"])                      # adds to the same scope
    assert scoped_rewrites(a) == {"patch_select", "patch_chunk"} and change.exact
    assert not scoped_rewrites(b)                           # the other instance is untouched
    assert torch.equal(a(x), b(x))
    c = copy.deepcopy(a)
    c.k = 3.0                                               # the copy runs its own forward, still scoped
    assert torch.equal(c(x), b(x) * 1.5) and scoped_rewrites(c) == scoped_rewrites(a)
    from torch.overrides import _get_current_function_mode_stack
    assert not _get_current_function_mode_stack()           # every scope was left
    with pytest.raises(TypeError):
        a(torch.ones(2, 3), torch.ones(2))                  # a forward that raises still leaves its scope
    assert not _get_current_function_mode_stack()
    assert math.isinf(float(torch.where(x > 0, x, x.new_tensor(-INF))[1]))
