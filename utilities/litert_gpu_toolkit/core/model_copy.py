"""A deep copy of a user's model that `copy.deepcopy` alone refuses, leaving the original untouched.

`torch.nn.utils.weight_norm` and `torch.nn.utils.spectral_norm` (the hook versions) keep the computed
weight as a plain module attribute that is the output of an autograd graph (a non-leaf tensor), and
torch refuses to deep-copy a non-leaf tensor ("Only Tensors created explicitly by the user (graph leaves)
support the deepcopy protocol"). The hook recomputes that attribute from its parameters on every forward,
so the copy may hold a detached clone instead: `copy_model` hands `copy.deepcopy` a memo that maps each
such tensor to its detached clone. Nothing is set aside or restored on the original model.
"""
from __future__ import annotations


def _non_leaf_tensors(value, found: list, depth: int = 0) -> None:
    import torch

    if isinstance(value, torch.Tensor):
        if value.grad_fn is not None:
            found.append(value)
    elif depth < 4 and isinstance(value, dict):
        for v in value.values():
            _non_leaf_tensors(v, found, depth + 1)
    elif depth < 4 and isinstance(value, (list, tuple, set)):
        for v in value:
            _non_leaf_tensors(v, found, depth + 1)


def non_leaf_attributes(model) -> list:
    """The non-leaf tensors a module tree holds as attributes (what `copy.deepcopy` refuses)."""
    found: list = []
    for module in model.modules():
        for name, value in vars(module).items():
            if name not in ("_parameters", "_buffers", "_modules"):
                _non_leaf_tensors(value, found)
    return found


def copy_model(model):
    """`copy.deepcopy(model)`, with every non-leaf tensor attribute copied as a detached clone.

    Exact: the clones hold the same values (they are recomputed by their hooks on the next forward anyway).
    The original model is not changed. Anything else deepcopy cannot copy (a lock, an open file) raises."""
    import copy

    memo = {id(t): t.detach().clone() for t in non_leaf_attributes(model)}
    return copy.deepcopy(model, memo)
