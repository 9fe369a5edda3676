"""Indexing by aranges (`patch_index_arange`) and the exact finfo.min mask fill (`patch_mask_fill_exact`), both
default on: how Hugging Face builds a padding mask (`padding_mask[batch_idx, kv_idx]`, then
`torch.where(mask, 0, finfo.min)`) and pools one position per row (`hidden[arange(B), positions]`).

Each rewrite: exact in torch, the offending op gone from the converted graph, strict GPU-only compile with
numerics matching torch (software GPU: llvmpipe, ai-edge-litert 2.3.0)."""
import math

import pytest
import torch
from torch import nn

from litert_gpu_toolkit.convert.pipeline import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites import PATCHES
from litert_gpu_toolkit.rewrites.fp16_overflow.mask_fill import mask_fill_exact
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.rewrites.gather_nd import arange_offset, index_by_arange
from litert_gpu_toolkit.rewrites.registry import load_rewrites

load_rewrites()
G = torch.Generator().manual_seed(0)
MIN = torch.finfo(torch.float32).min
ONLY = ["patch_fold_index_math", "patch_index_arange", "patch_mask_fill_exact", "patch_broadcast_to"]


INDEXING = ["patch_fold_index_math", "patch_index_arange"]


def _marked(fn, rewritten=None):
    """Run `fn` with the index rewrites active; return its result (rewritten: whether the indexing rewrite
    must have fired)."""
    class M(nn.Module):
        def forward(self):
            return fn()
    wrapped = GpuRewriteWrapper(M(), include=INDEXING)
    out = wrapped()
    if rewritten is not None:
        assert ("patch_index_arange" in {c.rewrite for c in wrapped.changes}) == rewritten, wrapped.changes
    return out


def test_aranges_are_known_through_views_and_shifts():
    seen = {}

    def fn():
        a = torch.arange(3, 9)
        seen["a"] = arange_offset(a)
        seen["b"] = arange_offset((a + 2)[None, :, None])
        seen["c"] = arange_offset(a.unsqueeze(0).to(torch.int32) - 1)
        seen["float"] = arange_offset(a.float())
        seen["stepped"] = arange_offset(torch.arange(0, 9, 2))
        seen["times"] = arange_offset(a * 2)
        return a

    _marked(fn, rewritten=False)
    assert seen == {"a": 3, "b": 5, "c": 2, "float": None, "stepped": None, "times": None}


MASK_BOOL = torch.rand(3, 7, generator=G) > 0.3
HIDDEN = torch.randn(3, 7, 5, generator=G)
ROWS = torch.tensor([6, 0, 3])
CASES = {
    "hf_mask": lambda: MASK_BOOL[torch.arange(3)[:, None, None, None], torch.arange(7)[None, None, None, :]],
    "flat": lambda: MASK_BOOL[torch.arange(3), torch.arange(3)[:, None]],
    "offset": lambda: MASK_BOOL[torch.arange(3)[:, None, None, None], torch.arange(2, 6)[None, None, None, :]],
    "per_row_pick": lambda: HIDDEN[torch.arange(3), ROWS],
    "per_row_pick_2d": lambda: HIDDEN[torch.arange(3)[:, None], ROWS[:, None]],
    "pick_bool": lambda: MASK_BOOL[torch.arange(3), ROWS],
    "pick_int": lambda: (HIDDEN * 100).long()[torch.arange(1, 3), ROWS[1:]],
    "transposed": lambda: HIDDEN[torch.arange(3)[None, :], torch.arange(7)[:, None]],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_index_by_arange_is_exact(case):
    want, got = CASES[case](), _marked(CASES[case], rewritten=True)
    assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want), case


def test_left_alone_without_an_arange():
    x = torch.randn(5, 4)
    i = torch.tensor([4, 0, 2])
    wrapped = GpuRewriteWrapper(nn.Identity(), include=["patch_index_arange"])
    assert wrapped(x[i]).shape == (3, 4) and wrapped.changes == []
    assert torch.equal(index_by_arange(x, [torch.arange(5), i.new_tensor([1, 1, 1, 1, 1])], [0, None]), x[:, 1])


def test_mask_fill_exact_equals_torch_where():
    cond = torch.rand(2, 1, 4, 6, generator=G) > 0.4
    for a, b in ((torch.zeros(()), MIN), (MIN, 0.0), (torch.randn(2, 3, 4, 6, generator=G), MIN),
                 (torch.randn(6, generator=G), -MIN), (torch.tensor(float("inf")), MIN)):
        want = torch.where(cond, a, b)
        got = mask_fill_exact(cond, a, b)
        assert got.shape == want.shape and torch.equal(got, want)
    spec = PATCHES["patch_mask_fill_exact"]
    assert spec.exact and spec.default and spec.wall == "fp16_overflow"
    assert PATCHES["patch_index_arange"].exact and PATCHES["patch_index_arange"].default


