"""Rank > 4 rewrites: each is (1) bit-exact in torch, (2) removes a rank > 4 tensor that the plain
conversion really contains, (3) converts at rank <= 4, compiles GPU-only and matches torch in fp16.

nn.PixelShuffle / nn.PixelUnshuffle are NOT a rank wall with litert-torch 0.10.0 (it lowers them
at rank 4 itself): `test_pixel_shuffle_original_is_rank4_here` keeps that statement honest.
"""
import random
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("litert_torch")
einops = pytest.importorskip("einops")   # pinned in requirements.txt; the toolkit itself does not need it
import torch.nn as nn
import torch.nn.functional as F
from einops.layers.torch import Rearrange as EinopsRearrange
from torch.overrides import TorchFunctionMode

from litert_gpu_toolkit.lowering.export import export_tflite, gpu_vs_torch
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites import PATCHES
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.rewrites.rank_gt_4 import (
    DepthToSpace,
    PixelShuffleConvTranspose,
    Rearrange,
    SpaceToDepth,
    UnsupportedPatternError,
    WindowAttentionRank4,
    depth_to_space,
    lower_rank_views,
    lowrank_permute,
    parse_rearrange,
    patch_einops,
    patch_pixel_shuffle,
    patch_window_attention,
    pixelshuffle_to_conv_transpose,
    rearrange,
    space_to_depth,
    split_packed_qkv,
    window_partition,
    window_reverse,
)
from torch_helpers import Fn  # tests/torch_helpers.py

ROOT = Path(__file__).resolve().parents[3]
MIN_CORR = 0.999


class MaxRankSpy(TorchFunctionMode):
    """Records the highest rank of any tensor an op returns while active (torch-level rank check)."""

    def __init__(self):
        super().__init__()
        self.max_rank = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for o in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(o, torch.Tensor):
                self.max_rank = max(self.max_rank, o.dim())
        return out




def assert_gpu_matches(module, args, path):
    result = gpu_vs_torch(module, args, path, convert=False)
    assert result.ok, result.summary() + "\n" + result.run.log_tail()
    assert not result.run.gpu.rejected
    for i, c in enumerate(result.comparisons):
        assert c.nonfinite == 0, f"output {i}: {c}"
        assert c.corr >= MIN_CORR, f"output {i}: corr {c.corr}"
    return result


def convert(module, args, path):
    export_tflite(module, args, path)
    return read_model_info(path)


def max_rank(info):
    return max((t.rank for t, _ in info.high_rank_tensors()), default=4)


@pytest.fixture(scope="module")
def outdir(tmp_path_factory):
    return tmp_path_factory.mktemp("rank")


# ---------------------------------------------------------------------------------------------
# a small reference Swin (v1) block: the original the rewrites are measured against
# ---------------------------------------------------------------------------------------------

