"""The graph pass (`litert_gpu_toolkit.legalize`): each rule exact in torch (bound stated per test), the op it
targets gone from the graph, and -- on the GPU -- the most common BERT call (`input_ids` + a padded
`attention_mask`, no `token_type_ids`) strict GPU-only through `convert_for_gpu`, at batch 1 and 2
(software GPU: llvmpipe, ai-edge-litert 2.3.0)."""
import pytest
import torch
import torch.nn.functional as F

from litert_gpu_toolkit import ConvertOptions, convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.legalize import NotLegal, legalize

aten = torch.ops.aten


def _targets(legal) -> set:
    return {n.target for n in legal.module.graph.nodes if n.op == "call_function"}


class BufferExpand(torch.nn.Module):
    """HF's token-type path: a buffer expanded to the batch, looked up in an embedding table."""

    def __init__(self):
        super().__init__()
        self.register_buffer("ids", torch.zeros(1, 32, dtype=torch.long))
        self.table = torch.nn.Embedding(2, 8)

    def forward(self, x):                                   # x [B, S, 8]
        ids = self.ids[:, : x.shape[1]].expand(x.shape[0], x.shape[1])
        return x + self.table(ids)


def test_constant_expand_and_lookup_are_folded_bit_exact():
    m, x = BufferExpand().eval(), torch.randn(2, 16, 8)
    legal = legalize(m, (x,))
    assert aten.expand.default not in _targets(legal) and aten.embedding.default not in _targets(legal)
    assert any("folded constant" in d for d in legal.done)
    assert torch.equal(legal.module(x), m(x))              # bound: bit-exact (the same torch call on the same numbers)


class RuntimeExpand(torch.nn.Module):
    def forward(self, x, y):                                # x [B, 1, S], y [B, 5, S]: the expand feeds a concat
        return torch.cat([x.expand(-1, 5, -1), y], dim=2) * 2


def test_runtime_expands_become_concatenations_bit_exact():
    m, x, y = RuntimeExpand().eval(), torch.randn(2, 1, 7), torch.randn(2, 5, 7)
    legal = legalize(m, (x, y))
    assert aten.expand.default not in _targets(legal) and aten.cat.default in _targets(legal)
    assert torch.equal(legal.module(x, y), m(x, y))       # bound: bit-exact (copies of the same elements)


class BoolMaskAttention(torch.nn.Module):
    """A key-padding mask from an integer attention_mask, ANDed with a constant bool mask, as HF builds it."""

    def __init__(self, s: int):
        super().__init__()
        self.register_buffer("keep", torch.ones(1, 1, s, 1, dtype=torch.bool))

    def forward(self, q, k, v, attention_mask):
        pad = attention_mask.to(torch.bool)[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.keep & pad)


def test_bool_attention_mask_becomes_an_additive_float_mask():
    s = 6
    m = BoolMaskAttention(s).eval()
    q, k, v = (torch.randn(2, 3, s, 4) for _ in range(3))
    mask = torch.ones(2, s, dtype=torch.long)
    mask[1, 4:] = 0
    legal = legalize(m, (q, k, v, mask))
    bools = [n for n in legal.module.graph.nodes if n.op == "call_function"
             and isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].dtype == torch.bool
             and any(u.target is aten.scaled_dot_product_attention.default for u in n.users)]
    assert not bools, "the attention still reads a bool mask"
    # bound: a masked key's weight is exp(-1e4 + ...) = 0 in fp32, as with the bool mask: equal to fp32 rounding
    torch.testing.assert_close(legal.module(q, k, v, mask), m(q, k, v, mask), rtol=1e-6, atol=1e-6)


def test_a_fully_masked_row_is_refused_not_changed():
    s = 4
    m = BoolMaskAttention(s).eval()
    q, k, v = (torch.randn(1, 2, s, 4) for _ in range(3))
    with pytest.raises(NotLegal, match="differs"):          # the bool mask gives NaN there; -1e4 would not
        legalize(m, (q, k, v, torch.zeros(1, s, dtype=torch.long)))


def test_what_the_pass_cannot_legalize_is_named_with_its_source_line():
    class Rank5(torch.nn.Module):
        def forward(self, x):                                # x [2, 3, 1, 4, 5] -> expand to rank 5, returned
            return x.expand(2, 3, 6, 4, 5) * 2

    legal = legalize(Rank5().eval(), (torch.randn(2, 3, 1, 4, 5),))
    assert any("rank 5 output" in line and "test_legalize.py" in line for line in legal.left), legal.left


def test_the_pass_is_a_rewrite_name_options_accept():
    assert ConvertOptions(include=("legalize",)).include == ("legalize",)
    assert ConvertOptions(exclude=("legalize",)).exclude == ("legalize",)


@pytest.mark.parametrize("batch", [1, 2])
def test_bert_called_with_input_ids_and_attention_mask_is_gpu_only(gpu, tmp_path, batch):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128)
    torch.manual_seed(0)
    model = transformers.BertModel(cfg).eval()
    ids = torch.randint(0, 500, (batch, 16))
    mask = torch.ones_like(ids)
    mask[-1, 11:] = 0                                       # the last row padded
    result = convert_for_gpu(model, {"input_ids": ids, "attention_mask": mask}, tmp_path / "bert.tflite",
                             include=("legalize",), diagnose_budget_s=0)
    assert result.ok, result.summary()
    assert "legalize" in {c.rewrite for c in result.changes}, result.summary()
    info = read_model_info(tmp_path / "bert.tflite")
    assert not {"BROADCAST_TO", "GATHER_ND", "LOGICAL_AND", "SELECT_V2"} & set(info.op_histogram())


