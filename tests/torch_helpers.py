"""Small torch helpers shared by the rewrite tests."""
from torch import nn


class Fn(nn.Module):
    """A module around a function: the 'original' of a functional spelling, exportable as a model."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)
