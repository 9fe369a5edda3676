"""SplitComplex: a complex tensor carried as two real tensors while a GpuRewriteWrapper traces a model.

The converter has no complex dtype ('Lowering not found: aten.complex'), so the functional STFT handler
(`fft.functional`) returns its complex spectrogram as a SplitComplex(re, im). It is a tensor-like
object (`__torch_function__`), not a Tensor: the consumers that models put after torch.stft are computed
on the two real parts --

  * magnitude / power: `abs()` / `torch.abs` (sqrt(re^2 + im^2)), `z * z.conj()`, `.pow(2)` / `** 2`
    (the complex square), `torch.angle` (atan2);
  * views: `torch.view_as_real` ([..., 2], re then im), `.real` / `.imag`, `torch.real` / `torch.imag`;
  * structure, applied to both parts: indexing, reshape / view / permute / transpose / (un)squeeze /
    flatten / narrow / contiguous / detach, and `.shape` / `.dim()` / `.size()`;
  * arithmetic: + - * with a real tensor / number or another SplitComplex, / by a real tensor or number,
    `conj()`, `torch.istft` (handled in `fft.functional`).

Anything else materialises a true complex tensor with torch.complex(re, im) and runs the original op:
right in eager torch, and under export it fails exactly as the unrewritten model would ('aten.complex'),
so an unsupported consumer never yields a silently wrong graph. Exact: every supported op is the
textbook real-arithmetic form of the complex op (fp32 rounding; abs = sqrt(re^2 + im^2) without the
overflow-avoiding scaling of hypot, so |z| beyond ~1.8e19 overflows where torch.abs would not).
"""
from __future__ import annotations

import torch

ISTFT = None       # set by fft.functional: istft of a SplitComplex (called when the rewrite mode is off)
_STRUCTURAL = ("reshape", "view", "permute", "transpose", "unsqueeze", "squeeze", "flatten", "narrow",
               "contiguous", "detach", "clone", "movedim", "swapaxes", "__getitem__", "flip", "roll", "cpu")


class SplitComplex:
    """A complex tensor as (re, im) real tensors of one shape; see the module docstring."""

    __slots__ = ("re", "im")

    def __init__(self, re: torch.Tensor, im: torch.Tensor):
        if re.shape != im.shape:
            raise ValueError(f"real and imaginary parts differ in shape: {tuple(re.shape)} vs {tuple(im.shape)}")
        self.re, self.im = re, im

    # ------------------------------------------------------------------ tensor-like basics
    @property
    def shape(self):
        return self.re.shape

    @property
    def dtype(self):
        return torch.complex128 if self.re.dtype == torch.float64 else torch.complex64

    @property
    def device(self):
        return self.re.device

    @property
    def ndim(self) -> int:
        return self.re.dim()

    def dim(self) -> int:
        return self.re.dim()

    def size(self, dim=None):
        return self.re.size() if dim is None else self.re.size(dim)

    def numel(self) -> int:
        return self.re.numel()

    def is_complex(self) -> bool:
        return True

    def __len__(self) -> int:
        return len(self.re)

    def __repr__(self) -> str:
        return f"SplitComplex(shape={tuple(self.shape)}, dtype={self.re.dtype})"

    def materialize(self) -> torch.Tensor:
        """The true complex tensor (host-side / fallback; not convertible). Built with torch functions off, so
        the rewrite mode's torch.complex handler does not turn it back into a SplitComplex."""
        with torch._C.DisableTorchFunction():
            return torch.complex(self.re, self.im)

    # ------------------------------------------------------------------ values
    @property
    def real(self) -> torch.Tensor:
        return self.re

    @property
    def imag(self) -> torch.Tensor:
        return self.im

    def abs(self) -> torch.Tensor:
        return torch.sqrt(self.re * self.re + self.im * self.im)

    __abs__ = abs

    def angle(self) -> torch.Tensor:
        return torch.atan2(self.im, self.re)

    def conj(self) -> "SplitComplex":
        return SplitComplex(self.re, -self.im)

    def view_as_real(self) -> torch.Tensor:
        return torch.cat([self.re.unsqueeze(-1), self.im.unsqueeze(-1)], -1)

    def pow(self, exponent):
        if isinstance(exponent, (int, float)) and exponent == 2:
            return self * self
        if isinstance(exponent, (int, float)) and exponent == 1:
            return self
        return _fallback(torch.Tensor.pow, (self, exponent), {})

    __pow__ = pow

    def square(self):
        return self * self

    # ------------------------------------------------------------------ arithmetic
    def __mul__(self, other):
        if isinstance(other, SplitComplex):
            return SplitComplex(self.re * other.re - self.im * other.im, self.re * other.im + self.im * other.re)
        if _real(other):
            return SplitComplex(self.re * other, self.im * other)
        return _fallback(torch.Tensor.mul, (self, other), {})

    __rmul__ = __mul__
    mul = __mul__

    def __truediv__(self, other):
        if _real(other):
            return SplitComplex(self.re / other, self.im / other)
        return _fallback(torch.Tensor.div, (self, other), {})

    div = __truediv__

    def __add__(self, other):
        if isinstance(other, SplitComplex):
            return SplitComplex(self.re + other.re, self.im + other.im)
        if _real(other):
            return SplitComplex(self.re + other, self.im)
        return _fallback(torch.Tensor.add, (self, other), {})

    __radd__ = __add__
    add = __add__

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def __neg__(self):
        return SplitComplex(-self.re, -self.im)

    # ------------------------------------------------------------------ structure
    def __getattr__(self, name):
        if name == "istft":
            return lambda *args, **kwargs: torch.istft(self, *args, **kwargs)
        if name in _STRUCTURAL:
            def both(*args, **kwargs):
                return SplitComplex(getattr(self.re, name)(*args, **kwargs), getattr(self.im, name)(*args, **kwargs))
            return both
        method = getattr(torch.Tensor, name, None)
        if method is None:
            raise AttributeError(name)
        return lambda *args, **kwargs: _fallback(method, (self,) + args, kwargs)

    def __getitem__(self, index):
        return SplitComplex(self.re[index], self.im[index])

    # ------------------------------------------------------------------ torch functions
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.istft, torch.Tensor.istft) and ISTFT is not None:
            out = ISTFT(*args, **kwargs)
            if out is not NotImplemented:
                return out
        impl = _TORCH_IMPLS.get(func)
        if impl is not None:
            out = impl(*args, **kwargs)
            if out is not NotImplemented:
                return out
        name = getattr(func, "__name__", "")
        if args and isinstance(args[0], SplitComplex) and name in _STRUCTURAL and \
                not any(isinstance(a, SplitComplex) for a in args[1:]):
            return getattr(args[0], name)(*args[1:], **kwargs)
        return _fallback(func, args, kwargs)