class PaddedPool(nn.Module):
    """HF's mask building and pooling on a batch with a padded row: scores plus the finfo.min mask,
    attention, and the hidden state at each row's last real token (a per-row pick)."""

    def forward(self, x, mask):
        b, s = mask.shape
        batch_idx, kv_idx = torch.arange(b)[:, None, None, None], torch.arange(s)[None, None, None, :]
        keep = mask.to(torch.bool)[batch_idx, kv_idx].expand(b, 1, s, s)
        bias = torch.where(keep, torch.zeros(()), MIN)
        q = x.unsqueeze(1)
        att = torch.softmax(torch.matmul(q, q.transpose(-1, -2)) * 0.25 + bias, dim=-1)
        out = torch.matmul(att, q).squeeze(1)
        last = mask.sum(-1) - 1
        return out, out[torch.arange(b), last]


X = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(3))
MASK = torch.tensor([[1] * 8, [1] * 5 + [0] * 3])


def test_padded_pool_rewritten_exactly():
    model = PaddedPool().eval()
    wrapped = GpuRewriteWrapper(model, include=ONLY)
    with torch.no_grad():
        want, got = model(X, MASK), wrapped(X, MASK)
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert {c.rewrite for c in wrapped.changes} == set(ONLY)


@pytest.mark.gpu
def test_padded_pool_plain_walls_and_default_pass_on_gpu(gpu, tmp_path):
    plain = convert_for_gpu(PaddedPool(), (X, MASK), tmp_path / "plain.tflite", patches=False)
    ops = read_model_info(plain.path).op_histogram()
    assert "GATHER_ND" in ops, ops
    assert plain.verdict != "PASS", plain.summary()
    fixed = convert_for_gpu(PaddedPool(), (X, MASK), tmp_path / "fixed.tflite", fallback=False)
    ops = read_model_info(fixed.path).op_histogram()
    assert not {"GATHER", "GATHER_ND", "BROADCAST_TO"} & set(ops), ops
    assert {"patch_index_arange", "patch_mask_fill_exact"} <= set(fixed.kept), fixed.summary()
    assert fixed.ok, fixed.summary()
    print("\n[llvmpipe fp16]", fixed.report.summary)


class PackedCausal(nn.Module):
    """Index math that depends on no input, as transformers 5.x and MPNet write it: the packed-sequence ids
    of arange positions (diff, cumsum, indexed by aranges), a causal mask, finfo.min fill, relative-position
    buckets (abs / log / where / clamp) looked up in a bias table -- all onto runtime attention scores."""

    def __init__(self, heads=2):
        super().__init__()
        torch.manual_seed(0)
        self.heads = heads
        self.bias = nn.Embedding(8, 1)

    def forward(self, x):
        s = x.shape[1]
        pos = torch.arange(s)[None]
        packed = (torch.diff(pos, prepend=pos[:, :1] - 1, dim=-1) != 1).cumsum(-1)
        b, q, kv = torch.arange(1)[:, None, None, None], torch.arange(s)[None, None, :, None], torch.arange(s)
        kv = kv[None, None, None, :]
        keep = (kv <= q) & (packed[b, q] == packed[b, kv])
        mask = torch.where(keep, torch.zeros(()), MIN)
        n = (torch.arange(s)[None, :] - torch.arange(s)[:, None]).abs()
        large = 4 + (torch.log(n.float() / 4) / math.log(8) * 4).to(torch.long)
        bucket = torch.where(n < 4, n, torch.min(large, torch.full_like(large, 7)))
        bias = self.bias(bucket).reshape(1, 1, s, s)
        h = x.view(1, s, self.heads, -1).transpose(1, 2)
        att = torch.softmax(torch.matmul(h, h.transpose(-1, -2)) * 0.25 + mask + bias, dim=-1)
        return torch.matmul(att, h)


XS = torch.randn(1, 10, 16, generator=torch.Generator().manual_seed(5))


