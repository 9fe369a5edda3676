"""Old import path of `l2_normalize` (recipes import it from here); it lives in `identical_inputs`
with the other rewrites for the `identical_or_constant_inputs` wall."""
from .identical_inputs import l2_normalize  # noqa: F401

__all__ = ["l2_normalize"]