def _real(v) -> bool:
    return isinstance(v, (int, float)) or (isinstance(v, torch.Tensor) and not v.is_complex())


def _materialize(v):
    if isinstance(v, SplitComplex):
        return v.materialize()
    if isinstance(v, (list, tuple)):
        return type(v)(_materialize(a) for a in v)
    return v


def _fallback(func, args, kwargs):
    """Run `func` on true complex tensors (eager: right; export: fails as the original model does)."""
    return func(*_materialize(tuple(args)), **{k: _materialize(v) for k, v in kwargs.items()})


def _mul(a, b, *, out=None):
    if out is not None:
        return NotImplemented
    if isinstance(a, SplitComplex):
        return a * b
    return b * a


_TORCH_IMPLS = {
    torch.abs: lambda z, *, out=None: z.abs() if out is None else NotImplemented,
    torch.Tensor.abs: lambda z: z.abs(),
    torch.angle: lambda z, *, out=None: z.angle() if out is None else NotImplemented,
    torch.view_as_real: lambda z: z.view_as_real(),
    torch.real: lambda z: z.re,
    torch.imag: lambda z: z.im,
    torch.conj: lambda z: z.conj(),
    torch.mul: _mul,
    torch.Tensor.mul: _mul,
    torch.Tensor.__mul__: _mul,
    torch.Tensor.__rmul__: _mul,
    torch.square: lambda z, *, out=None: z * z if out is None else NotImplemented,
    torch.pow: lambda z, e, *, out=None: z.pow(e) if out is None and isinstance(z, SplitComplex) else NotImplemented,
    torch.Tensor.pow: lambda z, e: z.pow(e) if isinstance(z, SplitComplex) else NotImplemented,
    torch.Tensor.__pow__: lambda z, e: z.pow(e) if isinstance(z, SplitComplex) else NotImplemented,
    torch.Tensor.__getitem__: lambda z, i: z[i],
    torch.Tensor.dim: lambda z: z.dim(),
    torch.Tensor.size: lambda z, dim=None: z.size(dim),
}
