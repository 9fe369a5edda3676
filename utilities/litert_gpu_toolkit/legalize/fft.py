"""Rule: a discrete Fourier transform of real data whose result is read as real numbers becomes matrix products.

litert-torch cannot lower complex tensors (CONVERT_FAIL 'torch.complex64', 'Lowering not found: aten._fft_r2c'), and
the GPU has no FFT. Whatever Python spelt it (`torch.fft.fft`, `fftn`, `rfft`, FNet's `fftn(x, dim=(1, 2)).real`),
the exported graph holds the same few ops: torch.fft's `fft_fft` / `fft_rfft` / `fft_fftn` / ... (or ATen's
`_fft_r2c` / `_fft_c2c` after a cast to complex), read back through `view_as_real` (and a select of the real or
imaginary part) or `abs`. Each complex value is carried as two real tensors (re, im); a DFT along an axis is the
axis moved last and a product with constant cos / sin matrices ([n, m], m = n // 2 + 1 for a one-sided transform),
with the normalisation folded into them:

    forward:  re' = re C + im S,  im' = im C - re S        inverse:  re' = re C - im S,  im' = im C + re S

(an absent imaginary part is an exact zero and its products are not emitted). Equal to fp32 rounding of the DFT
sums (an FFT sums in another order; measured relative error ~1e-6 at n = 64, growing like the sum's length).
The matrices hold n * m entries per axis: axes longer than MAX_N are left as they were and named, as is a complex
value read by any other op (a complex product, a graph output) -- the rule converts a whole complex chain or none
of it.
"""
from __future__ import annotations

import math

import torch

from .nodes import shape, source_line

_aten = torch.ops.aten
MAX_N = 2048                    # the largest transformed axis: an [n, n] matrix of 4 M entries
# torch.fft's ops as export keeps them, and ATen's own: (inverse, one-sided, default axes; None: all)
_OPS = {_aten.fft_fft.default: (False, False, [-1]), _aten.fft_ifft.default: (True, False, [-1]),
        _aten.fft_rfft.default: (False, True, [-1]), _aten.fft_fft2.default: (False, False, [-2, -1]),
        _aten.fft_ifft2.default: (True, False, [-2, -1]), _aten.fft_rfft2.default: (False, True, [-2, -1]),
        _aten.fft_fftn.default: (False, False, None), _aten.fft_ifftn.default: (True, False, None),
        _aten.fft_rfftn.default: (False, True, None)}
_SOURCES = (*_OPS, _aten._fft_r2c.default, _aten._fft_c2c.default)
_NORM = {None: 0, "backward": 0, "ortho": 1, "forward": 2}     # forward transforms; an inverse's is 2 - this


def _arguments(n: torch.fx.Node) -> dict:
    names = [a.name for a in n.target._schema.arguments]
    out = {a.name: a.default_value for a in n.target._schema.arguments if a.has_default_value()}
    out.update(zip(names, n.args))
    out.update(n.kwargs)
    return out


def _spec(n: torch.fx.Node, rank: int) -> tuple[list[int], int, bool, bool] | None:
    """(axes, normalisation 0 / 1 / 2 = none / 1/sqrt(n) / 1/n, inverse, one-sided) of a DFT node, or None when it
    pads or trims (n / s given)."""
    a = _arguments(n)
    if n.target is _aten._fft_r2c.default:
        return [d % rank for d in a["dim"]], a["normalization"], False, bool(a["onesided"])
    if n.target is _aten._fft_c2c.default:
        return [d % rank for d in a["dim"]], a["normalization"], not a["forward"], False
    inverse, onesided, axes = _OPS[n.target]
    if a.get("n") is not None or a.get("s") is not None or a.get("norm") not in _NORM:
        return None
    dims = a.get("dim")
    dims = axes if dims is None else ([dims] if isinstance(dims, int) else list(dims))
    dims = list(range(rank)) if dims is None else [d % rank for d in dims]
    norm = _NORM[a.get("norm")]
    return dims, (2 - norm if inverse else norm), inverse, onesided


def _is_complex(node) -> bool:
    v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(v, torch.Tensor) and v.is_complex()


def _chain(start: torch.fx.Node) -> tuple[list[torch.fx.Node], list[torch.fx.Node]] | None:
    """(complex nodes, their real readers) of the complex chain through `start`, or None if any part is not this
    rule's: a complex value made by another op, or read by one."""
    seen, readers, todo = [], [], [start]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.append(n)
        if n.target not in (*_SOURCES, _aten._to_copy.default):
            return None
        src = n.args[0]
        if _is_complex(src):
            todo.append(src)
        for u in n.users:
            if _is_complex(u):
                todo.append(u)
            elif u.target in (_aten.view_as_real.default, _aten.abs.default):
                readers.append(u)
            else:
                return None
    return seen, readers


