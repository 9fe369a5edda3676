"""The front door's rewrite step on its own, for pipelines that must hold the rewritten module itself (a precision
plan cuts it into graphs) rather than hand it to `convert_for_gpu`: the same rewrites, chosen by the same options."""
from __future__ import annotations

from ..rewrites.apply import apply_patches, split_example_inputs
from ..rewrites.registry import Change, functional_selection
from ..core.inputs import folded_shape
from .options import ConvertOptions


def rewrite_for_gpu(model, example_inputs, options: ConvertOptions | None = None):
    """(runnable, changes): `model`'s module patches applied in place (as `convert_for_gpu` applies them to its
    copy), then wrapped in `GpuRewriteWrapper` when functional rewrites are selected, so they act while it is
    traced. Each rewrite is as exact as its docstring states (the defaults: fp32 rounding). The wrapper holds the
    model as `.model`: a submodule named `n` in `model` is `model.n` in the runnable. Raises what a patch raises
    (no fallback here: that is `convert_for_gpu`'s)."""
    opts = options or ConvertOptions()
    if not opts.patches:
        return model, []
    changes: list[Change] = apply_patches(model, split_example_inputs(example_inputs), include=opts.include,
                                          only=opts.only, exclude=opts.exclude, approximate=opts.approximate)
    names = functional_selection(opts.include, opts.exclude, opts.approximate, opts.only)
    if not names:
        return model, changes
    from ..rewrites.functional import GpuRewriteWrapper

    return GpuRewriteWrapper(model, include=names).eval(), changes


def legalize_inputs(runnable, parsed: dict, changes: list, log: list) -> tuple[object, dict]:
    """`convert_for_gpu`'s legalization step (one signature): the exported graph with the GPU's op contract met
    (`legalize`), its change appended to `changes`; or `runnable` as it was, the reason in `log`. What the pass
    leaves outside the contract is logged with its op and source line."""
    from ..core.quiet import stage
    from ..legalize import NAME, NotLegal

    if len(parsed) != 1:
        return runnable, parsed
    (name, (args, kwargs)), = parsed.items()
    merged = _MergedInputs.of(runnable, args) if not kwargs else None
    fed = merged.fed(args) if merged else args
    try:
        out = _legalize_specialising(merged or runnable, fed, kwargs)
    except NotLegal as e:
        log.append(f"{NAME}: not applied ({e})"[:300])
        stage(log[-1])
        return runnable, parsed
    log += [f"{NAME}: left {line}" for line in out.left]
    if not out.changed:
        return runnable, parsed
    changes.append(Change("", out.describe() + (f"; {merged.describe()}" if merged else ""), NAME, True))
    stage(f"{NAME}: {out.describe()}")
    return out.module, {name: (fed, kwargs)}


def _legalize_specialising(module, args, kwargs):
    """`legalize`; when torch.export fails on a data-dependent value or size, again with each tensor-to-Python
    value and bool-mask index fixed to the example's (`lowering.specialise`). The legalized module then carries
    the specialised source lines as `specialised_lines` (convert_for_gpu warns with them). Raises NotLegal."""
    from ..legalize import NotLegal, legalize
    from ..lowering.specialise import Specialised, is_data_dependent_error, record

    try:
        return legalize(module, args, kwargs)
    except NotLegal as e:
        if not is_data_dependent_error(str(e)):
            raise
        first = e
    try:
        special = Specialised(module, record(module, args, kwargs))
    except Exception:                                   # noqa: BLE001 - the model's own error: the first reason
        raise first from None
    out = legalize(special, args, kwargs)
    out.module.specialised_lines = special.lines()
    out.done.append("data-dependent values and mask sizes fixed to the example's")
    return out


class _MergedInputs:
    """A module whose rank-5 positional inputs are fed with their last two axes merged -- the same bytes -- and
    viewed back to rank 5 inside: the graph's first op then reads a rank-4 tensor, which the GPU takes, and the
    pass carries the rest at rank <= 4 (the input layout `fold_rank5` uses; the checker feeds it the same way)."""

    @staticmethod
    def of(runnable, args):
        import torch

        shapes = {i: tuple(a.shape) for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.dim() == 5}
        if not shapes:
            return None

        class MergedInputs(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = runnable

            def forward(self, *xs):
                return self.model(*(x.reshape(shapes[i]) if i in shapes else x for i, x in enumerate(xs)))

            def fed(self, xs):
                return tuple(x.reshape(folded_shape(x.shape)) if i in shapes else x for i, x in enumerate(xs))

            def describe(self):
                return "rank-5 inputs fed with their last two axes merged (the same bytes): " + ", ".join(
                    f"args_{i} {list(s)} -> {folded_shape(s)}" for i, s in shapes.items())

        return MergedInputs().eval()
