"""HF text-model walls: CUMSUM position ids (`patch_cumsum`) and torch.gather from buffers (`patch_gather_onehot`).

Each rewrite: exact in torch, the offending op gone from the converted graph, strict GPU-only compile
with numerics matching torch (software GPU: llvmpipe, ai-edge-litert 2.3.0)."""
import pytest
import torch
from torch import nn

from litert_gpu_toolkit.convert.pipeline import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.cumsum import MAX_LEN, cumsum_matmul
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.rewrites.gather_nd import gather_onehot
from litert_gpu_toolkit.core.symptoms import BY_ID, for_op


class PositionEmbeddings(nn.Module):
    """The RoBERTa embedding front: position ids from a cumsum over the non-pad mask, token types
    gathered from a buffer by those ids (what transformers does when token_type_ids is not given)."""

    def __init__(self, vocab=50, dim=16, max_pos=40, pad=1):
        super().__init__()
        torch.manual_seed(0)
        self.pad = pad
        self.words = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(max_pos, dim)
        self.types = nn.Embedding(2, dim)
        self.register_buffer("token_type_ids", torch.zeros(1, max_pos, dtype=torch.long), persistent=False)

    def forward(self, ids):
        mask = ids.ne(self.pad).int()
        pos = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + self.pad
        types = torch.gather(self.token_type_ids.expand(ids.shape[0], -1), dim=1, index=pos)
        return self.words(ids) + self.positions(pos) + self.types(types)


IDS = torch.tensor([[0, 5, 7, 9, 11, 3, 8, 2, 1, 1, 1, 1]])


def test_cumsum_matmul_exact_in_torch():
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.int32, torch.int64, torch.bool):
        x = torch.randint(0, 3, (2, 37), generator=g).to(dtype)
        assert torch.equal(cumsum_matmul(x, 1), torch.cumsum(x, 1))
        assert torch.equal(cumsum_matmul(x, -1, dtype=torch.int32), torch.cumsum(x, -1, dtype=torch.int32))
    x = torch.randn(3, 11, 5, generator=g)
    assert torch.allclose(cumsum_matmul(x, 1), x.cumsum(1), rtol=0, atol=1e-5)
    assert MAX_LEN >= 512


def test_gather_onehot_exact_in_torch():
    g = torch.Generator().manual_seed(0)
    t = torch.randint(-1000, 1000, (2, 50), generator=g)
    i = torch.randint(0, 50, (2, 16), generator=g)
    assert torch.equal(gather_onehot(t, 1, i), torch.gather(t, 1, i))
    t = torch.randn(4, 9, 3, generator=g)
    for dim, shape in ((1, (4, 5, 3)), (2, (4, 9, 2)), (0, (2, 9, 3))):
        i = torch.randint(0, t.shape[dim], shape, generator=g)
        assert torch.equal(gather_onehot(t, dim, i), torch.gather(t, dim, i))


def test_wrapper_rewrites_the_hf_front_exactly():
    model = PositionEmbeddings().eval()
    wrapped = GpuRewriteWrapper(model, include=["patch_cumsum", "patch_gather_onehot", "patch_broadcast_to"])
    with torch.no_grad():
        assert torch.equal(wrapped(IDS), model(IDS))
    assert {c.rewrite for c in wrapped.changes} >= {"patch_cumsum", "patch_gather_onehot"}


def test_symptoms_name_the_rewrites():
    assert "patch_cumsum" in BY_ID["cumsum"].rewrites and BY_ID["cumsum"] in for_op("CUMSUM")
    assert "patch_gather_onehot" in BY_ID["gather_nd"].rewrites


@pytest.mark.gpu
def test_plain_has_the_walls_and_rewritten_passes_gpu_only(gpu, tmp_path):
    plain = convert_for_gpu(PositionEmbeddings(), (IDS,), tmp_path / "plain.tflite", patches=False)
    ops = read_model_info(plain.path).op_histogram()
    assert "CUMSUM" in ops and ({"GATHER", "GATHER_ND"} & set(ops)), ops
    assert plain.verdict != "PASS", plain.summary()
    result = convert_for_gpu(PositionEmbeddings(), (IDS,), tmp_path / "fixed.tflite",
                             only=["patch_cumsum", "patch_gather_onehot", "patch_broadcast_to"], fallback=False)
    ops = read_model_info(result.path).op_histogram()
    assert not {"CUMSUM", "GATHER", "GATHER_ND"} & set(ops), ops
    assert result.ok, result.summary()
    print("\n[llvmpipe fp16]", result.report.summary)