def _dft(n_in: int, m: int, norm: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[m, n_in] weight matrices (as F.linear takes them) of cos and sin, normalisation folded in."""
    k = torch.arange(m, dtype=torch.float64)[:, None]
    t = torch.arange(n_in, dtype=torch.float64)[None, :]
    angle = 2 * math.pi * ((k * t) % n_in) / n_in        # reduced first: exact table values at large k * t
    scale = {0: 1.0, 1: 1 / math.sqrt(n_in), 2: 1 / n_in}[norm]
    return (torch.cos(angle) * scale).float(), (torch.sin(angle) * scale).float()


class _Emit:
    def __init__(self, gm: torch.fx.GraphModule, at: torch.fx.Node):
        self.gm, self.graph, self.at, self.count = gm, gm.graph, at, 0

    def call(self, target, *args):
        return self.graph.call_function(target, tuple(args))

    def const(self, value: torch.Tensor):
        name = f"_legal_dft_{self.at.name}_{self.count}"
        self.count += 1
        self.gm.register_buffer(name, value, persistent=False)
        return self.graph.get_attr(name)

    def along(self, x, axis: int, rank: int, weight):
        """x's `axis` transformed by F.linear with `weight` ([m, n]): the axis moved last and back."""
        order = list(range(rank))
        order[axis], order[-1] = order[-1], order[axis]
        moved = x if axis == rank - 1 else self.call(_aten.permute.default, x, order)
        y = self.call(_aten.linear.default, moved, weight)
        return y if axis == rank - 1 else self.call(_aten.permute.default, y, order)


def _transform(emit: _Emit, re, im, dims: list[int], sizes: list[int], norm: int, inverse: bool, onesided: bool):
    """(re, im) after a DFT along each of `dims` in turn; im None means an exact zero."""
    rank = len(sizes)
    for i, axis in enumerate(dims):
        n_in = sizes[axis]
        m = n_in // 2 + 1 if onesided and i == len(dims) - 1 else n_in
        cos, sin = _dft(n_in, m, norm)                  # the direction's sign is in the combination below
        c, s = emit.const(cos), emit.const(sin)
        rc, rs = emit.along(re, axis, rank, c), emit.along(re, axis, rank, s)
        if im is None:
            re, im = rc, (rs if inverse else emit.call(_aten.neg.default, rs))
        else:
            ic, is_ = emit.along(im, axis, rank, c), emit.along(im, axis, rank, s)
            if inverse:
                re, im = emit.call(_aten.sub.Tensor, rc, is_), emit.call(_aten.add.Tensor, ic, rs)
            else:
                re, im = emit.call(_aten.add.Tensor, rc, is_), emit.call(_aten.sub.Tensor, ic, rs)
        sizes = [m if a == axis else size for a, size in enumerate(sizes)]
    return re, im


def _zero_like(emit: _Emit, x):
    return emit.call(_aten.mul.Tensor, x, 0.0)


def _rewrite(gm: torch.fx.GraphModule, nodes: list[torch.fx.Node], readers: list[torch.fx.Node]) -> None:
    pairs: dict[torch.fx.Node, tuple] = {}
    graph = gm.graph
    for n in graph.nodes:                                 # graph order: a node's source is paired first
        if n not in nodes:
            continue
        emit = _Emit(gm, n)
        with graph.inserting_before(n):
            src = n.args[0]
            re, im = pairs[src] if src in pairs else (src, None)
            if n.target is _aten._to_copy.default:
                pairs[n] = (re, im)
                continue
            sizes = list(shape(src))
            dims, norm, inverse, onesided = _spec(n, len(sizes))
            pairs[n] = _transform(emit, re, im, dims, sizes, norm, inverse, onesided)
    for u in readers:
        emit = _Emit(gm, u)
        re, im = pairs[u.args[0]]
        with graph.inserting_before(u):
            im = im if im is not None else _zero_like(emit, re)
            if u.target is _aten.abs.default:
                sq = emit.call(_aten.add.Tensor, emit.call(_aten.mul.Tensor, re, re),
                               emit.call(_aten.mul.Tensor, im, im))
                u.replace_all_uses_with(emit.call(_aten.sqrt.default, sq))
                continue
            for s in list(u.users):                       # view_as_real: a select of one part, else the stacked pair
                if s.target is _aten.select.int and s.args[1] in (-1, len(shape(u)) - 1):
                    s.replace_all_uses_with(re if s.args[2] == 0 else im)
            if u.users:
                u.replace_all_uses_with(emit.call(_aten.stack.default, [re, im], -1))


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    done, left, handled = [], [], set()
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in _SOURCES or n in handled:
            continue
        chain = _chain(n)
        where = source_line(n) or "no source"
        if chain is None:
            left.append(f"complex value from {n.target.__name__.split('.')[0]} read by an op this rule does not "
                        f"carry ({where})")
            handled.add(n)
            continue
        nodes, readers = chain
        handled.update(nodes)
        specs = [(x, _spec(x, len(shape(x)))) for x in nodes if x.target in _SOURCES and shape(x) is not None]
        if any(shape(x) is None for x in nodes) or any(sp is None for _, sp in specs):
            left.append(f"DFT of unknown shape, or padded / trimmed to another length ({where})")
            continue
        if any(shape(x.args[0])[d] > MAX_N for x, sp in specs for d in sp[0]):
            left.append(f"DFT over an axis longer than {MAX_N} ({where})")
            continue
        _rewrite(gm, nodes, readers)
        done.append(where)
    return [f"DFT of real data read as real numbers -> cos / sin matrix products x{len(done)} (fp32 rounding of "
            f"the DFT sums): {'; '.join(dict.fromkeys(done))}"] * bool(done), left
