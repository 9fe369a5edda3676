"""One zoo entry (`ZooModel`) and the rule that redraws its weights.

Nothing is downloaded: each builder makes a config and a randomly initialised model, then
`redraw_weights` sets the weights by the rule below so activations are O(1) (transformers' default
init leaves some conv models at ~1e-25, which would make any numeric check meaningless):

  * nn.Linear / nn.Conv*d / nn.ConvTranspose*d weight ~ N(0, 1 / fan_in) (variance-preserving),
    bias ~ N(0, 0.02^2);
  * nn.Embedding weight ~ N(0, 1), and so an all-zero 2-D buffer named `embed` (a codebook kept as a buffer);
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

The second mode, `trained` (`zoo/run.py --activations trained`, results in zoo/trained/), starts from the same
O(1) weights and then plants the ranges trained networks reach and random ones never do (`apply_trained_ranges`,
deterministic, no data):

  * outlier channels in every residual stream: two channels of the stream (indices `outlier_channels(width)`)
    carry x400 the other channels' scale (LLM residual streams reach hundreds to thousands in a few channels).
    The stream widths are the widths the model's LayerNorm / RMSNorm layers normalise; the channels are scaled
    where the stream starts: in every nn.Embedding of that width (token, position and type tables), or, for a
    model with no such table, in the first conv / linear layer (in execution order) whose output has that many
    channels over as many positions as a norm of that width reads (up to 8 more per example: class / register
    tokens join before the first norm), plus every free parameter of that width (class tokens, position tables).
    Without the positions test a hidden layer of an earlier stage that happened to have a later stream's width
    was taken (PoolFormerV2's stage-2 MLP expansion for the 512-wide last stage, x400 into a squared ReLU: 3.6e6
    in fp32; Swin's and ConvNeXt's first MLPs likewise); a width no layer matches is left unplanted. A writer's
    outlier channel that already runs above 4x the first writer's median channel (it reads an earlier stream's
    outliers) is scaled only up to x400 that median, so a hierarchy does not compound x400 per stage;
  * loud BatchNorm channels: in every BatchNorm, one channel in 16 gets weight x4 and bias +2, so that channel
    stands out of its layer and, after a ReLU, is large and all positive (a global pool sums large values); set
    before `calibrate_batch_norms`, so the next BatchNorm still bounds what it receives. The strength is measured,
    not guessed (`zoo/compare_ranges.py`, real ImageNet weights on four photos, 2026-12-04): the loudest channel of
    a real BatchNorm output stands x2.3 / x3.4 over the median channel at the median layer and x8.6 / x10.2 at the
    loudest layer (MobileNetV2 / EfficientNet-Lite0); a real MobileNetV2 block output at most x4.1. With this plant
    the two zoo rows stand x11 at their median BatchNorm and x60 / x57 at the 90th percentile (their loudest tenth
    of layers is louder than any real layer), and the zoo's MobileNetV2 x14 at its loudest block. The earlier plant
    (x32, +16) stood x115 at a block, 28 times the real network, and made a net whose values fp16 storage itself
    could not keep (torch16 0.91, real 0.99998): it measured the random weights' chaos, not trained ranges;
  * tiny layer scales: the parameters the rule above sets to U(0.5, 1) (layer scales, gammas) are drawn
    log-uniform in [1e-5, 1e-1] instead, so a block's contribution can sit near fp16's subnormal range
    (6e-8 .. 6e-5).

Importing this module does not import torch; redrawing does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from litert_gpu_toolkit.quantize.plan import MODES as QUANTIZE_MODES

ACTIVATIONS = ("o1", "trained", "library")    # library: the library's own initialisation, untouched
ACTIVATIONS_ENV = "LITERT_ZOO_ACTIVATIONS"      # how the zoo's child processes learn the mode
STREAM_OUTLIER = 400.0      # scale of a residual stream's outlier channels
BN_OUTLIER = (4.0, 2.0)     # (weight factor, bias) of one BatchNorm channel in BN_EVERY (measured: see above)
BN_EVERY = 16
LAYER_SCALE_RANGE = (1e-5, 1e-1)
FREE_STREAM_NAMES = ("token", "pos", "embed")    # free parameters that are added into a stream where it starts


WEIGHTS_ENV = "LITERT_ZOO_WEIGHTS"
WEIGHTS_MODES = tuple(QUANTIZE_MODES)                  # convert_for_gpu(weights=...)


def weights_mode() -> str:
    """How this process stores the converted weights: LITERT_ZOO_WEIGHTS (fp32 by default)."""
    import os

    mode = os.environ.get(WEIGHTS_ENV, "fp32") or "fp32"
    if mode not in WEIGHTS_MODES:
        raise ValueError(f"{WEIGHTS_ENV}={mode!r}: expected one of {', '.join(WEIGHTS_MODES)}")
    return mode


def activations_mode() -> str:
    """The weight mode of this process: LITERT_ZOO_ACTIVATIONS (o1 by default)."""
    import os

    mode = os.environ.get(ACTIVATIONS_ENV, "o1") or "o1"
    if mode not in ACTIVATIONS:
        raise ValueError(f"{ACTIVATIONS_ENV}={mode!r}: expected one of {', '.join(ACTIVATIONS)}")
    return mode


def outlier_channels(width: int) -> list[int]:
    """The stream channels that carry outliers in `trained` mode: two, spread apart (one when width < 3)."""
    return sorted({width // 3, min(width - 1, (2 * width) // 3 + 1)})



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


def redraw_weights(model, seed: int = 0, activations: str = "o1") -> None:
    """Redraw `model`'s weights in place so activations are O(1) (see the module docstring); `activations=
    "trained"` draws layer scales log-uniform in LAYER_SCALE_RANGE instead (the rest is `apply_trained_ranges`);
    `activations="library"` leaves the library's own initialisation as it is (how a user first tries a model)."""
    if activations == "library":
        return
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
                lo, hi = (0.5, 1.0) if activations == "o1" else LAYER_SCALE_RANGE
                with torch.no_grad():
                    if activations == "o1":
                        p.copy_(torch.rand(p.shape, generator=g) * (hi - lo) + lo)
                    else:   # log-uniform: every decade of the range equally often
                        p.copy_(torch.exp(torch.empty(p.shape).uniform_(math.log(lo), math.log(hi), generator=g)))
            else:
                normal_(p, 0.02)
    for name, b in model.named_buffers():
        # a codebook kept as a buffer (EnCodec's quantizer `embed`) starts all zero: every code would decode to the
        # same vector and the output would not depend on the input at all (`sensitivity.input_share` found it)
        if b.is_floating_point() and b.dim() == 2 and name.rsplit(".", 1)[-1] == "embed" and not b.abs().any():
            normal_(b, 1.0)


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


def _norm_width(m) -> int | None:
    """The width a LayerNorm / RMSNorm normalises over (a residual stream's width); None for any other module."""
    from torch import nn

    if isinstance(m, nn.LayerNorm) and m.normalized_shape:
        return int(m.normalized_shape[-1])
    if type(m).__name__.lower().endswith("rmsnorm"):
        w = getattr(m, "weight", None)
        if w is not None and w.dim() == 1:
            return int(w.shape[0])
    return None


def _stream_widths(model) -> set[int]:
    """The widths the model's LayerNorm / RMSNorm layers normalise over: its residual streams."""
    return {w for w in map(_norm_width, model.modules()) if w is not None}


def _size(t) -> tuple[int, int]:
    """(elements, leading axis) of a layer's output or a norm's input; (0, 1) when it is not one tensor."""
    import torch

    if not isinstance(t, torch.Tensor) or t.dim() < 2:
        return 0, 1
    return t.numel(), max(1, int(t.shape[0]))


def _starts(layer: tuple[int, int], norm: tuple[int, int], width: int) -> bool:
    """Whether a layer's output of that size can be the stream a norm reads: as many positions (tokens, pixels, in
    every example and patch group: elements over the width, whatever the layout), or up to 8 more per leading row
    (class, distillation and register tokens join before the first norm)."""
    extra = norm[0] // width - layer[0] // width
    return layer[0] > 0 and norm[0] > 0 and 0 <= extra <= 8 * norm[1]


def _channel_peaks(layer, run: Callable[[], object]):
    """Largest |value| of each output channel of `layer` on its first call in `run()`; None if it is not called."""
    import torch
    from torch import nn

    seen: list = []

    def hook(_mod, _inp, out):
        if not seen and isinstance(out, torch.Tensor) and out.dim() >= 2:
            axis = out.dim() - 1 if isinstance(layer, nn.Linear) else 1
            seen.append(out.detach().abs().transpose(0, axis).reshape(out.shape[axis], -1).amax(1))

    handle = layer.register_forward_hook(hook)
    try:
        run()
    finally:
        handle.remove()
    return seen[0] if seen else None


def _outlier_factors(peaks, idx: list[int], typical: float) -> list[float]:
    """How much to scale each of a stream writer's outlier channels: STREAM_OUTLIER, unless the channel already
    runs well above the network's typical channel (`typical`: the first writer's median channel, before any
    plant) because it reads an earlier stream's outliers -- a stage's downsampling conv (PiT's maps channel c to
    2c and 2c + 1, and outlier_channels(2w) meets 2 x outlier_channels(w); VOLO's reads the stream with no norm
    in between, so every output channel carries the outliers). Then only what brings it to STREAM_OUTLIER x
    `typical`, so stages do not compound x400 per stage (PiT's last stage reached 6.6e7, VOLO's 1.6e5)."""
    if peaks is None or typical <= 0:
        return [STREAM_OUTLIER] * len(idx)
    return [STREAM_OUTLIER if float(peaks[c]) <= 4 * typical else max(1.0, STREAM_OUTLIER * typical / float(peaks[c]))
            for c in idx]


def apply_trained_ranges(model, run: Callable[[], object]) -> dict:
    """Plant trained-network ranges in `model` (the `trained` mode of the module docstring), in place. `run()` is
    one forward pass, used to find the first layer writing each stream. Returns what was changed (for tests and
    notes): {"embeddings": n, "writers": [names], "free": [names], "batch_norms": n}."""
    import torch
    from torch import nn

    changed = {"embeddings": 0, "writers": [], "free": [], "batch_norms": 0}
    widths = _stream_widths(model)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Embedding) and m.embedding_dim in widths:
                m.weight[:, outlier_channels(m.embedding_dim)] *= STREAM_OUTLIER
                changed["embeddings"] += 1
        started = {m.embedding_dim for m in model.modules() if isinstance(m, nn.Embedding)} & widths
        todo = widths - started
        if todo:
            order: list[tuple[str, nn.Module, tuple[int, int]]] = []
            read: dict[int, set[tuple[int, int]]] = {}   # stream width -> sizes of what its norms read
            names = {id(m): n for n, m in model.named_modules()}
            layers = [m for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d))]
            handles = [m.register_forward_hook(lambda mod, _i, o: order.append((names[id(mod)], mod, _size(o))))
                       for m in layers]
            handles += [m.register_forward_hook(lambda mod, i, _o: read.setdefault(_norm_width(mod), set()).add(
                _size(i[0] if i else None))) for m in model.modules() if _norm_width(m) in todo]
            try:
                run()
            finally:
                for h in handles:
                    h.remove()
            chosen = []
            for name, m, size in order:
                width = m.out_features if isinstance(m, nn.Linear) else m.out_channels
                if width in todo and any(_starts(size, r, width) for r in read.get(width, ())):
                    chosen.append((name, m, outlier_channels(width)))
                    todo.discard(width)
            typical = 0.0
            for name, m, idx in chosen:          # in execution order: a later stream sees the earlier plants
                peaks = _channel_peaks(m, run)
                if not typical and peaks is not None:
                    typical = float(peaks[[c for c in range(len(peaks)) if c not in idx]].median())
                for c, factor in zip(idx, _outlier_factors(peaks, idx, typical)):
                    m.weight[c] *= factor
                    if m.bias is not None:
                        m.bias[c] *= factor
                changed["writers"].append(name)
            started = widths - todo
            # class / mask tokens and position tables join the stream where it starts: the same channels
            for name, p in model.named_parameters():
                owner = model.get_submodule(name.rpartition(".")[0])
                leaf = name.rpartition(".")[2].lower()
                if p.dim() >= 2 and int(p.shape[-1]) in started and any(k in leaf for k in FREE_STREAM_NAMES) \
                        and not isinstance(owner, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Embedding)):
                    p[..., outlier_channels(int(p.shape[-1]))] *= STREAM_OUTLIER
                    changed["free"].append(name)
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.affine:
                c = m.num_features
                idx = list(range(5 % c, c, BN_EVERY)) if c >= BN_EVERY else [c // 2]
                m.weight[idx] *= BN_OUTLIER[0]
                m.bias[idx] = BN_OUTLIER[1]
                changed["batch_norms"] += 1
    return changed
