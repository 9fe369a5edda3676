"""A mean or sum over thousands of elements: keep an fp16 accumulator's sums inside its range.

Global average pooling, squeeze-excite, a mean over time or over every token reduce N values into one. A GPU
that accumulates in fp16 (phones' fp16 kernels; the desktop delegate here does not) loses the sum in two ways:
it passes 65504 as soon as a partial sum does (N = 12544 for a 112x112 squeeze-excite: once mean|x| > 5.2),
and a running fp16 sum of similar terms m goes wrong once it reaches about 2048 m: its spacing there is 2 m, so
each further term counts as 0 or 2 m, and past 4096 m it stops growing (emulated in the tests: a 112x112 mean of
values in [0, 16] comes out at 1/3 of its value). The second depends on N alone, not on the values.

Two rewrites, for the floating-point mean / sum / global average pool whose outputs each reduce at least
`LONG_REDUCTION` (1024) elements (handlers on torch.mean / Tensor.mean, torch.sum / Tensor.sum,
F.adaptive_avg_pool1d / 2d to size 1, a global F.avg_pool2d):

- `patch_safe_reductions` (default; overflow): the reduction of x * 2^-k, times 2^k. Scaling by a power of two
  is exact, so the result is **bit-identical** in fp32; every sum is 2^k times smaller. Applied where the example
  inputs show a sum of |x| over the reduced elements of at least `limit` (2^13, 8x under fp16's max), with k
  bringing it to about 2^10 -- `convert_for_gpu` passes them; `GpuRewriteWrapper` alone, without the pre-pass,
  leaves every reduction as it is. Cost: two MUL per reduction; on llvmpipe, which does not need it, trained-range
  EfficientNet-B0 (its 112x112 squeeze-excite sums pass 2^13) moves from corr 0.99968 to 0.99959 (values that
  become fp16 subnormals once scaled lose bits). It does not help a running sum's rounding.
- `patch_pooled_reductions` (opt-in; rounding and overflow): `hierarchical_mean`, a cascade of 2x2 average pools
  and one last window of at most 16 values, so no partial sum holds more than 16 terms; a sum is that mean times
  N. Every long reduction, with or without a pre-pass. Exact to fp32 rounding in torch (a few ulps of mean|x|),
  but each stage rounds to fp16 on the GPU: where the GPU accumulates a MEAN in fp32 (llvmpipe) its error is a
  few times the plain op's (measured: 1.8e-3 against 6.7e-4 of a mean of values around 10; trained-range
  EfficientNet-B0 0.99968 -> 0.99922) -- hence opt-in, for a phone whose fp16 accumulator is the problem. Cost:
  about log2(N) / 2 + 1 AVERAGE_POOL_2D per reduction (plus a RESHAPE, and a PAD for sizes not r * 2^j).

The lint reports every long MEAN / SUM (`long_reduction`) either way.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .. import Change, register
from ..functional import PrepassSites, register_handler
from ...core.symptoms import LONG_REDUCTION
from .norms import hierarchical_mean
from .rescale import DEFAULT_LIMIT

SITES = PrepassSites("patch_safe_reductions")     # {(shape, dims): k} from the pre-pass
TARGET = 2.0 ** 10


def _reduced(x: torch.Tensor, dim) -> tuple[int, ...] | None:
    """The reduced axes (sorted, non-negative) of a float tensor, or None for a call left alone."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() == 0:
        return None
    if dim is None:
        dims = tuple(range(x.dim()))
    else:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        if not dims or not all(isinstance(d, int) for d in dims):
            return None
        dims = tuple(sorted({d % x.dim() for d in dims}))
    if math.prod(int(x.shape[d]) for d in dims) < LONG_REDUCTION:
        return None
    return dims


def _route(call, x, dim, keepdim, dtype, out, total: bool, pooled: bool):
    """`call(y)` computes the original reduction of y (x or x scaled)."""
    if out is not None or (dtype is not None and dtype != getattr(x, "dtype", None)):
        return NotImplemented
    dims = _reduced(x, dim)
    if dims is None:
        return NotImplemented
    sites = SITES.current()
    if isinstance(sites, _Recorder):
        if not pooled:
            sites.see(x, dims)
        return NotImplemented
    if pooled:
        y = hierarchical_mean(x, dims, keepdim=bool(keepdim))
        return y * float(math.prod(int(x.shape[d]) for d in dims)) if total else y
    k = (sites or {}).get((tuple(x.shape), dims))
    return NotImplemented if not k else call(x * 2.0 ** -k) * 2.0 ** k


