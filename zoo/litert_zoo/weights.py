"""One zoo entry (`ZooModel`) and the rule that redraws its weights.

Nothing is downloaded: each builder makes a config and a randomly initialised model, then
`redraw_weights` sets the weights by the rule below so activations are O(1) (transformers' default
init leaves some conv models at ~1e-25, which would make any numeric check meaningless):

  * nn.Linear / nn.Conv*d / nn.ConvTranspose*d weight ~ N(0, 1 / fan_in) (variance-preserving),
    bias ~ N(0, 0.02^2);
  * nn.Embedding weight ~ N(0, 1);
  * any other parameter that the default init left all-zero or tiny (|w| < 1e-3 everywhere, e.g. layer
    scales, cls / mask tokens, position tables) ~ U(0.5, 1.0) when its name says scale / gamma / lambda,
    else N(0, 0.02^2) + 0 (tokens, position tables);
  * norms (LayerNorm, GroupNorm, BatchNorm) are set to weight 1, bias 0, running stats (0, 1)
    (some HF inits shrink BatchNorm weights, which left MobileViT at ~1e-7);
  * then `calibrate_batch_norms` lets every BatchNorm bound its output the way a trained one does, without
    ever amplifying: its running variance is the mean square of its input on eight other draws of the example
    inputs where that exceeds 1, else 1; its running mean stays 0. With every running statistic at (0, 1) a
    BatchNorm is an identity and deep residual stacks grow without bound (timm RepViT reached 1.7e6, YOLO11-cls
    2e6: outside fp16's range, where no trained model computes). Normalising fully instead (mean and variance
    from the data) made the random residual stacks chaotic -- in a random MobileNetV2 an fp32 rounding difference
    doubled every 1.5 blocks -- which no trained network does either.

Importing this module does not import torch; redrawing does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable



@dataclass(frozen=True)
class ZooModel:
    """One architecture: `build()` -> (module returning what users read, example inputs tuple)."""
    name: str
    domain: str          # vision / audio / text / llm / multimodal / detection / generative
    build: Callable
    fast: bool = False   # in the CI subset (`--fast`), which touches every library
    library: str = "transformers"

    def __post_init__(self):
        object.__setattr__(self, "build", _seeded(self.build))


def _seeded(build: Callable) -> Callable:
    """`build` with torch's global generator seeded first: a library's own init (and any parameter the rule
    below does not redraw) is then the same in every process, so two builds of a row are the same model."""
    def make():
        import torch

        torch.manual_seed(0)
        return build()
    make.__wrapped__ = build
    return make


def redraw_weights(model, seed: int = 0) -> None:
    """Redraw `model`'s weights in place so activations are O(1) (see the module docstring)."""
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(seed)

    def normal_(t, std, mean=0.0):
        with torch.no_grad():
            t.copy_(torch.randn(t.shape, generator=g) * std + mean)

    done: set[int] = set()
    for _, m in model.named_modules():
        if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d)):
            w = m.weight
            if isinstance(m, (nn.ConvTranspose1d, nn.ConvTranspose2d)):
                fan_in = w.shape[0] * int(torch.tensor(w.shape[2:]).prod()) // max(1, m.stride[0])
            else:
                fan_in = int(w[0].numel())
            normal_(w, 1.0 / max(1, fan_in) ** 0.5)
            done.add(id(w))
            if m.bias is not None:
                normal_(m.bias, 0.02)
                done.add(id(m.bias))
        elif isinstance(m, nn.Embedding):
            normal_(m.weight, 1.0)
            done.add(id(m.weight))
        elif isinstance(m, (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d)):
            with torch.no_grad():
                if getattr(m, "weight", None) is not None:
                    m.weight.fill_(1.0)
                if getattr(m, "bias", None) is not None:
                    m.bias.zero_()
                if getattr(m, "running_mean", None) is not None:
                    m.running_mean.zero_()
                    m.running_var.fill_(1.0)
            for p in m.parameters(recurse=False):
                done.add(id(p))
    for name, p in model.named_parameters():
        if id(p) in done or not p.is_floating_point():
            continue
        if p.numel() and float(p.detach().abs().max()) < 1e-3:
            leaf = name.rsplit(".", 1)[-1].lower()
            if any(k in leaf for k in ("scale", "gamma", "lambda")):
                with torch.no_grad():
                    p.copy_(torch.rand(p.shape, generator=g) * 0.5 + 0.5)
            else:
                normal_(p, 0.02)


def calibrate_batch_norms(model, run: Callable[[], object]) -> int:
    """Bound every BatchNorm's output (see the module docstring) from one call of `run()` (a forward pass in eval
    mode): a pre-hook on each layer sets its running variance to max(mean square of its input over every axis but the
    channel axis, 1) and its running mean to 0, just before the layer uses them, so each later layer sees the
    bounded activations. A layer that sees one value per channel (BatchNorm1d on a batch of one) keeps (0, 1).
    Returns how many layers were set."""
    import torch
    from torch import nn

    done: list[nn.Module] = []

    def pre_hook(m, args):
        x = args[0]
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.numel() // x.shape[1] < 2:
            return
        axes = [0] + list(range(2, x.dim()))
        with torch.no_grad():
            m.running_mean.zero_()
            m.running_var.copy_((x * x).mean(axes).clamp(min=1.0))
        done.append(m)

    handles = [m.register_forward_pre_hook(pre_hook) for m in model.modules()
               if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    try:
        with torch.no_grad():
            run()
    finally:
        for h in handles:
            h.remove()
    return len(done)
