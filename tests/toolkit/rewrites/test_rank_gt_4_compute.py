"""lower_rank_views on computations over rank-5 / rank-6 views: reductions, softmax and elementwise maps
(reductions.py: ResNeSt's split attention was RESHAPE and SUM "Tensor dimensions must be less than 5" on the CPU),
einsum / matmul / stack (products.py: MaxViT's einsum window attention, DiT's one-operand einsum unpatchify,
EVA-02's stacked rotary halves, NesT's fused attention over (B, heads, blocks, tokens, dim)).

Three checks, as every rewrite gets: (1) the wrapped module equals the original in torch (bit-exact for views,
maps and softmax of a plain view; products within fp32 dot-product rounding and the softmax of a permuted view
within torch's kernel-to-kernel rounding, rel <= 2e-6 here); (2) no rank > 4 tensor is left in
the converted graph; (3) the strict GPU-only run matches torch."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("litert_torch")
import torch.nn as nn
import torch.nn.functional as F

from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.rank_gt_4 import lower_rank_views

from wall_checks import _close, _convert, _gpu_clean  # tests/toolkit/rewrites/wall_checks.py


class SplitAttention(nn.Module):
    """The ResNeSt split-attention pattern: a (B, radix, C, H, W) view summed over radix, a radix softmax."""

    def __init__(self, c=16, radix=2):
        super().__init__()
        self.radix = radix
        self.conv = nn.Conv2d(c, c * radix, 3, padding=1)
        self.fc1, self.fc2 = nn.Conv2d(c, 8, 1), nn.Conv2d(8, c * radix, 1)

    def forward(self, x):
        x = self.conv(x)
        b, rc, h, w = x.shape
        x = x.reshape((b, self.radix, rc // self.radix, h, w))
        gap = x.sum(dim=1).mean((2, 3), keepdim=True)
        attn = self.fc2(F.relu(self.fc1(gap))).view(b, 1, self.radix, -1).transpose(1, 2)
        attn = F.softmax(attn, dim=1).reshape(b, -1)
        return (x * attn.reshape((b, self.radix, rc // self.radix, 1, 1))).sum(dim=1)


def _five(x):
    return x.reshape(1, 2, 8, 8, 8)


def _window_attention(x):
    """torchvision MaxViT's attention: einsum over permuted (B, G, heads, P, D) views."""
    b, g, p, d = x.shape
    q, k, v = ((x * s).reshape(b, g, p, 2, d // 2).permute(0, 1, 3, 2, 4) for s in (1.0, 0.5, -1.0))
    dot = torch.einsum("B G H I D, B G H J D -> B G H I J", q, k).softmax(dim=-1)
    out = torch.einsum("B G H I J, B G H J D -> B G H I D", dot, v)
    return out.permute(0, 1, 3, 2, 4).reshape(b, g, p, d)


def _unpatchify(x):
    """diffusers DiT: (n, h*w, p*p*c) -> (n, c, h*p, w*p) through a rank-6 einsum permute."""
    n = x.shape[0]
    x = x.reshape(n, 4, 4, 2, 2, 4)
    return torch.einsum("nhwpqc->nchpwq", x).reshape(n, 4, 8, 8)


def _rotary_interleave(x):
    """timm's rotary `rot`: the halves stacked on a new last axis (rank 5), then merged back."""
    return torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape) * 0.5 + x


def _local_attention(x):
    """timm's NesT: packed QKV split to rank-5 (B, heads, blocks, tokens, dim) and one fused attention call."""
    b, t, n, c = x.shape
    qkv = torch.cat([x, x * 0.5, -x], -1).reshape(b, t, n, 3, 2, c // 2).permute(3, 0, 4, 1, 2, 5)
    q, k, v = qkv.unbind(0)
    return F.scaled_dot_product_attention(q, k, v).permute(0, 2, 3, 4, 1).reshape(b, t, n, c)


def _outlook_attention(x):
    """timm's VOLO: softmax over a permuted rank-5 view, an eval-mode dropout, a rank-5 matmul, a permute back."""
    attn = x.reshape(1, 8, 2, 8, 8).permute(0, 2, 1, 3, 4).softmax(dim=-1)
    v = (x * 0.5).reshape(1, 2, 8, 8, 8).transpose(-2, -1)
    out = F.dropout(attn, 0.1, training=False) @ v
    return out.permute(0, 1, 4, 3, 2).reshape(1, 16, 8, 8)


CASES = {
    "split_attention": (SplitAttention(), None),
    "softmax_rank5": (None, lambda x: (torch.softmax(_five(x), dim=1) * _five(x)).sum(1)),   # attention-weighted
    "map_then_amax": (None, lambda x: torch.sigmoid(_five(x)).amax(dim=1) + F.gelu(_five(x)).mean(1)),
    "keepdim_sum": (None, lambda x: _five(x).sum(dim=(1, 2), keepdim=True).reshape(1, 8, 8)),
    "window_attention_einsum": (None, lambda x: _window_attention(x.reshape(1, 4, 16, 16))),
    "matmul_rank5": (None, lambda x: (lambda q: (q @ q.transpose(-2, -1)).softmax(-1).reshape(1, 8, 16, 16))(
        x.reshape(1, 4, 16, 2, 8).permute(0, 1, 3, 2, 4))),
    "unpatchify_einsum": (None, lambda x: _unpatchify(x.reshape(4, 16, 16))),
    "rotary_stack": (None, lambda x: _rotary_interleave(x.reshape(1, 2, 64, 8))),
    "local_attention_sdpa": (None, lambda x: _local_attention(x.reshape(1, 4, 16, 16))),
    # VOLO's outlook attention: softmax over the last axis of a permuted (B, heads, blocks, k*k, k*k) view
    "softmax_permuted": (None, lambda x: x.reshape(1, 4, 2, 8, 16).permute(0, 2, 1, 4, 3).softmax(-1).reshape(
        1, 16, 16, 4)),
    "outlook_attention": (None, _outlook_attention),
    # RoFormer's rotary halves: the same stack, back to rank 4 with reshape_as
    "rotary_reshape_as": (None, lambda x: (lambda q: torch.stack([-q[..., 1::2], q[..., ::2]], -1).reshape_as(q) * 0.5
                                           + q)(x.reshape(1, 2, 64, 8))),
}
# within rel 2e-6, not bit-exact: products (summation order), and a softmax torch runs over another memory layout
PRODUCTS = {"window_attention_einsum", "matmul_rank5", "local_attention_sdpa", "softmax_permuted", "outlook_attention"}


def _module(name):
    from torch_helpers import Fn

    module, fn = CASES[name]
    return (module if module is not None else Fn(fn)).eval()


@pytest.mark.parametrize("name", list(CASES))
def test_bit_exact_in_torch_and_rank4_in_the_graph(name, tmp_path):
    torch.manual_seed(0)
    model, x = _module(name), torch.randn(1, 16, 8, 8)
    wrapped = lower_rank_views(model)
    with torch.no_grad():
        got, want = wrapped(x), model(x)
    assert _close(got, want) if name in PRODUCTS else torch.equal(got, want)
    assert {c.rewrite for c in wrapped.changes} == {"lower_rank_views"}
    plain = _convert(model, (x,), tmp_path / "plain.tflite")
    assert plain.high_rank_tensors(), "the original must have a rank > 4 tensor, or this test proves nothing"
    assert not _convert(wrapped, (x,), tmp_path / "wrapped.tflite").high_rank_tensors()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["split_attention", "softmax_rank5", "window_attention_einsum", "unpatchify_einsum",
                                  "rotary_stack", "local_attention_sdpa", "softmax_permuted", "outlook_attention",
                                  "rotary_reshape_as"])
def test_strict_gpu_matches_torch(gpu, name, tmp_path):
    torch.manual_seed(0)
    _gpu_clean(lower_rank_views(_module(name)), (torch.randn(1, 16, 8, 8),), tmp_path / "m.tflite")


@pytest.mark.gpu
def test_convert_for_gpu_defaults_pass_on_split_attention(gpu, tmp_path):
    torch.manual_seed(0)
    result = convert_for_gpu(_module("split_attention"), (torch.randn(1, 16, 8, 8),), tmp_path / "m.tflite")
    assert result.ok, result.summary()
    assert not read_model_info(result.path).high_rank_tensors()
