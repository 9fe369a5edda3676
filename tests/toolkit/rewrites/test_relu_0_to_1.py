"""RELU_0_TO_1: clamp01 / hardsigmoid (bit-exact, op gone, GPU-only match)."""

import torch
import torch.nn.functional as F
from torch import nn

from litert_gpu_toolkit.rewrites.relu_0_to_1 import clamp01, hardsigmoid_arith, patch_hardsigmoid
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.runtime.compiled import compile_and_run

from wall_checks import INF, _close, _convert, _gpu_clean, _same  # noqa: F401


def test_clamp01_and_hardsigmoid_are_bit_exact_everywhere():
    x = torch.cat([torch.randn(1000) * 3, torch.tensor([0.0, -0.0, 1.0, 1 - 2 ** -24, 2049.0, 3e4, 1e9, -1e9,
                                                         1e-40, INF, -INF, 3.0, -3.0, 2 ** 24 + 2.0])])
    assert torch.equal(clamp01(x), x.clamp(0, 1))
    assert torch.equal(hardsigmoid_arith(x), F.hardsigmoid(x))
    # the plain relu difference is wrong above 2**24 (fp32); clamp01 is not
    big = torch.tensor([2.0 ** 25])
    assert float(torch.relu(big) - torch.relu(big - 1)) != 1.0 and float(clamp01(big)) == 1.0

    class M(nn.Module):
        def forward(self, x):
            return (F.hardtanh(x, 0.0, 1.0) + torch.clamp(x, 0, 1) + x.clamp(min=0.0, max=1.0)
                    + torch.clip(x, 0, 1) + F.hardsigmoid(x) + x * torch.clamp(x / 6 + 0.5, 0, 1))
    wrapped = GpuRewriteWrapper(M(), include=["patch_hardsigmoid"])
    assert _same(wrapped(x), M()(x))
    assert len({c.path for c in wrapped.changes}) >= 4


class Relu01Walls(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Hardtanh(0.0, 1.0)

    def forward(self, x):
        return self.gate(x), x * torch.clamp(x / 6 + 0.5, 0, 1)     # hardswish's inner term, spelled out


R01_ARGS = (torch.cat([torch.randn(1, 8, 9, 11) * 3, torch.full((1, 8, 1, 11), 3000.0)], 2),)


def test_relu01_plain_conversion_is_rejected(tmp_path, gpu):
    info = _convert(Relu01Walls(), R01_ARGS, tmp_path / "plain.tflite")
    assert info.op_histogram().get("RELU_0_TO_1", 0) == 2, info.op_histogram()
    run = compile_and_run(tmp_path / "plain.tflite", None, accelerator="gpu")
    assert run.status == "ops_rejected" and "RELU_0_TO_1" in [r.op for r in run.gpu.rejected]


def test_hardsigmoid_and_hardswish_lower_without_relu01_on_this_toolchain(tmp_path):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.hs, self.hw = nn.Hardsigmoid(), nn.Hardswish()

        def forward(self, x):
            return self.hs(x), self.hw(x)
    hist = _convert(M(), R01_ARGS, tmp_path / "pin.tflite").op_histogram()
    assert "RELU_0_TO_1" not in hist and hist.get("HARD_SWISH") == 1, hist


def test_relu01_rewritten_is_gpu_clean(tmp_path, gpu):
    model = Relu01Walls()
    ref = model(*R01_ARGS)
    changes = patch_hardsigmoid(model)
    assert changes[0].path == "gate"
    for out, r in zip(model(*R01_ARGS), ref):
        assert torch.equal(out, r)
    res = _gpu_clean(model, R01_ARGS, tmp_path / "rewritten.tflite")
    assert "RELU_0_TO_1" not in res.info.op_histogram()
    # the row of 3000s: exactly 1.0 on the fp16 GPU (the plain relu(x) - relu(x - 1) gives 0 or 2 there)
    gate = next(iter(res.run.outputs.values()))["output_0"].reshape(ref[0].shape)
    assert (gate[:, :, -1, :] == 1.0).all()


# ===================================================================== amax, chunk / split
