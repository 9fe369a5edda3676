"""BROADCAST_TO: repeat_kv_cat and expand_by_cat (bit-exact, op gone, GPU-only match)."""

import torch
from torch import nn

from litert_gpu_toolkit.rewrites.broadcast_to import expand_by_cat, patch_broadcast_to, patch_repeat_kv, repeat_kv_cat
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.runtime.compiled import compile_and_run

from wall_checks import INF, _close, _convert, _gpu_clean, _same  # noqa: F401


# ============================================================================== BROADCAST_TO

def _hf_repeat_kv(x, n_rep):
    b, k, s, d = x.shape
    return x[:, :, None, :, :].expand(b, k, n_rep, s, d).reshape(b, k * n_rep, s, d)


def test_repeat_kv_cat_is_bit_exact_with_the_same_head_order():
    torch.manual_seed(3)
    for k in (1, 2, 3):
        for n in (1, 2, 4):
            x = torch.randn(2, k, 5, 7)
            assert torch.equal(repeat_kv_cat(x, n), _hf_repeat_kv(x, n))
            assert torch.equal(repeat_kv_cat(x, n), x.repeat_interleave(n, dim=1))
            wrapped = GpuRewriteWrapper(nn.Identity(), include=["patch_repeat_kv"])
            wrapped.model.forward = lambda t, n=n: _hf_repeat_kv(t, n)
            assert torch.equal(wrapped(x), _hf_repeat_kv(x, n))


def test_expand_by_cat_is_bit_exact():
    x = torch.randn(3, 1, 5)
    x[0, 0, 0] = INF
    for shape in [(3, 4, 5), (2, 3, 1, 5), (2, 3, 40, 5), (3, -1, 5)]:
        want = x.expand(*shape)
        assert torch.equal(expand_by_cat(x, want.shape), want)
    class M(nn.Module):
        def forward(self, x):
            return x.expand(2, 3, 17, 5) + torch.broadcast_to(x, (3, 17, 5)) + x.expand_as(torch.empty(3, 17, 5))
    wrapped = GpuRewriteWrapper(M(), include=["patch_broadcast_to"])
    assert torch.equal(wrapped(x), M()(x))


class BroadcastWalls(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.Parameter(torch.randn(1, 4, 1, 1))

    def forward(self, kv, y):
        return (_hf_repeat_kv(kv, 3) * 2,                        # runtime expand at rank 5 (GQA)
                y.expand(1, 6, 7, 16) * 2,                        # runtime expand at rank 4
                torch.cat([y.expand(1, 2, 7, 16), self.p.expand(1, 4, 7, 16)], 1))   # + constant expand


BC_ARGS = (torch.randn(1, 2, 7, 16), torch.randn(1, 1, 7, 16))


def test_broadcast_plain_conversion_has_broadcast_to_and_rank5(tmp_path, gpu):
    info = _convert(BroadcastWalls(), BC_ARGS, tmp_path / "plain.tflite")
    assert info.op_histogram().get("BROADCAST_TO", 0) >= 3, info.op_histogram()
    assert info.high_rank_tensors()
    run = compile_and_run(tmp_path / "plain.tflite", None, accelerator="gpu")
    assert run.status == "ops_rejected" and "BROADCAST_TO" in [r.op for r in run.gpu.rejected], run.status


def test_broadcast_rewritten_is_bit_exact_and_gpu_clean(tmp_path, gpu):
    model = BroadcastWalls()
    ref = model(*BC_ARGS)
    patch_repeat_kv(model)
    patch_broadcast_to(model)
    for out, r in zip(model(*BC_ARGS), ref):
        assert torch.equal(out, r)
    res = _gpu_clean(model, BC_ARGS, tmp_path / "rewritten.tflite")
    assert "BROADCAST_TO" not in res.info.op_histogram() and not res.info.high_rank_tensors()
    # the parameter's expand folded into one constant at the target shape
    assert any(t.is_constant and tuple(t.shape) == (1, 4, 7, 16) for t in res.info.tensors[0])


# ============================================================================== RELU_0_TO_1


# ---------------------------------------------------------------------------------- Tensor.repeat

def _repeat_model():
    from torch_helpers import Fn

    # diffusers' UNet1DModel: the timestep embedding repeated along time, then joined with the sample
    return Fn(lambda x, emb: torch.cat([x, emb[..., None].repeat([1, 1, x.shape[2]])], 1) * 2.0).eval()


def test_repeat_is_bit_exact_and_no_broadcast_to_is_left(tmp_path):
    x, emb = torch.randn(1, 2, 64), torch.randn(1, 32)
    model = _repeat_model()
    wrapped = GpuRewriteWrapper(model, include=["patch_broadcast_to"])
    with torch.no_grad():
        assert torch.equal(wrapped(x, emb), model(x, emb))
        for sizes in ([2, 3], [2, 1, 3], (1, 4)):                # tile of a size > 1 axis, leading new axes
            t = torch.randn(2, 3)
            tiled = GpuRewriteWrapper(_fn(lambda v: v.repeat(*sizes)), include=["patch_broadcast_to"])
            assert torch.equal(tiled(t), t.repeat(*sizes))
    assert "BROADCAST_TO" in _convert(model, (x, emb), tmp_path / "plain.tflite").op_histogram()
    assert "BROADCAST_TO" not in _convert(wrapped, (x, emb), tmp_path / "fixed.tflite").op_histogram()


def _fn(fn):
    from torch_helpers import Fn

    return Fn(fn).eval()


def test_repeat_runs_gpu_only(gpu, tmp_path):
    wrapped = GpuRewriteWrapper(_repeat_model(), include=["patch_broadcast_to"])
    _gpu_clean(wrapped, (torch.randn(1, 2, 64), torch.randn(1, 32)), tmp_path / "m.tflite")


def _outer_mask_model():
    # CANINE's 3-D attention mask: ones([B, S, 1]) * mask[:, None, :], a broadcast the converter makes BROADCAST_TO
    # (here an output of its own; folded into a following add it would be a broadcasting ADD instead)
    return _fn(lambda x, mask: (x + 1, torch.ones(x.shape[0], x.shape[1], 1) * mask.reshape(x.shape[0], 1, -1).float()))


def test_a_product_with_ones_that_broadcasts_is_an_expand_by_concatenation(tmp_path):
    x, mask = torch.randn(2, 8, 8), (torch.rand(2, 8) > 0.3).long()
    model = _outer_mask_model()
    wrapped = GpuRewriteWrapper(model, include=["patch_broadcast_to", "patch_fold_index_math"])
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(wrapped(x, mask), model(x, mask)))
    assert "BROADCAST_TO" in _convert(model, (x, mask), tmp_path / "plain.tflite").op_histogram()
    assert "BROADCAST_TO" not in _convert(wrapped, (x, mask), tmp_path / "fixed.tflite").op_histogram()


def test_a_product_with_ones_runs_gpu_only(gpu, tmp_path):
    wrapped = GpuRewriteWrapper(_outer_mask_model(), include=["patch_broadcast_to", "patch_fold_index_math"])
    _gpu_clean(wrapped, (torch.randn(2, 8, 8), (torch.rand(2, 8) > 0.3).long()), tmp_path / "m.tflite")
