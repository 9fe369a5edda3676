"""PP-OCRv4 text detection (DBNet, mobile): the network from rapidocr's ONNX file, and the host side around it.

The network is the ONNX graph that the `rapidocr-onnxruntime` wheel ships (`ch_PP-OCRv4_det_infer.onnx`),
turned into a torch module by `onnx2torch`; torch is the reference the .tflite is checked against. The host side
(pre-processing, the probability map -> text boxes step, IoU matching) is numpy + scipy, and calls the network
only through a callable, so the same code turns the torch output and the device output into boxes.

Conventions: images are HxWx3 RGB uint8; the network input is 1x3xHxW float32 in PP-OCR's normalisation
((x / 255 - 0.5) / 0.5, BGR channel order as rapidocr feeds it); boxes are [x1, y1, x2, y2] in input pixels.
"""
from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from litert_gpu_toolkit.core import weights
from litert_gpu_toolkit.core.metrics import box_iou

ONNX_NAME = "ch_PP-OCRv4_det_infer.onnx"
INSTALL = "pip install --no-deps rapidocr-onnxruntime==1.4.4"
THRESH = 0.3          # rapidocr's binarisation threshold of the probability map
BOX_THRESH = 0.5      # a component whose mean probability is below this is dropped (rapidocr's default)
UNCLIP_RATIO = 1.6    # DB's shrunk text kernels grow back by area * ratio / perimeter (rapidocr's default)
MIN_SIDE = 3          # components thinner than this many pixels are noise


def onnx_path(source: str | None) -> Path:
    """The det ONNX file: inside the rapidocr wheel by default, or a file given on the command line."""
    if source:
        path = Path(source)
        if not path.is_file():
            raise weights.WeightsError(f"--weights {source}: no such ONNX file")
        return path
    path = weights.package_dir("rapidocr_onnxruntime", "models", ONNX_NAME, install=INSTALL)
    if not path.is_file():
        raise weights.WeightsError(f"{path} is missing; reinstall with: {INSTALL}")
    return path


def _stub_torchvision() -> None:
    """onnx2torch imports torchvision at import time for its NMS and RoIAlign converters only. PyPI's
    torchvision is built for CUDA torch and does not load beside the CPU build pinned here, and this graph
    uses neither op, so a placeholder that fails loudly if ever called stands in for it."""
    try:
        import torchvision  # noqa: F401
        return
    except (ImportError, RuntimeError, OSError):   # not installed, or a build for another torch
        pass

    def unavailable(*_args, **_kwargs):
        raise RuntimeError("torchvision is not installed: this ONNX graph needs a torchvision op")

    tv = types.ModuleType("torchvision")
    ops = types.ModuleType("torchvision.ops")
    ops.nms = ops.box_convert = ops.roi_align = unavailable
    tv.ops = ops
    sys.modules["torchvision"], sys.modules["torchvision.ops"] = tv, ops


def load(source: str | None = None) -> torch.nn.Module:
    """The detector as a torch module in eval mode (probability map 1x1xHxW in [0, 1] out)."""
    import onnx

    _stub_torchvision()
    from onnx2torch import convert

    # onnx.load_model parses the protobuf only; no code in the file runs
    graph = onnx.load_model(str(onnx_path(source)))
    _constants_to_initializers(graph)
    model = convert(graph).eval()
    _bake_resize_scales(model)
    return model


class FixedResize(torch.nn.Module):
    """ONNX Resize with its scale factors known when the module is built. onnx2torch's Resize reads the
    factors from a tensor with `.tolist()` on every call, which torch.export refuses as data-dependent;
    here they are Python numbers, so the export sees a plain nearest / bilinear interpolate."""

    def __init__(self, scales: list[float], mode: str, align_corners):
        super().__init__()
        self.scales, self.mode, self.align_corners = [float(s) for s in scales], mode, align_corners

    def forward(self, x, *_constant_inputs):
        return torch.nn.functional.interpolate(x, scale_factor=self.scales, mode=self.mode,
                                               align_corners=self.align_corners)


def _bake_resize_scales(model: torch.fx.GraphModule) -> None:
    """Swap each onnx2torch Resize whose roi is empty and whose scales are a constant for a FixedResize."""
    from onnx2torch.node_converters.resize import OnnxResize, _onnx_mode_to_torch_mode

    for node in model.graph.nodes:
        module = model.get_submodule(node.target) if node.op == "call_module" else None
        if not isinstance(module, OnnxResize):
            continue
        roi, scales = (model.get_buffer(a.target) if getattr(a, "op", None) == "get_attr" else None
                       for a in (list(node.args[1:3]) + [None, None])[:2])
        if roi is None or roi.numel() or scales is None or scales.numel() != 4 or scales[:2].tolist() != [1, 1]:
            raise NotImplementedError(f"{node.target}: only constant spatial scale factors are handled")
        mode = _onnx_mode_to_torch_mode(module.onnx_mode, 2)
        model.set_submodule(node.target, FixedResize(scales[2:].tolist(), mode, module.align_corners))
    model.recompile()


