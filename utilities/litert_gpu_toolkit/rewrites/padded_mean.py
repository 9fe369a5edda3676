"""A spatial mean fed by a division or rsqrt, over a plane whose width is not a multiple of 4: inf on the GPU.

The desktop GPU delegate fuses a chain of elementwise ops into the MEAN that consumes it and reduces the plane in
groups of 4 along its width, so a width of 2, 3, 5, 6, 7 ... leaves lanes that hold no data. An op in the fused
chain that is not finite at 0 -- a DIV by a tensor that varies over the plane, an RSQRT -- turns those lanes into
inf, and the mean with them. Measured on llvmpipe, ai-edge-litert 2.3.0, in fp16 and in fp32 (LiteRT's CPU is
right): (x / t).mean((2, 3)) with t of shape [1, 1, H, W] is inf for W = 1, 2, 3, 5, 6, 7 and right for W = 4, 8;
MUL and ADD chains are right, and the same values through AVERAGE_POOL_2D are right. A normalisation right before
a global average pool is that chain: timm's CoAtNet (LayerNorm2d, then the pooled head) returned inf at a 2 x 2
map once the norm was computed in its scaled form (a DIV by the per-position max).

`patch_padded_mean` (default) computes such a mean -- torch.mean / Tensor.mean / torch.sum / Tensor.sum over the
last two axes of a rank-4 tensor, F.adaptive_avg_pool2d to 1 -- as F.avg_pool2d over the whole plane (a sum as
that times H * W), a different GPU kernel. Exact to fp32 rounding (the pool's sum and divide in another order).
Where: given example inputs (as `convert_for_gpu` does), only at means whose input comes, through elementwise ops
and views, from a division by a tensor, rsqrt, reciprocal, log or a normalisation (LayerNorm, GroupNorm,
InstanceNorm, F.normalize, softmax); `GpuRewriteWrapper` alone, without that pre-pass, changes nothing.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from . import Change, register
from .functional import PrepassSites, register_handler

SITES = PrepassSites("patch_padded_mean")      # the (shape, dims) the pre-pass found

_DIVISIONS = {torch.div, torch.Tensor.div, torch.true_divide, torch.Tensor.__truediv__, torch.Tensor.__rtruediv__}
_ZERO_UNSAFE = {torch.rsqrt, torch.Tensor.rsqrt, torch.reciprocal, torch.Tensor.reciprocal, torch.log,
                torch.Tensor.log, F.layer_norm, F.group_norm, F.instance_norm, F.normalize, F.softmax, torch.softmax,
                torch.Tensor.softmax, F.log_softmax}
# ops whose output keeps an unsafe input's lanes in the fused chain: elementwise maps and views
_CARRY = {torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__, torch.sub, torch.Tensor.sub,
          torch.Tensor.__sub__, torch.Tensor.__rsub__, torch.mul, torch.Tensor.mul, torch.Tensor.__mul__,
          torch.Tensor.__rmul__, torch.Tensor.__neg__, torch.neg, torch.abs, torch.Tensor.abs, torch.clamp,
          torch.Tensor.clamp, torch.Tensor.clamp_min, torch.sigmoid, torch.tanh, F.relu, F.gelu, F.silu, F.hardswish,
          torch.sqrt, torch.Tensor.sqrt, torch.Tensor.pow, torch.pow, torch.Tensor.__pow__, torch.Tensor.reshape,
          torch.Tensor.view, torch.Tensor.permute, torch.Tensor.contiguous, torch.Tensor.flatten, F.dropout,
          torch.Tensor.__getitem__, torch.Tensor.unsqueeze, torch.Tensor.squeeze, torch.Tensor.expand}


def _site(x, dim) -> tuple | None:
    """(shape, dims) of a mean over the last two axes of a rank-4 float tensor whose width is not a multiple of 4."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 4 or int(x.shape[-1]) % 4 == 0:
        return None
    dims = (dim,) if isinstance(dim, int) else tuple(dim) if dim is not None else ()
    if not all(isinstance(d, int) for d in dims) or {d % 4 for d in dims} != {2, 3}:
        return None
    return tuple(x.shape), (2, 3)


