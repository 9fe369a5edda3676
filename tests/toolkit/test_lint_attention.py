"""The masked-attention lint finding on converted attention code: litert-torch puts RESHAPE / TRANSPOSE (and
the score scaling) between the BATCH_MATMUL and the mask ADD; the finding must see through them, and
must not fire when the mask already has every head or when the ADD is not on the scores."""
import math

import pytest
import torch
from torch import nn

from litert_gpu_toolkit.lowering.export import export_tflite
from litert_gpu_toolkit.lint.mobile import lint_for_mobile, scores_source
from litert_gpu_toolkit.core.model_info import read_model_info


class TinyAttention(nn.Module):
    """Ordinary multi-head attention: projections, a head split by view + transpose, scaled scores plus
    an additive mask, softmax, values, heads merged back. mask_heads: the mask's head axis (1 or H)."""

    def __init__(self, dim=32, heads=4, scale_after=True):
        super().__init__()
        torch.manual_seed(0)
        self.heads, self.scale_after = heads, scale_after
        self.qkv = nn.ModuleList([nn.Linear(dim, dim) for _ in range(3)])
        self.out = nn.Linear(dim, dim)

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = (p(x).view(b, s, self.heads, d // self.heads).transpose(1, 2) for p in self.qkv)
        scores = torch.matmul(q, k.transpose(-1, -2))
        scores = scores / math.sqrt(d // self.heads) if self.scale_after else scores
        att = torch.softmax(scores + mask, dim=-1)
        return self.out(torch.matmul(att, v).transpose(1, 2).reshape(b, s, d))


X = torch.randn(1, 8, 32)
MASK = torch.triu(torch.full((8, 8), -1e4), 1)[None, None]


def _findings(tmp_path, model, mask, name):
    path = export_tflite(model.eval(), (X, mask), tmp_path / f"{name}.tflite")
    return read_model_info(path), [f for f in lint_for_mobile(path) if f.symptom == "masked_attention"]


@pytest.mark.parametrize("scale_after", [True, False])
def test_found_through_reshape_and_transpose(tmp_path, scale_after):
    info, hits = _findings(tmp_path, TinyAttention(scale_after=scale_after), MASK, f"att_{scale_after}")
    assert len(hits) == 1, [f.line() for f in lint_for_mobile(info)]
    add = info.ops[hits[0].node]
    producers = info.producers(add.subgraph)
    direct = [producers.get(t) for t in add.inputs if t >= 0]
    # scaled after the matmul: the converted graph has ops between the matmul and the ADD (the case this
    # finding must survive); unscaled: the matmul feeds the ADD directly
    assert any(p is not None and p.op == "BATCH_MATMUL" for p in direct) != scale_after, [p.op for p in direct if p]
    assert any(scores_source(info, t, add.subgraph) is not None for t in add.inputs if t >= 0)


def test_not_found_when_the_mask_has_every_head(tmp_path):
    _, hits = _findings(tmp_path, TinyAttention(), MASK.repeat(1, 4, 1, 1).contiguous(), "att_full")
    assert hits == []


class NotScores(nn.Module):
    """A matmul result that goes through a non-view op (softmax) before a [1, 1, S, S] add: no finding."""

    def forward(self, x, mask):
        q = x.view(1, 8, 4, 8).transpose(1, 2)
        return torch.softmax(q @ q.transpose(-1, -2), -1) + mask


def test_not_found_after_a_non_view_op(tmp_path):
    _, hits = _findings(tmp_path, NotScores(), MASK, "not_scores")
    assert hits == []