def _constants_to_initializers(model) -> None:
    """Paddle's exporter stores every weight as a `Constant` node; onnx2torch's Conv and BatchNorm converters
    look weights up among the graph's initializers. Moving each tensor-valued Constant there keeps the values
    bit for bit and only changes where the graph lists them."""
    from onnx import numpy_helper

    keep = []
    for node in model.graph.node:
        attrs = {a.name: a for a in node.attribute}
        if node.op_type == "Constant" and "value" in attrs:
            tensor = numpy_helper.from_array(numpy_helper.to_array(attrs["value"].t), node.output[0])
            model.graph.initializer.append(tensor)
        else:
            keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)


def preprocess(image: np.ndarray) -> np.ndarray:
    """HxWx3 RGB uint8 (sides multiples of 32) -> 1x3xHxW float32, as rapidocr feeds the network."""
    if image.shape[0] % 32 or image.shape[1] % 32:
        raise ValueError(f"image sides must be multiples of 32, got {image.shape[:2]}")
    bgr = image[..., ::-1].astype(np.float32)
    x = (bgr / 255.0 - 0.5) / 0.5
    return np.ascontiguousarray(x.transpose(2, 0, 1))[None].astype(np.float32)


@dataclass
class Boxes:
    boxes: np.ndarray    # (n, 4) float32 [x1, y1, x2, y2]
    scores: np.ndarray   # (n,) mean probability inside each component


def boxes_from_map(prob: np.ndarray) -> Boxes:
    """DB post-processing, axis-aligned: binarise at THRESH, one box per connected component, keep those whose
    mean probability reaches BOX_THRESH, and grow each by DB's unclip distance (area * ratio / perimeter).
    rapidocr fits rotated rectangles with OpenCV; the text checked here is horizontal, so axis-aligned boxes
    carry the same information and need only scipy."""
    from scipy import ndimage

    prob = np.asarray(prob, np.float32).reshape(prob.shape[-2:])
    labels, count = ndimage.label(prob > THRESH)
    boxes, scores = [], []
    for index, found in enumerate(ndimage.find_objects(labels), start=1):
        if found is None:
            continue
        ys, xs = found
        h, w = ys.stop - ys.start, xs.stop - xs.start
        if min(h, w) < MIN_SIDE:
            continue
        score = float(prob[ys, xs][labels[ys, xs] == index].mean())
        if score < BOX_THRESH:
            continue
        grow = (h * w) * UNCLIP_RATIO / (2 * (h + w))
        H, W = prob.shape
        boxes.append([max(0.0, xs.start - grow), max(0.0, ys.start - grow),
                      min(float(W), xs.stop + grow), min(float(H), ys.stop + grow)])
        scores.append(score)
    order = np.argsort([b[1] * 10000 + b[0] for b in boxes]) if boxes else np.zeros(0, int)
    return Boxes(np.asarray(boxes, np.float32).reshape(-1, 4)[order], np.asarray(scores, np.float32)[order])



def match(reference: np.ndarray, candidate: np.ndarray) -> list[float]:
    """For every reference box, the best IoU among the candidate boxes (0 when there is none)."""
    return [max((box_iou(r, c) for c in candidate), default=0.0) for r in reference]


# ---------------------------------------------------------------------------------------------- test images

TEXT_LINES = ("LiteRT runs this on the GPU", "PP-OCRv4 text detection 2026", "Hello, world: 0123456789")


def text_image(height: int, width: int, lines=TEXT_LINES) -> np.ndarray:
    """Dark text on a light, slightly textured page, drawn with Pillow's built-in font (no font files)."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(0)
    page = (235 + rng.integers(-8, 8, (height, width, 3))).clip(0, 255).astype(np.uint8)
    img = Image.fromarray(page)
    draw = ImageDraw.Draw(img)
    size = max(8, min(height // (2 * len(lines) + 2), int(0.8 * width / (0.6 * max(map(len, lines))))))
    font = ImageFont.load_default(size=size)
    for i, line in enumerate(lines):
        y = int((i + 0.6) * height / (len(lines) + 0.5))
        draw.text((width // 16, y), line, fill=(20 + 30 * i, 20, 40), font=font)
    return np.asarray(img)


def photo(name: str, height: int, width: int) -> np.ndarray:
    """A scikit-image photo, centre-cropped to the aspect ratio and resized (Pillow, bilinear) to HxW."""
    import skimage.data
    from PIL import Image

    img = getattr(skimage.data, name)()
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=2)
    img = img[..., :3]
    h, w = img.shape[:2]
    if h * width > w * height:     # too tall: crop rows
        keep = w * height // width
        img = img[(h - keep) // 2:(h - keep) // 2 + keep]
    else:
        keep = h * width // height
        img = img[:, (w - keep) // 2:(w - keep) // 2 + keep]
    return np.asarray(Image.fromarray(img).resize((width, height), Image.BILINEAR))


def image(name: str, height: int, width: int) -> np.ndarray:
    """A named test image: `rendered` (Pillow draws TEXT_LINES) or a scikit-image photo name (`text` is a
    photo of text on a wall)."""
    return text_image(height, width) if name == "rendered" else photo(name, height, width)