class _Recorder(TorchFunctionMode):
    """The pre-pass: which tensors carry an op that is not finite at 0, and which spatial means read one."""

    def __init__(self):
        super().__init__()
        self.unsafe: set[int] = set()
        self.keep: list = []
        self.sites: set = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        carried = any(id(t) in self.unsafe for t in tensors)
        source = func in _ZERO_UNSAFE or (func in _DIVISIONS and _varying_divisor(func, args))
        if (source or (carried and func in _CARRY)) and isinstance(out, torch.Tensor):
            self.unsafe.add(id(out))
            self.keep.append(out)
        if carried and tensors:
            site = _mean_site(func, args, kwargs)
            if site is not None:
                self.sites.add(site)
        return out


def _varying_divisor(func, args) -> bool:
    """A division whose divisor is a tensor that can vary over a plane (not a scalar, not [N, C, 1, 1])."""
    d = args[0] if func is torch.Tensor.__rtruediv__ else (args[1] if len(args) > 1 else None)
    if not isinstance(d, torch.Tensor) or d.numel() == 1:
        return False
    return not (d.dim() >= 2 and int(d.shape[-1]) == 1 and int(d.shape[-2]) == 1)


def _mean_site(func, args, kwargs):
    x = args[0] if args else None
    if func in (torch.mean, torch.Tensor.mean, torch.sum, torch.Tensor.sum):
        return _site(x, args[1] if len(args) > 1 else kwargs.get("dim"))
    if func is F.adaptive_avg_pool2d:
        size = args[1] if len(args) > 1 else kwargs.get("output_size")
        return _site(x, (2, 3)) if size in (1, (1, 1), [1, 1]) else None
    return None


def _route(func, x, keepdim: bool, total: bool, args, kwargs):
    sites = SITES.current()
    site = _mean_site(func, (x, *args), kwargs)
    if not sites or site not in sites:
        return NotImplemented
    h, w = int(x.shape[2]), int(x.shape[3])
    y = F.avg_pool2d(x, (h, w))
    y = y * float(h * w) if total else y
    return y if keepdim else y.reshape(x.shape[0], x.shape[1])


def _reduction(total: bool):
    def handler(input, *args, **kwargs):
        if kwargs.get("dtype") is not None or kwargs.get("out") is not None:
            return NotImplemented
        keepdim = args[1] if len(args) > 1 else kwargs.get("keepdim", False)
        func = torch.Tensor.sum if total else torch.Tensor.mean
        return _route(func, input, bool(keepdim), total, args, kwargs)
    return handler


for _f in (torch.mean, torch.Tensor.mean):
    register_handler(_f, "patch_padded_mean")(_reduction(total=False))
for _f in (torch.sum, torch.Tensor.sum):
    register_handler(_f, "patch_padded_mean")(_reduction(total=True))


@register_handler(F.adaptive_avg_pool2d, "patch_padded_mean")
def _adaptive(input, output_size):
    return _route(F.adaptive_avg_pool2d, input, True, False, (output_size,), {})


@register("patch_padded_mean", wall="padded_mean")
def patch_padded_mean(model: nn.Module, example_inputs=None) -> list[Change]:
    """Record the spatial means to compute as an average pool (module docstring); returns no changes itself (the
    functional pass lists them). Without example inputs nothing is recorded and nothing will change."""
    if example_inputs is None:
        return []
    from .apply import split_example_inputs

    args, kwargs = split_example_inputs(example_inputs)
    recorder = _Recorder()
    with torch.no_grad(), recorder:
        model(*args, **kwargs)
    SITES.store(model, frozenset(recorder.sites))
    return []