def ref_window_partition(x, ws):
    b, h, w, c = x.shape
    x = x.view(b, h // ws, ws, w // ws, ws, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, ws, ws, c)


def ref_window_reverse(windows, ws, h, w):
    b = int(windows.shape[0] / (h * w / ws / ws))
    x = windows.view(b, h // ws, w // ws, ws, ws, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(b, h, w, -1)


class RefWindowAttention(nn.Module):
    def __init__(self, dim, window_size, num_heads):
        super().__init__()
        self.dim, self.window_size, self.num_heads = dim, window_size, num_heads
        self.scale = (dim // num_heads) ** -0.5
        ws = window_size
        self.relative_position_bias_table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, num_heads) * 0.5)
        coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += ws - 1
        rel[:, :, 1] += ws - 1
        rel[:, :, 0] *= 2 * ws - 1
        self.register_buffer("relative_position_index", rel.sum(-1))
        self.qkv = nn.Linear(dim, dim * 3)
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.0)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x, mask=None):
        b_, n, c = x.shape
        qkv = self.qkv(x).reshape(b_, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        attn = attn + bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(b_ // nw, nw, self.num_heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, n, n)
        attn = self.attn_drop(self.softmax(attn))
        x = (attn @ v).transpose(1, 2).reshape(b_, n, c)
        return self.proj_drop(self.proj(x))


class RefSwinBlock(nn.Module):
    def __init__(self, dim=8, resolution=(8, 8), num_heads=2, window_size=4, shift_size=2):
        super().__init__()
        self.resolution, self.window_size, self.shift_size = resolution, window_size, shift_size
        self.norm1 = nn.LayerNorm(dim)
        self.attn = RefWindowAttention(dim, window_size, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        h, w = resolution
        img = torch.zeros(1, h, w, 1)
        cnt = 0
        for hs in (slice(0, -window_size), slice(-window_size, -shift_size), slice(-shift_size, None)):
            for wsl in (slice(0, -window_size), slice(-window_size, -shift_size), slice(-shift_size, None)):
                img[:, hs, wsl, :] = cnt
                cnt += 1
        mw = ref_window_partition(img, window_size).view(-1, window_size * window_size)
        mask = mw.unsqueeze(1) - mw.unsqueeze(2)
        self.register_buffer("attn_mask", mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0))

    def forward(self, x):
        h, w = self.resolution
        b, _, c = x.shape
        shortcut = x
        x = self.norm1(x).view(b, h, w, c)
        x = torch.roll(x, shifts=(-self.shift_size, -self.shift_size), dims=(1, 2))
        windows = ref_window_partition(x, self.window_size).view(-1, self.window_size ** 2, c)
        windows = self.attn(windows, mask=self.attn_mask)
        x = ref_window_reverse(windows.view(-1, self.window_size, self.window_size, c), self.window_size, h, w)
        x = torch.roll(x, shifts=(self.shift_size, self.shift_size), dims=(1, 2)).reshape(b, h * w, c)
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


def vit_attention(x, qkv_weight, heads=2):
    """The packed-QKV idiom of ViT / timm Attention."""
    b, n, c = x.shape
    qkv = (x @ qkv_weight).reshape(b, n, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    attn = (q * (c // heads) ** -0.5) @ k.transpose(-2, -1)
    return (attn.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)


# ---------------------------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------------------------

def test_patches_registered_with_their_wall():
    for name in ("patch_pixel_shuffle", "pixelshuffle_to_conv_transpose", "patch_window_attention", "patch_einops"):
        assert PATCHES[name].wall == "rank_gt_4"
    assert PATCHES["pixelshuffle_to_conv_transpose"].default is False


# ---------------------------------------------------------------------------------------------
# (1) exactness in torch (and rank <= 4 at the torch level)
# ---------------------------------------------------------------------------------------------

def test_lowrank_permute_bit_exact_and_rank4_for_random_permutations():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 7)
        shape = [rng.randint(1, 3) for _ in range(n)]
        perm = list(range(n))
        rng.shuffle(perm)
        numel = 1
        for s in shape:
            numel *= s
        x = torch.randn(numel) - 0.5
        spy = MaxRankSpy()
        with spy:
            got = lowrank_permute(x, shape, perm, [numel])
        assert torch.equal(got, x.reshape(shape).permute(perm).reshape(-1)), (shape, perm)
        assert spy.max_rank <= 4, (shape, perm)


def test_lowrank_permute_rejects_rank5_output():
    with pytest.raises(ValueError, match="rank 5"):
        lowrank_permute(torch.zeros(32), (2,) * 5, range(5))


@pytest.mark.parametrize("r", [2, 3])
@pytest.mark.parametrize("shape", [(1, 4, 5, 3), (2, 2, 3, 7)])
def test_depth_to_space_and_back_bit_exact(r, shape):
    n, c, h, w = shape
    x = torch.randn(n, c * r * r, h, w) - 0.5
    spy = MaxRankSpy()
    with spy:
        d2s = depth_to_space(x, r)
        s2d = space_to_depth(d2s, r)
        d2s_chw = depth_to_space(x[0], r)
    assert torch.equal(d2s, F.pixel_shuffle(x, r)) and torch.equal(d2s_chw, F.pixel_shuffle(x[0], r))
    assert torch.equal(s2d, x) and torch.equal(s2d, F.pixel_unshuffle(d2s, r))
    assert spy.max_rank <= 4


def test_patch_pixel_shuffle_modules_and_functional():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 12, 3, padding=1), nn.PixelShuffle(2), nn.PixelUnshuffle(2))
    x = torch.randn(2, 3, 5, 7)
    with torch.no_grad():
        ref = model(x)
        changes = patch_pixel_shuffle(model)
        got = model(x)
    assert [c.path for c in changes] == ["1", "2"]
    assert isinstance(model[1], DepthToSpace) and isinstance(model[2], SpaceToDepth)
    assert torch.equal(got, ref)
    wrapped = GpuRewriteWrapper(Fn(lambda t: F.pixel_unshuffle(F.pixel_shuffle(t, 3), 3)))
    y = torch.randn(1, 18, 4, 5)
    assert torch.equal(wrapped(y), y)
    assert {c.rewrite for c in wrapped.changes} == {"patch_pixel_shuffle"}


def test_pixelshuffle_to_conv_transpose_exact_for_finite_inputs():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(3, 2 * 9, 3, padding=1), nn.PixelShuffle(3))
    x = torch.randn(1, 3, 5, 4) * 100
    with torch.no_grad():
        ref = model(x)
        changes = pixelshuffle_to_conv_transpose(model)
        got = model(x)
    assert [c.path for c in changes] == ["1"] and isinstance(model[1], PixelShuffleConvTranspose)
    assert torch.equal(got, ref)
    grouped = PixelShuffleConvTranspose(2, 3, grouped=True)
    z = torch.randn(1, 18, 4, 5)
    with torch.no_grad():
        assert torch.equal(grouped(z), F.pixel_shuffle(z, 3))


@pytest.mark.parametrize("shape,ws", [((1, 8, 8, 3), 4), ((2, 6, 9, 5), 3)])
def test_window_partition_and_reverse_bit_exact(shape, ws):
    x = torch.randn(*shape) - 0.5
    spy = MaxRankSpy()
    with spy:
        windows = window_partition(x, ws)
        back = window_reverse(windows, ws, shape[1], shape[2])
    assert torch.equal(windows, ref_window_partition(x, ws))
    assert torch.equal(back, x)
    assert spy.max_rank <= 4


def test_split_packed_qkv_bit_exact():
    x = torch.randn(2, 5, 3 * 12) - 0.5
    ref = x.reshape(2, 5, 3, 4, 3).permute(2, 0, 3, 1, 4)
    for got, want in zip(split_packed_qkv(x, num_heads=4), ref.unbind(0)):
        assert torch.equal(got, want)


@pytest.mark.parametrize("batch,shift", [(1, 2), (2, 0), (3, 2)])
def test_patch_window_attention_bit_exact_and_rank4_alone(batch, shift):
    torch.manual_seed(2)
    block = RefSwinBlock(shift_size=shift)
    x = torch.randn(batch, 64, 8) - 0.2
    windows = torch.randn(batch * 4, 16, 8)
    with torch.no_grad():
        ref, ref_attn = block(x), block.attn(windows, block.attn_mask)
        changes = patch_window_attention(block)
        assert [c.path for c in changes] == ["attn"] and isinstance(block.attn, WindowAttentionRank4)
        spy = MaxRankSpy()
        with spy:
            got_attn = block.attn(windows, block.attn_mask)
        got = block(x)
    assert torch.equal(got_attn, ref_attn) and torch.equal(got, ref)
    assert spy.max_rank <= 4          # the attention module alone needs no wrapper


def test_window_attention_v2_is_left_alone():
    attn = RefWindowAttention(8, 4, 2)
    attn.logit_scale = nn.Parameter(torch.zeros(2, 1, 1))    # Swin v2: cosine attention, different math
    assert patch_window_attention(nn.Sequential(attn)) == []


EINOPS_PATTERNS = [
    ("b (h p1) (w p2) c -> b (h w) (p1 p2 c)", dict(p1=2, p2=2), (2, 6, 4, 3)),
    ("b c (h p1) (w p2) -> b (p1 p2 c) h w", dict(p1=2, p2=3), (1, 3, 4, 6)),
    ("b (h w) c -> b c h w", dict(h=3), (2, 12, 5)),
    ("b n (three h d) -> three b h n d", dict(three=3, h=2), (2, 5, 12)),
    ("... (g c) -> ... c g", dict(g=2), (2, 3, 8)),
    ("b h w c -> b (w h c)", {}, (2, 3, 4, 5)),
    ("b 1 n -> b n", {}, (2, 1, 7)),
    ("(b1 b2) h w c -> b1 (b2 h) w c", dict(b1=2), (4, 3, 2, 5)),
]


@pytest.mark.parametrize("pattern,axes,shape", EINOPS_PATTERNS)
def test_rearrange_matches_einops_bit_exact(pattern, axes, shape):
    x = torch.randn(*shape) - 0.5
    want = einops.rearrange(x, pattern, **axes)
    if want.dim() > 4:
        with pytest.raises(UnsupportedPatternError, match="three b h n d"):
            rearrange(x, pattern, **axes)
        return
    spy = MaxRankSpy()
    with spy:
        got = rearrange(x, pattern, **axes)
    assert torch.equal(got, want)
    assert spy.max_rank <= 4
    wrapped = lower_rank_views(Fn(lambda t: einops.rearrange(t, pattern, **axes)))
    assert torch.equal(wrapped(x), want)


@pytest.mark.parametrize("pattern", ["b c h w -> b c (h w) 2", "b (c c) -> b c", "b c -> b c d", "b (c -> b c"])
def test_unsupported_patterns_name_the_pattern(pattern):
    with pytest.raises(UnsupportedPatternError) as err:
        parse_rearrange(pattern, (2, 4))
    assert pattern in str(err.value)


def test_patch_einops_layers():
    torch.manual_seed(3)
    model = nn.Sequential(EinopsRearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=2, p2=2), nn.Linear(12, 6),
                          EinopsRearrange("b (h w) c -> b c h w", h=2))
    x = torch.randn(2, 3, 4, 6)
    with torch.no_grad():
        ref = model(x)
        changes = patch_einops(model)
        got = model(x)
    assert [c.path for c in changes] == ["0", "2"] and all(isinstance(model[i], Rearrange) for i in (0, 2))
    assert torch.equal(got, ref)
    bad = nn.Sequential(EinopsRearrange("b c h w -> b c (h w)"))
    bad[0].pattern = "b c h w -> b c (h w) 3"       # a pattern it cannot lower: the error names it
    with pytest.raises(UnsupportedPatternError, match="b c h w -> b c \\(h w\\) 3"):
        patch_einops(bad)


