"""The train/eval state of a caller's module tree, kept and put back exactly.

`convert_for_gpu` runs the source model in eval mode for the reference (dropout off, batch-norm running
statistics), and litert-torch may call `.eval()` on what it converts; the caller's module must come back as it
was -- every submodule's own flag, not just the root's (`.train(mode)` would set them all alike).
"""
from __future__ import annotations


def training_flags(model) -> list:
    """[(module, training)] for every submodule of `model`; [] for something that is not a module tree."""
    modules = getattr(model, "modules", None)
    if not callable(modules):
        return []
    try:
        return [(m, m.training) for m in modules()]
    except Exception:                                        # noqa: BLE001 - not a real nn.Module: nothing to keep
        return []


def restore_training(flags: list) -> None:
    """Put back what `training_flags` recorded, module by module."""
    for module, training in flags:
        module.training = training
