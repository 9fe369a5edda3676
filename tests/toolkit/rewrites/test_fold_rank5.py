"""A video network's rank-5 input and activations (symptom `rank_gt_4`): `fold_rank5` carries the exported graph
at rank 4, the input fed with its last two axes merged (the same bytes). Exact up to fp32 summation order (the
mean over T, H, W runs over T and H*W): bound 1e-5 of the output's largest magnitude, checked by the rewrite
itself and here; nothing of rank 5 is left in the file; on the GPU the plain file falls back and the folded
one runs strictly on the GPU and matches torch."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.export.graph_signature import InputKind

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.lowering.export import export_tflite
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.rewrites.rank_gt_4 import NotFoldable, fold_rank5


class Block(nn.Module):
    """torchvision's video ResNet block: conv3d, BatchNorm3d, in-place ReLU, residual add in place."""

    def __init__(self, c, stride=1):
        super().__init__()
        self.conv1 = nn.Conv3d(c if stride == 1 else c // 2, c, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm3d(c)
        self.conv2 = nn.Conv3d(c, c, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm3d(c)
        self.relu = nn.ReLU(inplace=True)
        self.down = nn.Sequential(nn.Conv3d(c // 2, c, 1, stride, bias=False), nn.BatchNorm3d(c)) if stride > 1 \
            else None

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x if self.down is None else self.down(x)
        return self.relu(out)


class TinyVideoNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, 8, (3, 5, 5), (1, 2, 2), (1, 2, 2), bias=False), nn.BatchNorm3d(8),
                                  nn.ReLU(inplace=True))
        self.blocks = nn.Sequential(Block(8), Block(16, stride=2))
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(self.blocks(self.stem(x)))
        return self.fc(x.flatten(1) * torch.sigmoid(x.mean((2, 3, 4))))     # a rank-5 mean and a rank-2 product


def _net():
    torch.manual_seed(0)
    model = TinyVideoNet().eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm3d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 2.0)
    return model, (torch.randn(1, 3, 4, 16, 16),)


def test_the_folded_graph_matches_the_model_with_nothing_of_rank_5():
    model, x = _net()
    folded = fold_rank5(GpuRewriteWrapper(model), x)
    assert folded.inputs == {0: ((1, 3, 4, 16, 16), (1, 3, 4, 256))}
    assert torch.equal(folded.args[0], x[0].reshape(1, 3, 4, 256))              # the same bytes
    with torch.no_grad():
        want, got = model(*x), folded.module(*folded.args)
    assert float((want - got).abs().max()) <= 1e-5 * float(want.abs().max())
    ep = torch.export.export(folded.module, folded.args, strict=False)
    user = {s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT}
    computed = [n for n in ep.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)
                and (n.op == "call_function" or n.name in user)]
    assert len(computed) > 50 and max(n.meta["val"].dim() for n in computed) == 4     # the weights stay rank 5


class SwapsTheLastAxes(nn.Module):
    def forward(self, x):
        return F.relu(x.transpose(3, 4)).mean((2, 3, 4))


class ReturnsRank5(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


class ReducesOneOfTheLastAxes(nn.Module):
    def forward(self, x):
        return x.mean(4).flatten(1)


@pytest.mark.parametrize("model, why", [(SwapsTheLastAxes(), "moves the last two axes"),
                                        (ReturnsRank5(), "output of rank 5"),
                                        (ReducesOneOfTheLastAxes(), "one of the last two axes")])
def test_what_cannot_be_carried_is_refused_by_name(model, why):
    with pytest.raises(NotFoldable, match=why):
        fold_rank5(model, (torch.randn(1, 2, 3, 4, 5),))


def test_the_converted_file_declares_the_merged_input_and_no_rank_5_tensor(tmp_path):
    model, x = _net()
    folded = fold_rank5(GpuRewriteWrapper(model), x)
    info = read_model_info(export_tflite(folded.module, folded.args, tmp_path / "folded.tflite"))
    assert [list(t.shape) for t in info.signatures[0].inputs.values()] == [[1, 3, 4, 256]]
    assert not [t for t, _ in info.high_rank_tensors() if not t.is_constant]
    plain = read_model_info(export_tflite(GpuRewriteWrapper(model), x, tmp_path / "plain.tflite"))
    assert [t for t, _ in plain.high_rank_tensors() if not t.is_constant]       # the wall, without the fold


@pytest.mark.gpu
def test_convert_for_gpu_runs_a_video_network_on_the_gpu(gpu, tmp_path):
    model, x = _net()
    plain = convert_for_gpu(model, x, tmp_path / "plain.tflite", exclude=["fold_rank5", "legalize"], fallback=False,
                            diagnose_budget_s=0)
    assert plain.verdict == "FALLBACK" and "fold_rank5" in plain.suggestions, plain.summary()    # the wall, named
    # the graph pass carries the same network without fold_rank5 (rank-5 input merged, BatchNorm3d on a view)
    alone = convert_for_gpu(model, x, tmp_path / "pass.tflite", exclude=["fold_rank5"], fallback=False,
                            diagnose_budget_s=0)
    assert alone.ok and "legalize" in alone.kept, alone.summary()
    result = convert_for_gpu(model, x, tmp_path / "m.tflite", diagnose_budget_s=0)
    assert result.ok and "fold_rank5" in result.kept, result.summary()
    assert "(strict GPU)" in result.report.residency["line"], result.summary()
    corrs = [e["vs_reference"][label]["corr"] for outs in result.report.signatures.values() for e in outs.values()
             for label in ("gpu_fp16", "gpu_fp32")]
    assert len(corrs) == 2 and min(corrs) >= 0.999, corrs
