"""fp16-safe reductions: LayerNorm, RMSNorm, InstanceNorm, GroupNorm and long means/sums.

The wall: the model converts and runs fully on the GPU, but the GPU computes in fp16 (max 65504).
A variance or a sum of squares of activations in the hundreds passes 65504 element by element
(x*x) and turns into inf; the normalisation then divides it away, so the output is all-zero or
NaN (symptoms `fp16_overflow`, `fp16_silent_zero`). Phone GPUs also *accumulate* in fp16, so a
plain mean or sum over many elements overflows or loses precision there even when each element
is small (`fp16_degraded`). Measured on llvmpipe (software Vulkan) the accumulator behaves closer
to fp32 but a mean over 128x128 still loses precision; see the toolkit README's table.

The rewrites stay in a down-scaled domain:

    S   = max(max|x| over the normalised axes, 1)          (per row / per instance / per group)
    xs  = x / S                                             (|xs| <= 1)
    out = (xs - mean(xs)) * rsqrt(var(xs) + eps / S^2)      (LayerNorm / InstanceNorm / GroupNorm)
    out = xs * rsqrt(mean(xs^2) + eps / S^2)                (RMSNorm)

which equals the original formula exactly in real arithmetic for any S > 0 (the epsilon is
scaled with the data). With an eps fp16 cannot hold (below 2^-24: BERT's and ESM's 1e-12) the denominator
is clamped to at least 2^-24, so an all-zero row stays 0 instead of 0 * inf = NaN (`_nonzero`; in fp32 the
same result whenever var + eps / S^2 >= 2^-24, i.e. every row but a near-constant one). The
variance is never multiplied back by S^2, so no intermediate exceeds
4 * (number of reduced elements) and nothing ever exceeds max|x|. eps / S^2 is computed as
(sqrt(eps) / S)^2, which can underflow to 0 but never overflow. In torch fp32 the result agrees
with the original module to a few fp32 ulps of the output (tests use 2e-5 absolute on unit-scale
outputs).

`hierarchical_mean` replaces a big reduction with a cascade of small average pools for ANY sizes:
each axis is zero-padded once to r * 2^j (r <= 7), then j stages of 2x2 pools and one final pool of
at most 7 x 7 values (split into r_h x 1 and 1 x r_w above 16 values); one constant factor corrects
for the padded zeros. Error bound: with window sizes k_1..k_s along the cascade and unit roundoff
u (fp16: 2^-11, fp32: 2^-24), |result - mean| <= gamma(K) * mean(|x|), K = sum_i (k_i + 1) + 1,
gamma(n) = n*u / (1 - n*u) (per stage k_i - 1 additions, the 1/k_i scale and the stored result;
one more for the final factor). For 128x128: five 2x2 stages and a 4x4 one, K = 43, i.e. at most
2.1 % of mean|x| in fp16 (typical errors are far smaller), against gamma(16383) for a sequential
fp16 sum, which bounds nothing. No stage input exceeds max|x| (a window's own sum is at most
k_i * max|x|), so nothing overflows unless max|x| * k_i does.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import Change, named_modules_of, register, set_submodule


# ---------------------------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------------------------

def _near_square_split(n: int) -> tuple[int, int]:
    """n = h * w with h the largest divisor of n not above sqrt(n) (h = 1 for primes)."""
    h = int(math.isqrt(n))
    while n % h:
        h -= 1
    return h, n // h


def _cascade_plan(n: int) -> tuple[int, int]:
    """(j, r): j halvings then one final window of r <= 7, over n padded up to r * 2**j.

    r is the smallest count <= 7 reachable by halving, so the padding is below 2**j <= n / 3.5
    (less than 29 % extra per axis) and it is applied once, before the first stage."""
    j = 0
    while -(-n // 2 ** j) > _MAX_FINAL:
        j += 1
    return j, -(-n // 2 ** j)


_MAX_FINAL = 7


def _pool_cascade(y: torch.Tensor) -> torch.Tensor:
    """Mean over the last two axes of a rank-4 tensor by a cascade of small average pools.

    Each axis is zero-padded once to r * 2**j (see `_cascade_plan`); then j stages of 2x2 (or 2x1 /
    1x2) pools and a final pool of r_h x r_w (split into r_h x 1 and 1 x r_w when that is more
    than 16 values) tile the padded plane exactly, so the result is sum / (H' * W') and one constant
    factor H' * W' / (H * W) turns it into the mean of the H * W original values (ceil-mode pooling
    with the partial windows weighted by their true share)."""
    h, w = int(y.shape[-2]), int(y.shape[-1])
    (jh, rh), (jw, rw) = _cascade_plan(h), _cascade_plan(w)
    hp, wp = rh * 2 ** jh, rw * 2 ** jw
    if hp != h or wp != w:
        y = F.pad(y, (0, wp - w, 0, hp - h))
    for stage in range(max(jh, jw)):
        k = (2 if stage < jh else 1, 2 if stage < jw else 1)
        y = F.avg_pool2d(y, k, stride=k)
    if rh * rw <= 16:
        finals = [(rh, rw)]
    else:
        finals = [(rh, 1), (1, rw)]
    for k in finals:
        if k != (1, 1):
            y = F.avg_pool2d(y, k, stride=k)
    if hp * wp != h * w:
        y = y * (hp * wp / (h * w))
    return y


def hierarchical_mean(x: torch.Tensor, dims, keepdim: bool = True) -> torch.Tensor:
    """Mean of `x` over `dims` as a cascade of small average pools; exact for any sizes.

    Bound (see module docstring): |result - mean| <= gamma(sum_i (k_i + 1) + 1) * mean(|x|) over
    the pooling windows k_i, and no stage input larger than max|x|. The reduced axes are
    moved last and viewed as an H x W plane (two axes: as they are; one or more than two: the
    flattened length split into a near-square H * W). Lowers to PAD / AVERAGE_POOL_2D / MUL
    plus RESHAPE (and TRANSPOSE when the reduced axes are not already last).
    """
    if isinstance(dims, int):
        dims = (dims,)
    nd = x.dim()
    dims = sorted({d % nd for d in dims})
    if not dims:
        return x
    kept = [d for d in range(nd) if d not in dims]
    perm = kept + dims
    xp = x.permute(perm) if perm != list(range(nd)) else x
    kept_shape = [int(x.shape[d]) for d in kept]
    red = [int(x.shape[d]) for d in dims]
    m = math.prod(kept_shape)
    if len(red) == 2:
        h, w = red
    else:
        h, w = _near_square_split(math.prod(red))
    y = _pool_cascade(xp.reshape(1, m, h, w))
    if keepdim:
        return y.reshape([1 if d in dims else int(x.shape[d]) for d in range(nd)])
    return y.reshape(kept_shape)


def safe_mean(x: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """Single-axis mean over many elements without an fp16 accumulator (hierarchical_mean)."""
    return hierarchical_mean(x, (dim,), keepdim=keepdim)


def safe_sum(x: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """Single-axis sum as safe_mean * N: no partial sum is ever formed, so only a result that is
    itself beyond fp16's range (|sum| > 65504) can overflow. Same relative bound as hierarchical_mean
    (one more rounding for the final * N)."""
    return safe_mean(x, dim, keepdim=keepdim) * float(x.shape[dim])


def row_scale(x: torch.Tensor, dims) -> torch.Tensor:
    """S = max(max|x| over `dims`, 1), keepdim. A max never accumulates, so it cannot overflow;
    rows already within [-1, 1] keep S = 1 and are computed exactly as the plain formula."""
    return torch.clamp(torch.amax(torch.abs(x), dim=tuple(dims), keepdim=True), min=1.0)


def _scaled_eps(eps: float, s: torch.Tensor, distinct: bool = False) -> torch.Tensor:
    """eps / S^2 as (sqrt(eps) / S)^2: may underflow to 0, never overflows. `distinct`: as
    exp(log(eps) - 2 log S) instead (a few ulps of a term that only guards against division by
    zero), so no op multiplies a tensor by itself -- phones decline ops with identical inputs
    (LiteRT#9192), and the converter merges two spellings of the same factor back into one."""
    if distinct:
        return torch.exp(math.log(eps) - 2.0 * torch.log(s))
    e = math.sqrt(eps) / s
    return e * e


FP16_TINY = 2.0 ** -24          # fp16's smallest positive (subnormal) value


def _nonzero(den: torch.Tensor, eps: float) -> torch.Tensor:
    """`den` clamped to at least 2^-24 when `eps` is below it. An all-zero row (padding that a model zeroes,
    ESM's masked embeddings) has variance 0, and such an eps is 0 in fp16, so the GPU's rsqrt(0) = inf times the
    row's zeros gave NaN; clamped, it is 0 * 4096 = 0, as in fp32. One MAXIMUM, only for such an eps; an eps fp16
    holds keeps the plain form (its denominator is never 0)."""
    return torch.clamp(den, min=FP16_TINY) if eps < FP16_TINY else den


def _second_copy(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """x / S computed a second way (x * (1 / S)): equal to `x / s` within one fp32 rounding, but a
    different tensor in the graph, so `xs * _second_copy(x, s)` is a square with two inputs."""
    return x * torch.reciprocal(s)


def _normalise(x: torch.Tensor, dims, eps: float, hierarchical: bool, distinct: bool = False) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over `dims`, computed on x / S (see module docstring)."""
    s = row_scale(x, dims)
    xs = x / s
    mean = (lambda t: hierarchical_mean(t, dims)) if hierarchical else \
        (lambda t: t.mean(dim=tuple(dims), keepdim=True))
    mu = mean(xs)
    d = xs - mu
    var = mean(d * (_second_copy(x, s) - mu) if distinct else d * d)
    return d * torch.rsqrt(_nonzero(var + _scaled_eps(eps, s, distinct), eps))


# ---------------------------------------------------------------------------------------------
# modules
# ---------------------------------------------------------------------------------------------

class SafeLayerNorm(nn.Module):
    """nn.LayerNorm in the down-scaled domain (shares the original weight and bias).

    channels_first=True: normalise a [N, C, ...] tensor over axis 1 (the channels-first LayerNorm of
    ConvNeXt / ConvNeXt V2 / SegFormer-style heads, written as permute + LayerNorm + permute); the
    formula is the same, so the result equals the original to fp32 rounding and the two transposes go."""

    def __init__(self, ln: nn.LayerNorm, hierarchical: bool = False, distinct_squares: bool = False,
                 channels_first: bool = False):
        super().__init__()
        self.normalized_shape = tuple(ln.normalized_shape)
        self.eps = float(ln.eps)
        self.weight = ln.weight
        self.bias = ln.bias
        self.hierarchical = hierarchical
        self.distinct_squares = distinct_squares
        self.channels_first = channels_first

    def forward(self, x):
        if self.channels_first:
            dims: tuple[int, ...] = (1,)
            shape = [-1] + [1] * (x.dim() - 2)
        else:
            dims = tuple(range(-len(self.normalized_shape), 0))
            shape = None
        y = _normalise(x, dims, self.eps, self.hierarchical, self.distinct_squares)
        if self.weight is not None:
            y = y * (self.weight.reshape(shape) if shape else self.weight)
        if self.bias is not None:
            y = y + (self.bias.reshape(shape) if shape else self.bias)
        return y


class SafeRMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * (offset + weight), computed on x / S.

    `offset` is 0 for nn.RMSNorm / LlamaRMSNorm and 1 for Gemma-style norms (decided by probing
    the original module, see `patch_rmsnorm`)."""

    def __init__(self, weight, eps: float, ndims: int = 1, offset: float = 0.0, hierarchical: bool = False,
                 distinct_squares: bool = False):
        super().__init__()
        self.weight = weight
        self.eps = float(eps)
        self.ndims = ndims
        self.offset = float(offset)
        self.hierarchical = hierarchical
        self.distinct_squares = distinct_squares

    def forward(self, x):
        dims = tuple(range(-self.ndims, 0))
        s = row_scale(x, dims)
        xs = x / s
        sq = xs * _second_copy(x, s) if self.distinct_squares else xs * xs
        ms = hierarchical_mean(sq, dims) if self.hierarchical else sq.mean(dim=dims, keepdim=True)
        y = xs * torch.rsqrt(_nonzero(ms + _scaled_eps(self.eps, s, self.distinct_squares), self.eps))
        if self.weight is not None:
            y = y * (self.weight + self.offset if self.offset else self.weight)
        return y


class SafeInstanceNorm(nn.Module):
    """InstanceNorm1d/2d/3d (batch statistics) in the down-scaled domain with hierarchical means."""

    def __init__(self, norm: nn.modules.instancenorm._InstanceNorm):
        super().__init__()
        self.eps = float(norm.eps)
        self.weight = norm.weight if norm.affine else None
        self.bias = norm.bias if norm.affine else None
        self.spatial = {nn.InstanceNorm1d: 1, nn.InstanceNorm2d: 2, nn.InstanceNorm3d: 3}[type(norm)]

    def forward(self, x):
        dims = tuple(range(x.dim() - self.spatial, x.dim()))
        y = _normalise(x, dims, self.eps, hierarchical=True)
        return _affine(y, self.weight, self.bias, [-1] + [1] * self.spatial)


def _affine(y, weight, bias, shape):
    """y * weight + bias per channel, either of them possibly None (timm's GroupNorm1NoBias keeps `affine` and
    sets its bias to None)."""
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


# ---------------------------------------------------------------------------------------------
# patches
# ---------------------------------------------------------------------------------------------

@register("patch_safe_layernorm", wall="fp16_overflow")
def patch_safe_layernorm(model: nn.Module, hierarchical: bool = False, distinct_squares: bool = False) -> list[Change]:
    """Replace every nn.LayerNorm with SafeLayerNorm. `hierarchical=True` also replaces the two
    means by hierarchical_mean (for GPUs that accumulate in fp16: phones). `distinct_squares=True`
    computes every square from two differently computed copies (within one fp32 rounding), so no op
    takes the same tensor twice -- the phone-only wall LiteRT#9192 that `lint` reports."""
    changes = []
    for path, ln in named_modules_of(model, nn.LayerNorm):
        if not path:
            continue
        layout = _layernorm_layout(ln)
        if layout is None:                     # a subclass computing something else: leave it alone
            continue
        set_submodule(model, path, SafeLayerNorm(ln, hierarchical, distinct_squares,
                                                 channels_first=layout == "channels_first"))
        how = " (channels-first)" if layout == "channels_first" else ""
        changes.append(Change(path, f"{type(ln).__name__}{tuple(ln.normalized_shape)}{how} -> down-scaled "
                                    "SafeLayerNorm", "patch_safe_layernorm", True))
    return changes


def _layernorm_layout(ln: nn.LayerNorm) -> str | None:
    """'channels_last' for nn.LayerNorm (and subclasses that normalise the last axes), 'channels_first'
    for a subclass that normalises axis 1 of [N, C, H, W] (probed), None for anything else."""
    if type(ln).forward is nn.LayerNorm.forward:
        return "channels_last"
    shape = tuple(ln.normalized_shape)
    gen = torch.Generator().manual_seed(0)
    w = ln.weight if ln.weight is not None else None
    b = ln.bias if ln.bias is not None else None
    with torch.no_grad():
        x = torch.randn(2, 3, *shape, generator=gen) * 3.0
        try:
            got = ln(x)
            if got.shape == x.shape and torch.allclose(got, F.layer_norm(x, shape, w, b, ln.eps), rtol=1e-4,
                                                       atol=1e-5):
                return "channels_last"
        except Exception:                      # noqa: BLE001 - the subclass wants another layout
            pass
        if len(shape) != 1:
            return None
        x = torch.randn(2, shape[0], 3, 5, generator=gen) * 3.0
        try:
            got = ln(x)
        except Exception:                      # noqa: BLE001
            return None
        want = F.layer_norm(x.permute(0, 2, 3, 1), shape, w, b, ln.eps).permute(0, 3, 1, 2)
        if got.shape == x.shape and torch.allclose(got, want, rtol=1e-4, atol=1e-5):
            return "channels_first"
    return None


def _rms_eps(m) -> float | None:
    for attr in ("variance_epsilon", "eps", "epsilon"):
        value = getattr(m, attr, None)
        if isinstance(value, (int, float)):
            return float(value)
    if isinstance(m, nn.RMSNorm) and m.eps is None:
        return float(torch.finfo(torch.float32).eps)
    return None


def _probe_offset(m, weight, eps: float) -> float | None:
    """Which RMS formula does `m` compute? 0 (x*r*w), 1 (x*r*(1+w)), or None (neither)."""
    d = weight.shape[-1]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, d, generator=gen) * 3.0
    with torch.no_grad():
        try:
            got = m(x)
        except Exception:  # noqa: BLE001 - reported, not raised
            return None
        if not isinstance(got, torch.Tensor) or got.shape != x.shape:
            return None
        r = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        for offset in (0.0, 1.0):
            if torch.allclose(got.float(), r * (weight.float() + offset), rtol=1e-4, atol=1e-5):
                return offset
    return None


@register("patch_instance_norm", wall="fp16_overflow")
def patch_instance_norm(model: nn.Module) -> list[Change]:
    """Replace InstanceNorm{1,2,3}d that use batch statistics (the default: track_running_stats
    False) with SafeInstanceNorm. Norms using running statistics are a plain affine map and stay, and so does
    a subclass with a forward of its own (it may do more than normalise: see `group_norm`)."""
    changes = []
    for path, m in named_modules_of(model, nn.modules.instancenorm._InstanceNorm):
        if not path or (m.track_running_stats and m.running_mean is not None) \
                or type(m).forward is not nn.modules.instancenorm._InstanceNorm.forward:
            continue
        set_submodule(model, path, SafeInstanceNorm(m))
        changes.append(Change(path, f"{type(m).__name__} -> down-scaled, hierarchical SafeInstanceNorm",
                              "patch_instance_norm", True))
    return changes
