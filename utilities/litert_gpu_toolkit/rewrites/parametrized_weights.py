"""Fold weight reparametrizations into plain parameters: weight_norm, spectral_norm, torch.nn.utils.parametrize.

A weight-normed (or spectrally normed, orthogonal, user-parametrized) layer recomputes its weight from other
parameters on every forward. For inference the weight is a constant; left in place, the recomputation is
traced into the converted graph (a norm reduction and a division per layer, or a matrix exponential that
has no lowering), and the hook version (`torch.nn.utils.weight_norm`) also keeps a non-leaf tensor on the
module that `copy.deepcopy` refuses.

`fold_parametrizations(model)` computes each such weight once (in eval mode: spectral_norm does no power
iteration) and stores it as a plain `nn.Parameter`, removing the hook or the parametrization. Exact: the
folded weight is bit-identical to the one the layer computes in an eval forward (the same fp32 computation,
done once), so outputs match the original model to fp32 rounding (in practice bit for bit).
Covers: torch.nn.utils.weight_norm / spectral_norm (forward pre-hooks) and every parametrization registered
with torch.nn.utils.parametrize (parametrizations.weight_norm, spectral_norm, orthogonal, user-defined ones).
"""
from __future__ import annotations

from .registry import Change, register

_HOOKS = {"WeightNorm": "weight_norm", "SpectralNorm": "spectral_norm"}


def _fold_hooks(path: str, module) -> list[Change]:
    import torch

    changes = []
    for hook in list(module._forward_pre_hooks.values()):
        kind = _HOOKS.get(type(hook).__name__)
        if kind is None or not type(hook).__module__.startswith("torch.nn.utils"):
            continue
        name = hook.name
        if kind == "weight_norm":
            torch.nn.utils.remove_weight_norm(module, name)
        else:
            torch.nn.utils.remove_spectral_norm(module, name)      # eval value: no power iteration
        changes.append(Change(path, f"{kind} hook on {name!r} folded into a plain parameter",
                              "fold_parametrizations", True))
    return changes


def _fold_parametrize(path: str, module) -> list[Change]:
    from torch.nn.utils import parametrize

    if not parametrize.is_parametrized(module):
        return []
    # A deep copy of a parametrized module shares its injected class (ParametrizedConv1d, ...) with the original,
    # and remove_parametrizations deletes the weight property from that class: the original would lose `weight`.
    # The module being folded gets its own copy of the class first.
    cls = type(module)
    module.__class__ = type(cls.__name__, cls.__bases__,
                            {k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__")})
    changes = []
    for name in list(module.parametrizations.keys()):
        kinds = "+".join(type(p).__name__.lstrip("_") for p in module.parametrizations[name])
        parametrize.remove_parametrizations(module, name, leave_parametrized=True)
        changes.append(Change(path, f"parametrization {kinds} on {name!r} folded into a plain parameter",
                              "fold_parametrizations", True))
    return changes


@register("fold_parametrizations", wall="parametrized_weights")
def fold_parametrizations(model) -> list[Change]:
    """Fold every weight_norm / spectral_norm hook and parametrize parametrization in `model` (in place).

    Use on a model in eval mode (convert_for_gpu puts it there): a spectral_norm in training mode would run
    a power iteration step. Exact (see the module docstring)."""
    import torch

    changes: list[Change] = []
    for path, module in list(model.named_modules()):
        with torch.no_grad():
            changes += _fold_hooks(path, module)
        # (not under no_grad: parametrize keeps a folded weight a Parameter only when it requires grad)
        changes += _fold_parametrize(path, module)
    return changes