def test_toolkit_works_without_einops():
    code = (
        "import sys; sys.modules['einops'] = None\n"
        "import torch, torch.nn as nn\n"
        "from litert_gpu_toolkit.rewrites import rank_gt_4 as rank\n"
        "assert rank.patch_einops(nn.Sequential(nn.ReLU())) == []\n"
        "x = torch.randn(2, 6, 4)\n"
        "want = x.reshape(2, 2, 3, 4).permute(0, 3, 1, 2)\n"
        "assert torch.equal(rank.rearrange(x, 'b (h w) c -> b c h w', h=2), want)\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT / "utilities"), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_views_handler_is_exact_on_inline_patterns():
    torch.manual_seed(4)
    w = torch.randn(8, 24)

    def mask_add(a, m):
        nw = m.shape[0]
        b_, heads, n, _ = a.shape
        a = a.view(b_ // nw, nw, heads, n, n) + m.unsqueeze(1).unsqueeze(0)
        return (a.view(-1, heads, n, n) * 2 - 1).softmax(-1)

    cases = [
        (lambda x: vit_attention(x, w), (torch.randn(2, 5, 8),)),
        (lambda x: ref_window_reverse(ref_window_partition(x, 3) * 2, 3, 6, 9), (torch.randn(2, 6, 9, 4),)),
        (mask_add, (torch.randn(4, 2, 9, 9), torch.randn(2, 9, 9))),
    ]
    for fn, args in cases:
        wrapped = lower_rank_views(Fn(fn))
        with torch.no_grad():
            assert torch.equal(wrapped(*args), fn(*args))
        assert {c.rewrite for c in wrapped.changes} == {"lower_rank_views"}


def packed_qkv(x):
    """BLOOM's head split: a rank-5 view indexed on its fourth axis with an Ellipsis."""
    b, s, _ = x.shape
    qkv = x.view(b, s, 2, 3, 4)
    return qkv[..., 0, :].transpose(1, 2) * 2 + qkv[:, :, :, 2].transpose(1, 2), qkv[0, ..., 1, :]


def test_views_handler_follows_integer_indexing_with_an_ellipsis():
    x = torch.randn(1, 5, 24)
    wrapped = lower_rank_views(Fn(packed_qkv))
    with torch.no_grad():
        for a, b in zip(wrapped(x), packed_qkv(x)):
            assert torch.equal(a, b)
    assert {c.rewrite for c in wrapped.changes} == {"lower_rank_views"}


@pytest.mark.gpu
def test_packed_qkv_indexing_runs_gpu_only(gpu, tmp_path):
    x = torch.randn(1, 5, 24, generator=torch.Generator().manual_seed(0))
    path = tmp_path / "qkv.tflite"
    info = read_model_info(export_tflite(lower_rank_views(Fn(lambda t: packed_qkv(t)[0])).eval(), (x,), path))
    assert not info.high_rank_tensors(), info.high_rank_tensors()
    assert_gpu_matches(lower_rank_views(Fn(lambda t: packed_qkv(t)[0])).eval(), (x,), path)


def test_views_handler_stays_correct_with_inplace_ops():
    def fn(x):
        u = x.view(1, 2, 2, 2, 2, 3).permute(0, 1, 3, 2, 4, 5).contiguous()
        u.mul_(2)  # mutates a copy the handler had recorded as "made of x"
        v = x.view(1, 2, 2, 2, 2, 3).permute(0, 1, 3, 2, 4, 5)
        w = x.view(1, 2, 2, 2, 2, 3).permute(0, 1, 3, 2, 4, 5).contiguous()
        F.relu(w, True)  # in place through the positional flag: the record of w goes stale too
        kept = F.dropout(x.view(1, 2, 2, 2, 2, 3).permute(0, 1, 3, 2, 4, 5), 0.5, False)  # eval dropout: the view
        return (u.view(1, 4, 4, 3), F.relu(v.reshape(1, 4, 4, 3), inplace=True) + 1, w.view(1, 4, 4, 3),
                kept.reshape(1, 4, 4, 3))

    x = torch.randn(1, 4, 4, 3)
    for got, want in zip(lower_rank_views(Fn(fn))(x.clone()), fn(x.clone())):
        assert torch.equal(got, want)


# ---------------------------------------------------------------------------------------------
# (2) + (3): conversions
# ---------------------------------------------------------------------------------------------


def test_pixel_shuffle_original_is_rank4_here(outdir):
    model = nn.Sequential(nn.PixelShuffle(2), nn.PixelUnshuffle(3))
    info = convert(model, (torch.randn(2, 8, 3, 6),), outdir / "ps_original.tflite")
    assert max_rank(info) <= 4, info.op_histogram()


def originals():
    torch.manual_seed(5)
    w = torch.randn(8, 24)
    return {
        "swin_block": (RefSwinBlock(), (torch.randn(1, 64, 8),)),
        "qkv": (Fn(lambda x: vit_attention(x, w)), (torch.randn(1, 5, 8),)),
        "einops": (
            nn.Sequential(EinopsRearrange("b (h p1) (w p2) c -> b (h w) (p1 p2 c)", p1=2, p2=2)),
            (torch.randn(1, 6, 4, 3),),
        ),
    }


@pytest.mark.parametrize("name", ["swin_block", "qkv", "einops"])
def test_original_has_rank_above_4(name, outdir):
    module, args = originals()[name]
    info = convert(module, args, outdir / f"orig_{name}.tflite")
    assert max_rank(info) >= 5, info.op_histogram()


def rewritten_cases():
    torch.manual_seed(6)
    w = torch.randn(8, 24)
    block = RefSwinBlock()
    patch_window_attention(block)
    pix = nn.Sequential(nn.Conv2d(3, 12, 3, padding=1), nn.PixelShuffle(2), nn.Conv2d(3, 3, 1), nn.PixelUnshuffle(2))
    patch_pixel_shuffle(pix)
    convt = nn.Sequential(nn.Conv2d(3, 12, 3, padding=1), nn.PixelShuffle(2))
    pixelshuffle_to_conv_transpose(convt)
    layers = nn.Sequential(EinopsRearrange("b (h p1) (w p2) c -> b (h w) (p1 p2 c)", p1=2, p2=2), nn.Linear(12, 4))
    patch_einops(layers)

    def einops_functional(x):
        return einops.rearrange(x, "b c (h p1) (w p2) -> b (p1 p2 c) h w", p1=2, p2=2) * 2

    return {
        "swin_block": (GpuRewriteWrapper(block), (torch.randn(2, 64, 8),)),
        "qkv": (GpuRewriteWrapper(Fn(lambda x: vit_attention(x, w))), (torch.randn(2, 5, 8),)),
        "pixel_shuffle": (pix, (torch.randn(2, 3, 5, 6),)),
        "conv_transpose": (convt, (torch.randn(1, 3, 5, 6),)),
        "einops": (
            EinopsPair(layers, GpuRewriteWrapper(Fn(einops_functional))),
            (torch.randn(1, 6, 4, 3), torch.randn(1, 3, 4, 6)),
        ),
    }


class EinopsPair(nn.Module):
    """A patched einops layer and a wrapped functional einops.rearrange, side by side."""

    def __init__(self, layers, functional):
        super().__init__()
        self.layers, self.functional = layers, functional

    def forward(self, x, y):
        return self.layers(x), self.functional(y)


@pytest.fixture(scope="module")
def rewritten_converted(outdir):
    out = {}
    for name, (module, args) in rewritten_cases().items():
        path = outdir / f"rewritten_{name}.tflite"
        out[name] = (module, args, path, convert(module, args, path))
    return out


REWRITTEN = ["swin_block", "qkv", "pixel_shuffle", "conv_transpose", "einops"]


@pytest.mark.parametrize("name", REWRITTEN)
def test_rewritten_converts_at_rank4(name, rewritten_converted):
    *_, info = rewritten_converted[name]
    assert max_rank(info) <= 4, [t.shape for t, _ in info.high_rank_tensors()]
    assert not info.has_op("GATHER_ND")
    if name == "conv_transpose":
        assert info.has_op("TRANSPOSE_CONV") and not info.has_op("RESHAPE"), info.op_histogram()


@pytest.mark.parametrize("name", REWRITTEN)
def test_rewritten_runs_gpu_only_and_matches(name, rewritten_converted, gpu):
    module, args, path, _ = rewritten_converted[name]
    assert_gpu_matches(module, args, path)