def _split(x, args, kwargs):
    """(dim, keepdim, dtype, out) of a mean / sum call, positional or keyword; torch.sum(x) has no dim."""
    dim = args[0] if args else kwargs.get("dim", kwargs.get("axis"))
    if isinstance(dim, torch.dtype):              # torch.sum(x, torch.float32)
        return None, False, dim, kwargs.get("out")
    keepdim = args[1] if len(args) > 1 else kwargs.get("keepdim", False)
    return dim, keepdim, kwargs.get("dtype"), kwargs.get("out")


def _ones(size) -> bool:
    return all(s == 1 for s in ((size,) if isinstance(size, int) else tuple(size)))


def _adaptive(spatial: int):
    def parse(x, args, kwargs):
        size = args[0] if args else kwargs.get("output_size")
        if x.dim() <= spatial or size is None or not _ones(size):
            return None
        return tuple(range(x.dim() - spatial, x.dim())), True, None, None
    return parse


def _global_avg_pool2d(x, args, kwargs):
    """Only a pool whose one window is the whole plane (F.avg_pool2d(x, x.shape[2:]))."""
    names = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")
    given = dict(zip(names, args), **kwargs)
    k = given.get("kernel_size")
    k = (k, k) if isinstance(k, int) else tuple(k or ())
    if x.dim() != 4 or k != tuple(x.shape[-2:]) or given.get("padding", 0) not in (0, (0, 0), [0, 0]) or \
            given.get("divisor_override") is not None:
        return None
    return (2, 3), True, None, None


def _register(func, parse, total: bool) -> None:
    # the opt-in pooled form first: when both are enabled it is the one that runs
    for name, pooled in (("patch_pooled_reductions", True), ("patch_safe_reductions", False)):
        def handler(input, *args, _pooled=pooled, **kwargs):
            if not isinstance(input, torch.Tensor):
                return NotImplemented
            parsed = parse(input, args, kwargs)
            if parsed is None:
                return NotImplemented
            return _route(lambda y: func(y, *args, **kwargs), input, *parsed, total=total, pooled=_pooled)
        register_handler(func, name)(handler)


for _func in (torch.mean, torch.Tensor.mean):
    _register(_func, _split, total=False)
for _func in (torch.sum, torch.Tensor.sum):
    _register(_func, _split, total=True)
_register(F.adaptive_avg_pool2d, _adaptive(2), total=False)
_register(F.adaptive_avg_pool1d, _adaptive(1), total=False)
_register(F.avg_pool2d, _global_avg_pool2d, total=False)


class _Recorder:
    """The pre-pass: the exponent k for each long reduction whose sum of |x| reaches `limit` on the examples."""

    def __init__(self, limit: float):
        self.limit, self.sites = limit, {}

    def see(self, x: torch.Tensor, dims: tuple[int, ...]) -> None:
        with torch.no_grad():
            total = float(x.detach().abs().sum(dim=dims).max())
        if self.limit <= total < math.inf:
            key = (tuple(x.shape), dims)
            self.sites[key] = max(self.sites.get(key, 0), math.ceil(math.log2(total / TARGET)))


@register("patch_safe_reductions", wall="fp16_overflow")
def patch_safe_reductions(model: nn.Module, example_inputs=None, limit: float = DEFAULT_LIMIT) -> list[Change]:
    """Record where the prescaled reduction applies and its k (module docstring); returns no changes itself
    (the functional pass lists them). Without example inputs nothing is recorded and nothing will change."""
    if example_inputs is None:
        return []
    from ..apply import split_example_inputs
    from ..functional import GpuRewriteMode

    args, kwargs = split_example_inputs(example_inputs)
    with SITES.active(_Recorder(limit)) as recorder, torch.no_grad(), \
            GpuRewriteMode(include=["patch_safe_reductions"]):
        model(*args, **kwargs)
    SITES.store(model, dict(recorder.sites))
    return []


@register("patch_pooled_reductions", wall="fp16_overflow", default=False)
def patch_pooled_reductions(model: nn.Module) -> list[Change]:
    """Functional only, opt-in (module docstring): every long reduction as `hierarchical_mean`."""
    return []