def test_index_math_folds_exactly():
    model = PackedCausal().eval()
    wrapped = GpuRewriteWrapper(model, include=INDEXING + ["patch_mask_fill_exact"])
    with torch.no_grad():
        assert torch.equal(wrapped(XS), model(XS))
    assert "patch_fold_index_math" in {c.rewrite for c in wrapped.changes}
    assert PATCHES["patch_fold_index_math"].exact and PATCHES["patch_fold_index_math"].default


@pytest.mark.gpu
def test_index_math_plain_walls_and_default_pass_on_gpu(gpu, tmp_path):
    plain = convert_for_gpu(PackedCausal(), (XS,), tmp_path / "plain.tflite", patches=False)
    ops = read_model_info(plain.path).op_histogram()
    assert "ABS" in ops, ops            # (the converter folds this toy's gather and cumsum; the LLMs' it does not)
    assert plain.verdict != "PASS", plain.summary()
    fixed = convert_for_gpu(PackedCausal(), (XS,), tmp_path / "fixed.tflite", fallback=False)
    ops = read_model_info(fixed.path).op_histogram()
    assert not {"GATHER", "GATHER_ND", "CUMSUM", "ABS", "SELECT", "SELECT_V2"} & set(ops), ops
    assert "patch_fold_index_math" in fixed.kept, fixed.summary()
    assert fixed.ok, fixed.summary()
    print("\n[llvmpipe fp16]", fixed.report.summary)


def test_a_meshgrid_of_aranges_folds_to_a_constant(tmp_path):
    """torchvision RAFT's coordinate grid: meshgrid of aranges, stacked and repeated (plain: BROADCAST_TO)."""
    from litert_gpu_toolkit.lowering.export import export_tflite
    from torch_helpers import Fn

    def coords(x):
        grid = torch.meshgrid(torch.arange(x.shape[2]), torch.arange(x.shape[3]), indexing="ij")
        return x + torch.stack(grid[::-1], dim=0).float()[None].repeat(x.shape[0], 1, 1, 1)

    x = torch.randn(1, 2, 6, 7)
    model = Fn(coords).eval()
    wrapped = GpuRewriteWrapper(model)
    with torch.no_grad():
        assert torch.equal(wrapped(x), model(x))
    plain = read_model_info(export_tflite(model, (x,), tmp_path / "plain.tflite")).op_histogram()
    fixed = read_model_info(export_tflite(wrapped, (x,), tmp_path / "fixed.tflite")).op_histogram()
    assert "BROADCAST_TO" in plain and set(fixed) == {"ADD"}, (plain, fixed)


class SegmentsAndShift(nn.Module):
    """XLNet: a segment matrix one-hot encoded from the runtime token types, and a relative shift that keeps the
    first klen positions with index_select by an arange."""

    def forward(self, x, token_type_ids):                     # x [B, H, S, 2S], token_type_ids [B, S]
        seg = (token_type_ids[:, :, None] != token_type_ids[:, None, :]).long()
        onehot = nn.functional.one_hot(seg, num_classes=2).to(x.dtype)              # [B, S, S, 2]
        kept = torch.index_select(x, 3, torch.arange(x.shape[2], dtype=torch.long))  # [B, H, S, S]
        return kept + onehot[..., 1][:, None] - onehot[..., 0][:, None]


def _segment_inputs():
    g = torch.Generator().manual_seed(5)
    return torch.randn(2, 2, 6, 12, generator=g), torch.randint(0, 2, (2, 6), generator=g)


def test_one_hot_and_index_select_by_arange_are_exact():
    with torch.no_grad():
        args = _segment_inputs()
        assert torch.equal(GpuRewriteWrapper(SegmentsAndShift(), include=ONLY)(*args), SegmentsAndShift()(*args))
        from litert_gpu_toolkit.rewrites.gather_nd.arange_index import _one_hot

        seg = torch.randint(0, 5, (3, 4), generator=G)
        assert torch.equal(_one_hot(seg, 5), nn.functional.one_hot(seg, 5))


@pytest.mark.gpu
def test_one_hot_and_index_select_plain_walls_and_default_pass_on_gpu(gpu, tmp_path):
    args = _segment_inputs()
    plain = convert_for_gpu(SegmentsAndShift(), args, tmp_path / "plain.tflite", patches=False)
    assert plain.verdict == "CONVERT_FAIL" and "_assert_async" in plain.summary(), plain.summary()
    fixed = convert_for_gpu(SegmentsAndShift(), args, tmp_path / "fixed.tflite", only=ONLY)
    assert fixed.ok, fixed.summary()
    ops = read_model_info(fixed.path).op_histogram()
    assert not {"ONE_HOT", "GATHER", "GATHER_ND"} & set(ops), ops
