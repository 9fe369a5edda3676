"""Linear channel attention as 1x1 convs (exact, converts, GPU-only match)."""

import pytest
import torch
from torch import nn

from litert_gpu_toolkit.rewrites.linear_channel_attention import patch_channel_attention_linear

from wall_checks import INF, _close, _convert, _gpu_clean, _same  # noqa: F401


class SEChannelsLast(nn.Module):
    """Squeeze-excite with the excitation MLP applied to a channels-last [N, 1, 1, C] tensor."""

    def __init__(self, c=8):
        super().__init__()
        torch.manual_seed(5)
        self.conv, self.fc1, self.fc2, self.out = nn.Conv2d(c, c, 3, padding=1), nn.Linear(c, 4), nn.Linear(4, c), \
            nn.Conv2d(c, c, 1)

    def forward(self, x):
        x = self.conv(x)
        s = x.mean((2, 3), keepdim=True).permute(0, 2, 3, 1)
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(s))))
        return self.out(x * s.permute(0, 3, 1, 2))


SE_ARGS = (torch.randn(1, 8, 9, 11),)


def test_linear_channel_attention_fails_to_convert(tmp_path):
    with pytest.raises(Exception, match="batch_matmul|broadcast-compatible"):
        _convert(SEChannelsLast(), SE_ARGS, tmp_path / "plain.tflite")


def test_linear_channel_attention_rewritten_is_gpu_clean(tmp_path, gpu):
    model = SEChannelsLast().eval()
    ref = model(*SE_ARGS)
    changes = patch_channel_attention_linear(model, SE_ARGS)
    assert sorted(c.path for c in changes) == ["fc1", "fc2"]
    assert torch.allclose(model(*SE_ARGS), ref, rtol=1e-5, atol=1e-6)
    res = _gpu_clean(model, SE_ARGS, tmp_path / "rewritten.tflite")
    assert "FULLY_CONNECTED" not in res.info.op_histogram() and "BATCH_MATMUL" not in res.info.op_histogram()


# ============================================================ identical / all-constant inputs
