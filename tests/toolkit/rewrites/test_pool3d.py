"""3-D pooling (nn.MaxPool3d / AvgPool3d, S3D- and I3D-style) at rank 4 (`patch_pool3d`): per depth tap a 2-D pool
with the output depths in the batch axis. Max is bit-exact, average within fp32 summation order (bound: 4 ulps of
the largest input); with `fold_rank5` a video network with 3-D pools runs strictly on the GPU."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.rewrites.rank_gt_4 import patch_pool3d, pool3d_as_pool2d

CASES = [((3, 3, 3), (1, 1, 1), (1, 1, 1)), ((2, 2, 2), (2, 2, 2), 0), ((1, 3, 3), (1, 2, 2), (0, 1, 1)),
         ((3, 2, 2), (2, 1, 1), (1, 1, 0)), ((2, 7, 7), 1, 0), (3, None, 1)]


@pytest.mark.parametrize("kernel, stride, padding", CASES)
def test_max_is_bit_exact_and_avg_within_fp32_rounding(kernel, stride, padding):
    x = torch.randn(2, 3, 7, 9, 10, generator=torch.Generator().manual_seed(0))
    assert torch.equal(pool3d_as_pool2d("max", x, kernel, stride, padding), F.max_pool3d(x, kernel, stride, padding))
    ref = F.avg_pool3d(x, kernel, stride, padding)
    got = pool3d_as_pool2d("avg", x, kernel, stride, padding)
    assert float((got - ref).abs().max()) <= 4 * 2.0 ** -24 * float(x.abs().max())
    assert torch.equal(pool3d_as_pool2d("max", x[0], kernel, stride, padding), F.max_pool3d(x[0], kernel, stride,
                                                                                             padding))


def test_what_it_does_not_cover_runs_as_torch_does():
    x = torch.randn(1, 2, 5, 6, 6)
    assert pool3d_as_pool2d("avg", x, 3, 1, 1, count_include_pad=False) is NotImplemented
    model = GpuRewriteWrapper(nn.Sequential(nn.MaxPool3d(2, ceil_mode=True), nn.AvgPool3d(2, divisor_override=3)))
    with torch.no_grad():
        assert torch.equal(model(x), nn.Sequential(nn.MaxPool3d(2, ceil_mode=True),
                                                   nn.AvgPool3d(2, divisor_override=3))(x))


class PooledVideo(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 8, 3, padding=1)
        self.pool = nn.MaxPool3d((1, 3, 3), (1, 2, 2), (0, 1, 1))
        self.down = nn.MaxPool3d(2)
        self.avg = nn.AvgPool3d((2, 4, 4), 1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = self.down(torch.relu(self.pool(self.conv(x))))
        return self.fc(self.avg(x).mean((2, 3, 4)))


def test_the_rewritten_video_net_matches_torch():
    torch.manual_seed(0)
    model, x = PooledVideo().eval(), torch.randn(1, 3, 4, 16, 16)
    with torch.no_grad():
        ref, got, alone = model(x), GpuRewriteWrapper(model)(x), patch_pool3d(model)(x)
    assert float((got - ref).abs().max()) <= 1e-5 * float(ref.abs().max())
    assert float((alone - ref).abs().max()) <= 1e-5 * float(ref.abs().max())


@pytest.mark.gpu
def test_a_video_net_with_3d_pools_runs_on_the_gpu(gpu, tmp_path):
    torch.manual_seed(0)
    model, x = PooledVideo().eval(), (torch.randn(1, 3, 4, 16, 16),)
    plain = convert_for_gpu(model, x, tmp_path / "plain.tflite", exclude=["patch_pool3d", "legalize"],
                            fallback=False, diagnose_budget_s=0)
    assert plain.verdict == "FALLBACK" and "fold_rank5" not in plain.kept, plain.summary()   # max_pool3d: no fold
    # the graph pass's `volume` rule meets the same wall without this handler
    alone = convert_for_gpu(model, x, tmp_path / "pass.tflite", exclude=["patch_pool3d"], fallback=False,
                            diagnose_budget_s=0)
    assert alone.ok and "legalize" in alone.kept, alone.summary()
    result = convert_for_gpu(model, x, tmp_path / "m.tflite", diagnose_budget_s=0)
    assert result.ok and {"patch_pool3d", "fold_rank5"} <= set(result.kept), result.summary()
    assert "(strict GPU)" in result.report.residency["line"]
