"""Small torch helpers shared by the rewrite tests."""
import math

import torch
from torch import nn


class Fn(nn.Module):
    """A module around a function: the 'original' of a functional spelling, exportable as a model."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


class Cancel(nn.Module):
    """Two long-dot-product convs whose outputs nearly cancel: a small result made of large partial sums, the
    shape of HiFi-GAN's high-rate stages (residual streams of |38| that end in a waveform of rms 0.1)."""

    def __init__(self, c=256, k=11):
        super().__init__()
        self.a = nn.Conv1d(c, c, k, padding=k // 2)
        self.b = nn.Conv1d(c, c, k, padding=k // 2)
        with torch.no_grad():
            self.b.weight.copy_(-0.9 * self.a.weight + 0.01 * torch.randn_like(self.a.weight) / math.sqrt(c * k))

    def forward(self, x):
        return self.a(x) + self.b(x)