class ConstantGather(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("idx", torch.tensor([0, 1, 2, 5, 6, -1]))

    def forward(self, x):                                   # x [2, 8, 3]
        return x.index_select(1, self.idx % 8) * 2, x[:, self.idx]


def test_a_gather_with_constant_indices_becomes_slices_bit_exact():
    m, x = ConstantGather().eval(), torch.randn(2, 8, 3)
    legal = legalize(m, (x,))
    assert not {aten.index_select.default, aten.index.Tensor} & _targets(legal)
    assert any("slices" in d for d in legal.done), legal.done
    for got, want in zip(legal.module(x), m(x)):
        assert torch.equal(got, want)                      # bound: bit-exact (copies)


@pytest.mark.parametrize("make, inputs, walls", [
    (ConstantGather, lambda: (torch.randn(2, 8, 3),), {"GATHER", "GATHER_ND"}),
    (RuntimeExpand, lambda: (torch.randn(2, 1, 7), torch.randn(2, 5, 7)), {"BROADCAST_TO"}),
])
def test_the_pass_alone_makes_each_graph_gpu_only(gpu, tmp_path, make, inputs, walls):
    """Only the pass (no spelling handler, no module patch): the wall is gone and the GPU matches torch. Plain
    conversion of each keeps the wall (GATHER_ND + SELECT_V2; BROADCAST_TO), so the pass is what removes it."""
    torch.manual_seed(0)
    result = convert_for_gpu(make().eval(), inputs(), tmp_path / "m.tflite", only=("legalize",), diagnose_budget_s=0)
    assert result.ok, result.summary()
    assert not walls & set(read_model_info(tmp_path / "m.tflite").op_histogram())


class BoolMaskCast(torch.nn.Module):
    """Eager attention's form: the bool mask cast to float, then made additive."""

    def __init__(self, s: int):
        super().__init__()
        self.register_buffer("keep", torch.ones(1, 1, s, 1, dtype=torch.bool))

    def forward(self, scores, attention_mask):
        pad = attention_mask.to(torch.bool)[:, None, None, :]
        additive = (1.0 - (self.keep & pad).to(torch.float32)) * -1e4
        return torch.softmax(scores + additive, dim=-1)


def test_a_bool_mask_cast_to_float_becomes_float_arithmetic_bit_exact():
    m, scores = BoolMaskCast(5).eval(), torch.randn(2, 3, 5, 5)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    legal = legalize(m, (scores, mask))
    assert any("cast to float" in d for d in legal.done), legal.done
    assert not {aten.__and__.Tensor, aten.logical_and.default} & _targets(legal)
    assert torch.equal(legal.module(scores, mask), m(scores, mask))   # bound: bit-exact ({0, 1} products)


class OneHotTimesMask(torch.nn.Module):
    """A constant table times a runtime vector it broadcasts over: the shape the constants rule itself makes when
    it folds a one-hot index (`onehot[16, 16] * mask[1, 16]`), summed back to a vector."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(16, 16, generator=torch.Generator().manual_seed(3)))

    def forward(self, x):                                   # x [1, 16]
        return (self.table * x).sum(1)


def test_an_elementwise_op_on_a_rank_2_constant_is_computed_at_rank_4_bit_exact():
    m, x = OneHotTimesMask().eval(), torch.randn(1, 16)
    legal = legalize(m, (x,))
    assert any("at rank 4" in d for d in legal.done), legal.done
    from torch.fx.passes.shape_prop import ShapeProp

    ShapeProp(legal.module).propagate(x)
    ranks = {len(n.meta["tensor_meta"].shape) for n in legal.module.graph.nodes
             if n.op == "call_function" and n.target is aten.mul.Tensor}
    assert ranks == {4}, ranks
    assert torch.equal(legal.module(x), m(x))              # bound: bit-exact (the same products, other views)


def test_the_rank_4_form_fixes_the_silent_miscompute_on_the_gpu(gpu, tmp_path):
    """Plain, [16, 16] * [1, 16] runs GPU-only with wrong numbers (software GPU, fp16 and fp32); the pass alone
    makes it right."""
    x = torch.randn(1, 16)
    plain = convert_for_gpu(OneHotTimesMask().eval(), (x,), tmp_path / "plain.tflite", patches=False,
                            diagnose_budget_s=0)
    assert plain.verdict == "NUMERICS_FAIL", plain.summary()
    fixed = convert_for_gpu(OneHotTimesMask().eval(), (x,), tmp_path / "m.tflite", only=("legalize",),
                            diagnose_budget_s=0, fallback=False)
    assert fixed.ok, fixed.summary()


class ComparedMask(torch.nn.Module):
    """A runtime comparison ANDed with a mask made from constants only (HF's `new_ones(...) & causal` shapes):
    the constant side folds, the comparison stays a comparison, the AND becomes a product."""

    def __init__(self, s: int):
        super().__init__()
        self.register_buffer("pos", torch.arange(s))

    def forward(self, scores, keep):                        # keep [B, S] float {0, 1}
        window = (self.pos[None, :] <= self.pos[:, None])[None, None]          # constant bool [1, 1, S, S]
        allowed = window & (keep[:, None, None, :] > 0.5)
        return torch.softmax(scores + (1.0 - allowed.to(torch.float32)) * -1e4, dim=-1)


def test_a_runtime_comparison_and_a_constant_mask_become_float_arithmetic_bit_exact():
    s = 6
    m, scores = ComparedMask(s).eval(), torch.randn(2, 2, s, s)
    keep = torch.tensor([[1.0] * s, [1.0] * 4 + [0.0] * 2])
    legal = legalize(m, (scores, keep))
    assert not {aten.__and__.Tensor, aten.logical_and.default, aten.le.Tensor} & _targets(legal), legal.done
    assert any("folded constant" in d for d in legal.done) and any("cast to float" in d for d in legal.done)
    assert torch.equal(legal.module(scores, keep), m(scores, keep))   # bound: bit-exact ({0, 1} products)


class HighRank(torch.nn.Module):
    """Rank-5 and rank-6 values between rank-4 inputs and outputs, one of each kind the rank rule handles."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(5, 5)

    def forward(self, x, y):                                # x [2, 3, 4, 5], y [2, 4, 5]
        z = torch.stack([x, x * 2], 1).view(2, 2, 3, 4, 5)                             # stack, rank 5
        a = z.softmax(-1).permute(0, 2, 1, 4, 3).sum(1)                                 # softmax, permute, sum
        b = (torch.split(z, 1, 2)[0] + y.view(2, 1, 1, 4, 5)).mean(2)                  # split, broadcast add
        w = z.view(2, 2, 3, 2, 2, 5).permute(5, 3, 0, 4, 2, 1).reshape(5, 2, 2, 12)     # rank-6 permute, 6 blocks
        c = F.pad(z, (1, 1, 0, 0, 2, 0)).mean((-1, -2))                                 # pad of two axes
        d = self.lin(z).amax(1)                                                         # linear, amax
        return a, b * 3, w.exp(), c, d


def _rank_above_4(gm) -> list:
    return [n.name for n in gm.graph.nodes if n.op == "call_function" and n.target is not aten.reshape.default
            and len(getattr(n.meta.get("val"), "shape", ())) > 4]


def test_rank_5_and_6_values_are_computed_at_rank_4_bit_exact():
    m, x, y = HighRank().eval(), torch.randn(2, 3, 4, 5), torch.randn(2, 4, 5)
    legal = legalize(m, (x, y))
    assert any("rank <= 4" in d for d in legal.done), legal.done
    assert not _rank_above_4(legal.module) and not legal.left, (_rank_above_4(legal.module), legal.left)
    for got, want in zip(legal.module(x, y), m(x, y)):
        assert torch.equal(got, want)                      # bound: bit-exact (the same elements, merged views)


def test_the_rank_rule_alone_takes_a_rank_6_graph_onto_the_gpu(gpu, tmp_path):
    """Plain: 10 op types rejected at rank > 4 (3/19 ops on the GPU, software GPU); the pass alone: GPU-only."""
    x, y = torch.randn(2, 3, 4, 5), torch.randn(2, 4, 5)
    plain = convert_for_gpu(HighRank().eval(), (x, y), tmp_path / "plain.tflite", patches=False, diagnose_budget_s=0)
    assert plain.verdict == "FALLBACK", plain.summary()
    result = convert_for_gpu(HighRank().eval(), (x, y), tmp_path / "m.tflite", only=("legalize",),
                             fallback=False, diagnose_budget_s=0)
    assert result.ok, result.summary()


class MaskBuilder(torch.nn.Module):
    """HF's mask builder in small: the runtime padding mask indexed by constant batch / key aranges (GATHER_ND),
    ANDed with a constant mask and filled with finfo.min by `where` (SELECT_V2 on a bool mask)."""

    def forward(self, scores, attention_mask):              # scores [B, H, S, S], attention_mask [B, S] int
        b, s = attention_mask.shape
        batch = torch.arange(b)[:, None, None, None]
        kv = torch.arange(s)[None, None, None, :]
        keep = attention_mask.bool()[batch, kv] & torch.ones(1, 1, s, s, dtype=torch.bool)
        fill = torch.where(keep, 0.0, torch.finfo(torch.float32).min)
        return torch.softmax(scores + fill, dim=-1)


def test_a_runtime_mask_gathered_by_constant_indices_and_filled_by_where_becomes_slices_and_arithmetic():
    m, scores = MaskBuilder().eval(), torch.randn(2, 2, 6, 6)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    legal = legalize(m, (scores, mask))
    assert not {aten.index.Tensor, aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf,
                aten.__and__.Tensor} & _targets(legal), legal.done
    assert any("slices" in d for d in legal.done) and any("where" in d for d in legal.done), legal.done
    # bound: exact -- the copies are bit-exact, each `where` output is the selected value plus exact zeros
    # (the finfo.min fill is clamp(log(0), min=c) = c, never c * 0)
    assert torch.equal(legal.module(scores, mask), m(scores, mask))


def test_the_pass_alone_takes_the_users_bert_call_onto_the_gpu(gpu, tmp_path):
    """No spelling handler and no module swap: `BertModel(input_ids=..., attention_mask=...)`, batch 2 with one
    padded row, strict GPU-only and matching torch (the zoo's bert row: 153/153 ops on the software GPU)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128)
    torch.manual_seed(0)
    model = transformers.BertModel(cfg).eval()
    ids = torch.randint(0, 500, (2, 16))
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    result = convert_for_gpu(model, {"input_ids": ids, "attention_mask": mask}, tmp_path / "bert.tflite",
                             only=("legalize",), fallback=False, diagnose_budget_s=0)
    assert result.ok, result.summary()
    assert not {"BROADCAST_TO", "GATHER_ND", "LOGICAL_AND", "SELECT_V2"} & set(
        read_model_info(tmp_path / "bert.tflite").op_histogram())


class ConstantLeftMatmul(torch.nn.Module):
    """A learned table on the left of a batched matmul (the GPU takes a constant only on the right)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(2, 16, 16, generator=torch.Generator().manual_seed(5)))

    def forward(self, x):                                   # x [2, 16, 32]
        return torch.bmm(self.table, x)


def test_a_constant_left_matmul_runs_transposed():
    m, x = ConstantLeftMatmul().eval(), torch.randn(2, 16, 32)
    legal = legalize(m, (x,))
    assert any("constant left operand" in d for d in legal.done), legal.done
    # bound: fp32 rounding (the same dot products; the order of the sum may differ)
    torch.testing.assert_close(legal.module(x), m(x), rtol=1e-5, atol=1e-5)


def test_the_transposed_matmul_runs_on_the_gpu_where_the_plain_one_is_rejected(gpu, tmp_path):
    x = torch.randn(2, 16, 32)
    plain = convert_for_gpu(ConstantLeftMatmul().eval(), (x,), tmp_path / "p.tflite", patches=False,
                            diagnose_budget_s=0)
    assert plain.verdict == "FALLBACK", plain.summary()          # BATCH_MATMUL rejected
    fixed = convert_for_gpu(ConstantLeftMatmul().eval(), (x,), tmp_path / "m.tflite", only=("legalize",),
                            fallback=False, diagnose_budget_s=0)
    assert fixed.ok, fixed.summary()


class PyramidPool(torch.nn.Module):
    """PSPNet / UperNet's pyramid: adaptive average pools to 1, 2, 3 and 6 cells of a 16 x 16 map, upsampled back."""

    def forward(self, x):                                   # x [1, C, 16, 16]
        outs = [F.interpolate(F.adaptive_avg_pool2d(x, s), size=x.shape[-2:], mode="bilinear", align_corners=False)
                for s in (1, 2, 3, 6)]
        return torch.cat([x, *outs], dim=1)


def test_uneven_adaptive_pools_become_means_of_slices():
    m, x = PyramidPool().eval(), torch.randn(1, 4, 16, 16)
    legal = legalize(m, (x,))
    assert any("uneven cells" in d for d in legal.done), legal.done
    torch.testing.assert_close(legal.module(x), m(x), rtol=1e-5, atol=1e-6)   # bound: fp32 rounding


def test_the_pyramid_pool_runs_on_the_gpu(gpu, tmp_path):
    """Plain: 9 op types rejected (rank-5 ADD, BROADCAST_TO, GATHER_ND, ...), 7/73 ops on the software GPU."""
    x = torch.randn(1, 4, 16, 16)
    plain = convert_for_gpu(PyramidPool().eval(), (x,), tmp_path / "p.tflite", patches=False, diagnose_budget_s=0)
    assert plain.verdict == "FALLBACK", plain.summary()
    result = convert_for_gpu(PyramidPool().eval(), (x,), tmp_path / "m.tflite", only=("legalize",),
                             fallback=False, diagnose_budget_s=0)
    assert result.ok, result.summary()


class PositionTable(torch.nn.Module):
    """GPT-J's rotary table read at runtime positions: a constant [N, D] table indexed by position_ids."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(64, 8, generator=torch.Generator().manual_seed(7)))

    def forward(self, x, position_ids):                     # x [B, S, 8], position_ids [B, S]
        return x * self.table[position_ids]


def test_a_constant_table_read_at_runtime_ids_becomes_an_embedding_lookup():
    m, x, pos = PositionTable().eval(), torch.randn(1, 1, 8), torch.tensor([[37]])
    legal = legalize(m, (x, pos))
    assert aten.index.Tensor not in _targets(legal) and aten.embedding.default in _targets(legal), legal.done
    assert torch.equal(legal.module(x, pos), m(x, pos))    # bound: bit-exact for ids in [0, N)


def test_the_lookup_runs_on_the_gpu(gpu, tmp_path):
    x, pos = torch.randn(1, 1, 8), torch.tensor([[37]])
    plain = convert_for_gpu(PositionTable().eval(), (x, pos), tmp_path / "p.tflite", patches=False,
                            diagnose_budget_s=0)
    assert plain.verdict == "FALLBACK", plain.summary()                # GATHER_ND
    result = convert_for_gpu(PositionTable().eval(), (x, pos), tmp_path / "m.tflite", only=("legalize",),
                             fallback=False, diagnose_budget_s=0)
    assert result.ok, result.summary()


class RelativeGather(torch.nn.Module):
    """DeBERTa's content-to-position gather: scores over 2k relative buckets gathered at (q - k + span)."""

    def __init__(self, s: int = 6, span: int = 4):
        super().__init__()
        rel = torch.arange(s)[:, None] - torch.arange(s)[None, :]
        self.register_buffer("idx", (rel + span).clamp(0, 2 * span - 1)[None, None].expand(2, 3, s, s).clone())

    def forward(self, c2p):                                  # c2p [B, H, S, 2 * span]
        return torch.gather(c2p, -1, self.idx) * 2


def test_a_gather_by_constant_relative_positions_becomes_a_one_hot_matmul():
    m, x = RelativeGather().eval(), torch.randn(2, 3, 6, 8)
    legal = legalize(m, (x,))
    assert aten.gather.default not in _targets(legal) and any("one-hot" in d for d in legal.done), legal.done
    assert torch.equal(legal.module(x), m(x))              # bound: bit-exact for finite values (x * 1 + zeros)


def test_the_one_hot_gather_runs_on_the_gpu(gpu, tmp_path):
    x = torch.randn(2, 3, 6, 8)
    plain = convert_for_gpu(RelativeGather().eval(), (x,), tmp_path / "p.tflite", patches=False,
                            diagnose_budget_s=0)
    assert plain.verdict == "FALLBACK", plain.summary()                # GATHER_ND
    result = convert_for_gpu(RelativeGather().eval(), (x,), tmp_path / "m.tflite", only=("legalize",),
                             fallback=False, diagnose_budget_s=0)
    assert result.ok, result.summary()


class LongRelativeGather(torch.nn.Module):
    """The same gather at a speech encoder's length (400 frames, 256 buckets, log-spaced far positions like
    DeBERTa's make_log_bucket_position): its [S, 2 * span, S] one-hot would be 82 M entries."""

    def __init__(self, sq: int = 400, sk: int = 400, span: int = 256, heads: int = 4):
        super().__init__()
        rel = torch.arange(sq)[:, None] - torch.arange(sk)[None, :]
        mid = span // 2
        far = torch.sign(rel) * (mid + torch.ceil(torch.log(rel.abs().clamp(min=1) / mid) / 4.0 * (mid - 1)))
        bucket = torch.where(rel.abs() <= mid, rel, far.long())
        self.register_buffer("idx", (bucket + span).clamp(0, 2 * span - 1)[None].expand(heads, sq, sk).clone())

    def forward(self, c2p):                                  # c2p [H, Sq, 2 * span]
        return torch.gather(c2p, -1, self.idx) * 2


@pytest.mark.parametrize("sq, sk", [(400, 400), (7, 300), (300, 5)])
def test_a_long_relative_gather_is_read_off_one_diagonal_one_hot(sq, sk):
    m = LongRelativeGather(sq, sk).eval()
    x = torch.randn(4, sq, 512)
    x[0, 0, :3] = torch.tensor([3e38, -0.0, 1e-40])         # copies keep huge, signed-zero and subnormal values
    legal = legalize(m, (x,))
    assert aten.gather.default not in _targets(legal), legal.left
    assert torch.equal(legal.module(x), m(x))              # bound: bit-exact for finite values (x * 1 + zeros)


def test_a_gather_whose_index_is_not_diagonal_stays_and_is_named():
    m = LongRelativeGather().eval()
    m.idx[:, 5, 9] = 0                                       # one entry off its diagonal
    legal = legalize(m, (torch.randn(4, 400, 512),))
    assert aten.gather.default in _targets(legal) and any("one-hot of" in s for s in legal.left), legal.left


def test_the_diagonal_gather_runs_on_the_gpu(gpu, tmp_path):
    x = torch.randn(4, 400, 512)
    result = convert_for_gpu(LongRelativeGather().eval(), (x,), tmp_path / "m.tflite", only=("legalize",),
                             fallback=False, diagnose_budget_s=0)
    assert result.ok, result.summary()
    assert not {"GATHER", "GATHER_ND"} & set(read_model_info(tmp_path / "m.tflite").op_histogram())


def test_a_rule_that_raises_is_refused_not_a_crash(monkeypatch):
    import types

    from litert_gpu_toolkit.legalize import graph

    def broken(gm):
        raise RuntimeError("view size is not compatible")

    monkeypatch.setattr(graph, "RULES", (types.SimpleNamespace(__name__="legalize.broken", apply=broken),))
    with pytest.raises(NotLegal, match="RuntimeError in rule broken"):
        legalize(RuntimeExpand().eval(), (torch.randn(2, 1, 7), torch.randn(2, 5, 7)))


class UnitSoftmax(torch.nn.Module):
    """SwiftFormer's additive attention: a softmax of [B, N, 1] scores over the last axis (of size 1)."""

    def __init__(self):
        super().__init__()
        self.score = torch.nn.Linear(8, 1)

    def forward(self, x):                                   # x [B, N, 8]
        return torch.tanh(x * self.score(x).softmax(dim=-1))


def test_a_softmax_over_one_element_is_one():
    m, x = UnitSoftmax().eval(), torch.randn(1, 16, 8)
    legal = legalize(m, (x,))
    assert aten.softmax.int not in _targets(legal) and aten._softmax.default not in _targets(legal), legal.done
    assert torch.equal(legal.module(x), m(x))              # bound: bit-exact (1 for finite scores)


def test_the_unit_softmax_runs_on_the_gpu(gpu, tmp_path):
    x = torch.randn(1, 16, 8)
    plain = convert_for_gpu(UnitSoftmax().eval(), (x,), tmp_path / "p.tflite", patches=False, diagnose_budget_s=0)
    assert plain.verdict == "FALLBACK", plain.summary()                # DIV with identical inputs
    result = convert_for_gpu(UnitSoftmax().eval(), (x,), tmp_path / "m.tflite", only=("legalize",),
                             fallback=False, diagnose_budget_s=0)
    assert result.ok, result.summary()


class BroadcastMatmul(torch.nn.Module):
    """DeBERTa's content-to-position scores: a batch of queries times position keys shared by the batch, and the
    transposed case (a shared table on the left of a batch)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("pos_key", torch.randn(1, 4, 8, 32, generator=torch.Generator().manual_seed(9)))
        self.register_buffer("table", torch.randn(1, 4, 16, 8, generator=torch.Generator().manual_seed(10)))

    def forward(self, q, k):                                # q [B, 4, 16, 8], k [B, 4, 8, 5]
        return torch.matmul(q, self.pos_key) * 2, torch.matmul(self.table, k) * 2


def test_a_matmul_whose_batch_broadcasts_is_folded_into_rows_or_columns():
    m, q, k = BroadcastMatmul().eval(), torch.randn(2, 4, 16, 8), torch.randn(2, 4, 8, 5)
    legal = legalize(m, (q, k))
    assert any("batch axes broadcast" in d for d in legal.done), legal.done
    for got, want in zip(legal.module(q, k), m(q, k)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)      # bound: fp32 rounding


def test_the_folded_matmuls_run_on_the_gpu(gpu, tmp_path):
    q, k = torch.randn(2, 4, 16, 8), torch.randn(2, 4, 8, 5)
    plain = convert_for_gpu(BroadcastMatmul().eval(), (q, k), tmp_path / "p.tflite", patches=False,
                            diagnose_budget_s=0)
    assert plain.verdict == "FALLBACK", plain.summary()                # BROADCAST_TO, BATCH_MATMUL
    result = convert_for_gpu(BroadcastMatmul().eval(), (q, k), tmp_path / "m.tflite", only=("legalize",),
                             fallback=False, diagnose_budget_s=0)
    assert result.ok, result.summary()


class HiddenAndScaled(torch.nn.Module):
    """Two outputs, one computed from the other by a constant: hidden states and a scaled / shifted copy."""

    def __init__(self, form: str):
        super().__init__()
        self.fc, self.form = torch.nn.Linear(16, 4), form

    def forward(self, x):
        y = self.fc(x)
        return y, (y * 2.0 if self.form == "mul" else y + 1.0)


@pytest.mark.parametrize("form", ["mul", "add"])
def test_a_returned_fc_result_fed_to_a_constant_op_is_returned_negated_twice(form):
    m, x = HiddenAndScaled(form).eval(), torch.randn(1, 8, 16)
    legal = legalize(m, (x,))
    assert any("-(-y)" in d for d in legal.done), legal.done
    output = next(n for n in legal.module.graph.nodes if n.op == "output")
    assert all(n.target is not aten.linear.default for n in output.all_input_nodes)   # the FC result is not returned
    got, want = legal.module(x), m(x)
    assert all(torch.equal(a, b) for a, b in zip(got, want))                             # bound: bit-exact


def test_a_returned_fc_result_with_a_runtime_or_unary_consumer_is_left_alone():
    class Runtime(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 4)

        def forward(self, x):
            y = self.fc(x)
            return y, y * y, torch.tanh(y)

    legal = legalize(Runtime().eval(), (torch.randn(1, 8, 16),))
    assert not any("-(-y)" in d for d in legal.done)


@pytest.mark.gpu
@pytest.mark.parametrize("form", ["mul", "add"])
def test_a_returned_fc_result_fed_to_a_constant_op_is_right_on_the_gpu(gpu, tmp_path, form):
    """Without the rule the returned FC result is wrong at full residency (corr -0.13 .. 0.61 vs LiteRT's CPU,
    fp16 and fp32; llvmpipe, ai-edge-litert 2.3.0); with it both outputs match."""
    torch.manual_seed(0)
    m, x = HiddenAndScaled(form), torch.randn(1, 8, 16)
    plain = convert_for_gpu(m, (x,), tmp_path / "plain.tflite", exclude=("legalize",), fallback=False,
                            diagnose_budget_s=0)
    assert plain.verdict == "NUMERICS_FAIL", f"the GPU no longer shows the fault: {plain.summary()}"
    fixed = convert_for_gpu(m, (x,), tmp_path / "fixed.tflite", fallback=False, diagnose_budget_s=0)
    assert fixed.verdict == "PASS", fixed.summary()
    assert read_model_info(tmp_path / "fixed.tflite").op_histogram().get("MUL", 0) >= 2


class MaskedAssign(torch.nn.Module):
    """`x[mask] = v` two ways: a full-shape mask with a scalar, a leading-axes mask with a per-row value."""

    def forward(self, x):
        y = x * 1.0
        y[y < -0.5] = 0.25
        z = x * 2.0
        z[z[:, :, 0, 0] > 0] = torch.arange(6.0)
        return y, z


def test_a_masked_assignment_becomes_float_arithmetic_bit_exact():
    m, x = MaskedAssign().eval(), torch.randn(1, 4, 6, 6)
    legal = legalize(m, (x,))
    assert any("masked assignment -> where x2" in d for d in legal.done), legal.done
    assert not {aten.index_put.default, aten.where.self} & _targets(legal)
    assert all(torch.equal(a, b) for a, b in zip(legal.module(x), m(x)))       # bound: bit-exact (a selection)


class CausalFill(torch.nn.Module):
    """A constant causal mask filled with -inf over runtime scores (SELECT_V2 whose kernel the GPU cannot build)."""

    def forward(self, x):
        causal = torch.ones(6, 6, dtype=torch.bool).triu(1)
        return x.masked_fill(causal, float("-inf")).softmax(-1)


def test_a_constant_mask_filled_with_minus_inf_becomes_arithmetic_exactly():
    m, x = CausalFill().eval(), torch.randn(1, 4, 6, 6)
    legal = legalize(m, (x,))
    assert not {aten.masked_fill.Scalar, aten.where.self, aten.where.ScalarSelf} & _targets(legal)
    got, want = legal.module(x), m(x)
    assert torch.equal(torch.isinf(got), torch.isinf(want)) and torch.equal(got, want)   # bound: bit-exact


@pytest.mark.gpu
@pytest.mark.parametrize("make", [MaskedAssign, CausalFill])
def test_bool_masks_are_gpu_only_with_the_pass_alone(gpu, tmp_path, make):
    """Plain: a masked assignment does not convert (a bool index), a constant causal fill does not compile on the
    GPU; with the pass alone (every spelling rewrite off, patch_select included) both are strict GPU-only and match
    torch (llvmpipe, ai-edge-litert 2.3.0)."""
    x = torch.randn(1, 4, 6, 6)
    plain = convert_for_gpu(make(), (x,), tmp_path / "plain.tflite", exclude=("legalize",), fallback=False,
                            diagnose_budget_s=0)
    assert plain.verdict in ("CONVERT_FAIL", "COMPILE_FAIL"), plain.summary()
    alone = convert_for_gpu(make(), (x,), tmp_path / "pass.tflite", only=("legalize",), fallback=False,
                            diagnose_budget_s=0)
    assert alone.verdict == "PASS", alone.summary()
    assert not {"SELECT", "SELECT_V2"} & set(read_model_info(alone.path).op_histogram())


class ScoresPlusConstantMask(torch.nn.Module):
    """Attention scores as `bmm(...).view(1, H, S, S) + mask[1, 1, S, S]` then softmax (XGLM's eager attention, with
    the causal mask folded to a constant): the converter drops the view, so the ADD reads a rank-3 runtime tensor
    against a rank-4 constant."""

    def __init__(self, s: int = 12):
        super().__init__()
        self.register_buffer("mask", torch.triu(torch.full((1, 1, s, s), torch.finfo(torch.float32).min), 1))

    def forward(self, q, k):                                 # [H, S, D]
        scores = torch.bmm(q, k.transpose(1, 2)).view(1, q.shape[0], q.shape[1], k.shape[1])
        return torch.softmax(torch.maximum(scores + self.mask, torch.tensor(torch.finfo(torch.float32).min)), -1)


def _qk():
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, 12, 16, generator=g), torch.randn(4, 12, 16, generator=g)


def test_a_leading_one_view_plus_a_rank_4_constant_is_computed_at_rank_3_bit_exact():
    m, (q, k) = ScoresPlusConstantMask().eval(), _qk()
    legal = legalize(m, (q, k))
    assert any("at rank 3" in d for d in legal.done), legal.done
    from torch.fx.passes.shape_prop import ShapeProp

    ShapeProp(legal.module).propagate(q, k)
    adds = [n for n in legal.module.graph.nodes if n.op == "call_function" and n.target is aten.add.Tensor]
    assert adds and all(len(n.meta["tensor_meta"].shape) == 3 for n in adds)
    assert all(len(a.meta["tensor_meta"].shape) == 3 for n in adds for a in n.args if isinstance(a, torch.fx.Node))
    assert torch.equal(legal.module(q, k), m(q, k))         # bound: bit-exact (the same sums, other views)


@pytest.mark.gpu
def test_the_rank_3_scores_plus_mask_is_right_on_the_gpu_where_plain_is_wrong(gpu, tmp_path):
    """llvmpipe, ai-edge-litert 2.3.0: plain is GPU-only with wrong numbers (fp16 and fp32); the pass alone is right."""
    q, k = _qk()
    plain = convert_for_gpu(ScoresPlusConstantMask().eval(), (q, k), tmp_path / "plain.tflite", patches=False,
                            diagnose_budget_s=0)
    assert plain.verdict == "NUMERICS_FAIL", plain.summary()
    fixed = convert_for_gpu(ScoresPlusConstantMask().eval(), (q, k), tmp_path / "m.tflite", only=("legalize",),
                            diagnose_budget_s=0, fallback=False)
    assert fixed.ok, fixed.summary()
    info = read_model_info(fixed.path)
    adds = [o for o in info.ops if o.op == "ADD"]
    assert adds
    for o in adds:                                          # the wall's form is gone: no rank-3 + rank-4 ADD
        assert len({len(info.tensor(i).shape) for i in o.inputs}) == 1, "operands of one rank"


class ConstantPositions(torch.nn.Module):
    """Reads and writes at integer positions known at export, and a bool-mask constant index."""

    def __init__(self, rows):
        super().__init__()
        self.register_buffer("rows", torch.tensor(rows))
        self.register_buffer("keep", torch.tensor([True, False, True, True]))

    def forward(self, x):                                   # x [4, 6]
        out = torch.zeros_like(x)
        out[self.rows] = x[self.rows] * 2
        return out + x[self.keep].sum(0)


@pytest.mark.parametrize("rows", [[0, 2, 3], [3, 0, 1, 2]])   # some rows written; every row, out of order
def test_assignment_at_constant_positions_becomes_a_where_bit_exact(rows):
    m, x = ConstantPositions(rows).eval(), torch.randn(4, 6)
    legal = legalize(m, (x,))
    assert not {aten.index_put.default, aten.index.Tensor} & _targets(legal), _targets(legal)
    assert any("assignment at constant positions" in d for d in legal.done), legal.done
    assert torch.equal(legal.module(x), m(x))              # bound: bit-exact (copies and a selection)


class UniformBufferRead(torch.nn.Module):
    """HF's token-type path with no token types passed: an all-zero buffer gathered at runtime position ids."""

    def __init__(self):
        super().__init__()
        self.register_buffer("types", torch.zeros(1, 32, dtype=torch.long))
        self.table = torch.nn.Embedding(2, 8)

    def forward(self, x, ids):                              # ids [B, S] runtime positions
        t = torch.gather(self.types.expand(ids.shape[0], -1), 1, ids)
        return x + self.table(t)


def test_a_runtime_read_of_a_uniform_constant_is_that_constant_bit_exact():
    m = UniformBufferRead().eval()
    x, ids = torch.randn(2, 5, 8), torch.randint(0, 32, (2, 5))
    legal = legalize(m, (x, ids))
    assert aten.gather.default not in _targets(legal) and not legal.left, legal.left
    assert torch.equal(legal.module(x, ids), m(x, ids))    # bound: bit-exact for ids in range


class LearnedQueryPool(torch.nn.Module):
    """An attention-pooling head (AIMv2, SigLIP): a learned query attends over the runtime tokens with SDPA. (The
    query is stored at the batch size so that the plain file shows this wall alone, not an expand's as well.)"""

    def __init__(self, c=32, heads=4):
        super().__init__()
        self.heads, self.query = heads, torch.nn.Parameter(torch.randn(2, 1, c))
        self.k, self.v = torch.nn.Linear(c, c), torch.nn.Linear(c, c)

    def forward(self, x):                                   # x [B, S, C]
        b, s, c = x.shape
        split = lambda t, n: t.reshape(b, n, self.heads, c // self.heads).transpose(1, 2)   # noqa: E731
        q = split(self.query, 1)
        y = F.scaled_dot_product_attention(q, split(self.k(x), s), split(self.v(x), s))
        return y.transpose(1, 2).reshape(b, c)


def test_attention_with_a_constant_query_is_written_out_to_fp32_rounding():
    torch.manual_seed(0)
    m, x = LearnedQueryPool().eval(), torch.randn(2, 9, 32)
    legal = legalize(m, (x,))
    assert aten.scaled_dot_product_attention.default not in _targets(legal), _targets(legal)
    want, got = m(x), legal.module(x)
    assert (want - got).abs().max() <= 1e-5 * want.abs().max()      # bound: fp32 rounding


def test_attention_with_a_constant_query_runs_gpu_only_legalized(gpu, tmp_path):
    torch.manual_seed(0)
    m, x = LearnedQueryPool().eval(), torch.randn(2, 9, 32)
    plain = convert_for_gpu(m, (x,), tmp_path / "p.tflite", patches=False, fallback=False, diagnose_budget_s=0)
    assert not plain.ok and "BATCH_MATMUL" in plain.summary(), plain.summary()
    result = convert_for_gpu(m, (x,), tmp_path / "m.tflite", only=("legalize",), fallback=False, diagnose_budget_s=0)
    assert result.ok, result.summary()


class ArgmaxPool(torch.nn.Module):
    """CLIP's text pooling: each row's hidden state at its highest token id (the end-of-text token)."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(50, 16)

    def forward(self, ids):                                 # ids [B, S]
        h = torch.tanh(self.table(ids))
        return h[torch.arange(h.shape[0]), ids.to(torch.int).argmax(dim=-1)]


IDS = torch.tensor([[3, 7, 49, 0, 0], [5, 48, 2, 9, 1]])


def test_a_runtime_position_per_row_becomes_a_one_hot_product_bit_exact():
    torch.manual_seed(0)
    m = ArgmaxPool().eval()
    legal = legalize(m, (IDS,))
    assert aten.index.Tensor not in _targets(legal) and not legal.left, legal.left
    assert torch.equal(legal.module(IDS), m(IDS))          # bound: bit-exact (x * 1 plus exact zeros)


def test_a_runtime_position_per_row_runs_gpu_only_legalized(gpu, tmp_path):
    torch.manual_seed(0)
    m = ArgmaxPool().eval()
    plain = convert_for_gpu(m, (IDS,), tmp_path / "p.tflite", patches=False, fallback=False, diagnose_budget_s=0)
    assert not plain.ok, plain.summary()
    result = convert_for_gpu(m, (IDS,), tmp_path / "m.tflite", only=("legalize",), fallback=False,
                             diagnose_budget_s=0)
    assert result.ok, result.summary()
    assert "GATHER_ND" not in read_model_info(tmp_path / "m.tflite").op_histogram()


class TrigramPad(torch.nn.Module):
    """MobileBERT's trigram embedding: the token vectors shifted one step each way with a zero pad, concatenated."""

    def forward(self, x):                                   # x [B, S, C], B > 1
        left = F.pad(x[:, 1:], (0, 0, 0, 1))
        right = F.pad(x[:, :-1], (0, 0, 1, 0))
        return torch.cat([left, x, right], dim=2) * 1.5


def test_a_rank3_pad_with_a_batch_runs_at_rank4_bit_exact():
    x = torch.randn(2, 15, 32)
    legal = legalize(TrigramPad(), (x,))
    pads = [n for n in legal.module.graph.nodes if n.target in (aten.constant_pad_nd.default, aten.pad.default)]
    assert pads and all(len(n.args[0].meta["val"].shape) == 4 for n in pads)
    assert torch.equal(legal.module(x), TrigramPad()(x))   # bound: bit-exact (views)


def test_a_rank3_pad_with_a_batch_is_right_on_the_gpu_legalized(gpu, tmp_path):
    torch.manual_seed(0)
    x = torch.randn(2, 15, 32)
    plain = convert_for_gpu(TrigramPad(), (x,), tmp_path / "p.tflite", patches=False, fallback=False,
                            diagnose_budget_s=0)
    assert plain.verdict == "NUMERICS_FAIL", plain.summary()           # GPU-only and wrong: the silent wall
    result = convert_for_gpu(TrigramPad(), (x,), tmp_path / "m.tflite", only=("legalize",), fallback=False,
                             diagnose_budget_s=0)
    assert result.ok, result.summary()
