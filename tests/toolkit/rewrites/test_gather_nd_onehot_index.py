"""Indexing with integer tensors (`patch_index_onehot`, opt-in): HF attention-mask building's
`padding_mask[batch_idx, kv_idx]` and table lookups `table[ids]` lower to GATHER_ND, which the GPU rejects."""
import pytest
import torch

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.rewrites.registry import load_rewrites
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.rewrites.gather_nd.onehot import _index_handler
from litert_gpu_toolkit.rewrites.gather_nd import index_onehot
from litert_gpu_toolkit.core.symptoms import BY_ID

load_rewrites()
G = torch.Generator().manual_seed(0)


def test_index_onehot_is_exact_in_torch():
    mask = torch.rand(2, 7, generator=G) > 0.3
    b, kv = torch.arange(2)[:, None, None, None], torch.arange(7)[None, None, None, :]
    assert torch.equal(index_onehot(mask, [b, kv]), mask[b, kv])                 # the HF mask pattern, bool
    x = torch.randn(5, 6, 3, generator=G)
    i, j = torch.tensor([[0, 4, -1], [2, 2, 3]]), torch.tensor([5, 0, -2])
    assert torch.equal(index_onehot(x, [i]), x[i])                                # negative indices wrap
    assert torch.equal(index_onehot(x, [i, j]), x[i, j])
    ints = torch.randint(-1000, 1000, (9, 4), generator=G)
    assert torch.equal(index_onehot(ints, [torch.tensor([8, 0, 3])]), ints[torch.tensor([8, 0, 3])])


def test_handler_takes_only_leading_integer_indices():
    x = torch.randn(5, 6)
    i = torch.tensor([1, 2])
    assert torch.equal(_index_handler(x, (i, slice(None))), x[i, :])
    assert _index_handler(x, (slice(None), i)) is NotImplemented                 # not on the leading dim
    assert _index_handler(x, x > 0) is NotImplemented                            # boolean mask
    assert _index_handler(x, 1) is NotImplemented                                # plain integer
    assert _index_handler(torch.randn(4096, 512), torch.zeros(1024, dtype=torch.long)) is NotImplemented  # too big


class Lookup(torch.nn.Module):
    """A runtime mask indexed the way HF builds a 4-D mask, plus a table lookup by runtime ids."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(10, 8, generator=G))

    def forward(self, ids, mask):
        b = torch.arange(mask.shape[0])[:, None, None, None]
        kv = torch.arange(mask.shape[1])[None, None, None, :]
        keep = mask[b, kv].to(torch.float32)                      # [B, 1, 1, S]
        return self.table[ids].unsqueeze(1) * keep.squeeze(1).transpose(1, 2)


IDS = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]])


def test_wrapper_is_exact_and_opt_in():
    model = Lookup().eval()
    assert "patch_index_onehot" in BY_ID["gather_nd"].rewrites
    wrapped = GpuRewriteWrapper(model, include=["patch_index_onehot"])
    with torch.no_grad():
        assert torch.equal(wrapped(IDS, MASK), model(IDS, MASK))
    assert {c.rewrite for c in wrapped.changes} == {"patch_index_onehot"}


@pytest.mark.gpu
def test_plain_has_gather_and_rewritten_runs_gpu_only(gpu, tmp_path):
    plain = convert_for_gpu(Lookup().eval(), (IDS, MASK), tmp_path / "plain.tflite", patches=False)
    assert {"GATHER", "GATHER_ND"} & set(read_model_info(plain.path).op_histogram())
    assert plain.verdict != "PASS", plain.summary()
    fixed = convert_for_gpu(Lookup().eval(), (IDS, MASK), tmp_path / "fixed.tflite",
                            only=["patch_index_onehot"], fallback=False)
    ops = read_model_info(fixed.path).op_histogram()
    assert not {"GATHER", "GATHER_ND"} & set(ops), ops
    assert fixed.ok, fixed.summary()
    print("\n[llvmpipe fp16]", fixed.report.summary)


# ---------------------------------------------------------------- HF text encoder with a padding mask

HF_IDS = torch.randint(2, 100, (1, 16), generator=torch.Generator().manual_seed(1))
HF_MASK = torch.tensor([[1] * 12 + [0] * 4])
OPT_IN = ["patch_index_onehot", "patch_mask_fill_fp16"]


def _tiny_bert():
    transformers = pytest.importorskip("transformers")
    from litert_zoo.weights import redraw_weights
    from litert_zoo.build import wrap as _wrap

    cfg = transformers.BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                  intermediate_size=128, max_position_embeddings=64)
    cfg._attn_implementation = "eager"
    model = transformers.BertModel(cfg).eval()
    redraw_weights(model)
    return _wrap(model, call=lambda m, *xs: m(*xs).last_hidden_state)   # the first output only


def test_mask_fill_is_approximate_within_its_bound():
    from litert_gpu_toolkit.rewrites import PATCHES

    assert not PATCHES["patch_mask_fill_fp16"].exact and not PATCHES["patch_mask_fill_fp16"].default
    model = _tiny_bert()
    wrapped = GpuRewriteWrapper(model, include=OPT_IN + ["patch_select"])
    with torch.no_grad():
        ref, got = model(HF_IDS, HF_MASK), wrapped(HF_IDS, HF_MASK)
    assert torch.allclose(got, ref, atol=1e-5, rtol=1e-5), (got - ref).abs().max()
    changes = {c.rewrite: c.exact for c in wrapped.changes}
    assert changes.get("patch_mask_fill_fp16") is False and changes.get("patch_index_onehot") is True


@pytest.mark.gpu
def test_hf_bert_with_a_padding_mask_runs_gpu_only(gpu, tmp_path):
    plain = convert_for_gpu(_tiny_bert(), (HF_IDS, HF_MASK), tmp_path / "plain.tflite", patches=False)
    assert "GATHER_ND" in read_model_info(plain.path).op_histogram()
    assert plain.verdict != "PASS", plain.summary()
    # the opt-in recipe on its own: without the default-on index rewrites that now come first (with them, this
    # batch-1 mask meets the open BROADCAST_TO wall in tests/toolkit/test_hf_calling_conventions.py)
    fixed = convert_for_gpu(_tiny_bert(), (HF_IDS, HF_MASK), tmp_path / "fixed.tflite", include=OPT_IN,
                            approximate=True, fallback=False,
                            exclude=["patch_index_arange", "patch_fold_index_math", "patch_mask_fill_exact"])
    assert "GATHER_ND" not in read_model_info(fixed.path).op_histogram()
    assert fixed.ok, fixed.summary()
    print("\n[llvmpipe fp16]", fixed.report.summary)
