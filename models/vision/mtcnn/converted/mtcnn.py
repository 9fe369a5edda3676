"""MTCNN face detector: the three networks (P-Net, R-Net, O-Net) and the host-side pipeline around them.

The networks use facenet-pytorch's parameter names so its three state dicts (`facenet_pytorch/data/{p,r,o}net.pt`)
load as they are. The pipeline (image pyramid, candidate generation, NMS, box regression, squaring, crops,
landmarks) is plain numpy + torch on the host and calls the networks only through three callables, so the same
code drives the torch networks (reference) and the converted .tflite graphs on the GPU (verify).

Conventions: images are HxWx3 RGB uint8; boxes are [x1, y1, x2, y2] in pixels, MTCNN's 1-based inclusive style
(a box crops rows y1-1 .. y2-1 and columns x1-1 .. x2-1 after truncation to integers).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from litert_gpu_toolkit.core import weights
from litert_gpu_toolkit.core.metrics import box_iou

MIN_FACE = 20                   # smallest face searched for, pixels
FACTOR = 0.709                  # pyramid step
THRESHOLDS = (0.6, 0.7, 0.7)    # face-probability thresholds of P-, R- and O-Net
IMAGE_SIZE = (512, 512)         # the fixed image size the P-Net graphs are exported for (H, W)


class PNet(nn.Module):
    """Fully convolutional 12x12 proposal net. Returns (box regression Nx4xhxw, face probability Nx2xhxw)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 10, 3), nn.PReLU(10)
        self.pool1 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(10, 16, 3), nn.PReLU(16)
        self.conv3, self.prelu3 = nn.Conv2d(16, 32, 3), nn.PReLU(32)
        self.conv4_1, self.conv4_2 = nn.Conv2d(32, 2, 1), nn.Conv2d(32, 4, 1)

    def forward(self, x):
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.prelu3(self.conv3(self.prelu2(self.conv2(x))))
        return self.conv4_2(x), torch.softmax(self.conv4_1(x), dim=1)


class RNet(nn.Module):
    """24x24 refinement net. Returns (box regression Nx4, face probability Nx2)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 28, 3), nn.PReLU(28)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(28, 48, 3), nn.PReLU(48)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = nn.Conv2d(48, 64, 2), nn.PReLU(64)
        self.dense4, self.prelu4 = nn.Linear(576, 128), nn.PReLU(128)
        self.dense5_1, self.dense5_2 = nn.Linear(128, 2), nn.Linear(128, 4)

    def forward(self, x):
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.prelu3(self.conv3(x))
        x = x.permute(0, 3, 2, 1).reshape(x.shape[0], -1)  # the weights expect (W, H, C) flatten order
        x = self.prelu4(self.dense4(x))
        return self.dense5_2(x), torch.softmax(self.dense5_1(x), dim=1)


class ONet(nn.Module):
    """48x48 output net. Returns (box regression Nx4, landmarks Nx10 (5 x then 5 y), face probability Nx2)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 32, 3), nn.PReLU(32)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(32, 64, 3), nn.PReLU(64)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = nn.Conv2d(64, 64, 3), nn.PReLU(64)
        self.pool3 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv4, self.prelu4 = nn.Conv2d(64, 128, 2), nn.PReLU(128)
        self.dense5, self.prelu5 = nn.Linear(1152, 256), nn.PReLU(256)
        self.dense6_1, self.dense6_2, self.dense6_3 = nn.Linear(256, 2), nn.Linear(256, 4), nn.Linear(256, 10)

    def forward(self, x):
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.pool3(self.prelu3(self.conv3(x)))
        x = self.prelu4(self.conv4(x))
        x = x.permute(0, 3, 2, 1).reshape(x.shape[0], -1)
        x = self.prelu5(self.dense5(x))
        return self.dense6_2(x), self.dense6_3(x), torch.softmax(self.dense6_1(x), dim=1)


NETS = {"pnet": PNet, "rnet": RNet, "onet": ONet}


def weights_dir() -> Path:
    """facenet-pytorch's `data/` folder holding pnet.pt, rnet.pt, onet.pt (never imported: it needs torchvision)."""
    return weights.package_dir("facenet_pytorch", "data", install="pip install --no-deps facenet-pytorch==2.6.0")


def load_net(name: str, folder: Path | None = None) -> nn.Module:
    """One of the three networks with trained weights: `<folder>/<name>.pt` (default: the facenet-pytorch wheel's)."""
    path = Path(folder or weights_dir()) / f"{name}.pt"
    net = NETS[name]()
    net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True), strict=True)
    return net.eval()


# ---------------------------------------------------------------- photos

def load_photo(name: str) -> np.ndarray:
    """Verify photos, all 512x512 RGB uint8, made offline from scikit-image's bundled photos: the astronaut,
    its mirror image, a 0.7x copy on a grey canvas (smaller face, other position), two half-size copies side
    by side (two faces), and the grey cameraman."""
    import skimage.data

    img = skimage.data.astronaut()[..., :3]
    if name == "astronaut":
        return np.ascontiguousarray(img)
    if name == "astronaut_flipped":
        return np.ascontiguousarray(img[:, ::-1])
    if name == "astronaut_small":
        canvas = np.full_like(img, 128)
        canvas[100:458, 140:498] = resize_area(img, (358, 358))
        return canvas
    if name == "astronaut_pair":  # two half-size copies, one mirrored: two faces in one photo
        canvas = np.full_like(img, 128)
        canvas[128:384, :256] = resize_area(img, (256, 256))
        canvas[128:384, 256:] = resize_area(img[:, ::-1], (256, 256))
        return canvas
    if name == "camera":  # skimage's grey 'cameraman' photo, repeated to three channels
        return np.ascontiguousarray(np.repeat(skimage.data.camera()[..., None], 3, axis=2))
    raise ValueError(f"unknown photo {name!r}")


PHOTOS = ["astronaut", "astronaut_flipped", "astronaut_small", "astronaut_pair", "camera"]


# ---------------------------------------------------------------- pyramid

def pyramid_scales(h: int, w: int, min_face: int = MIN_FACE, factor: float = FACTOR) -> list[float]:
    """Scales at which a 12-pixel P-Net window covers faces from `min_face` pixels up to the image size."""
    scales, scale = [], 12.0 / min_face
    side = min(h, w) * scale
    while side >= 12:
        scales.append(scale)
        scale *= factor
        side *= factor
    return scales


def pyramid_sizes(h: int, w: int, **kw) -> list[tuple[int, int]]:
    return [(int(h * s + 1), int(w * s + 1)) for s in pyramid_scales(h, w, **kw)]


def pnet_signature(size: tuple[int, int]) -> str:
    """The signature name of the P-Net graph for one pyramid level, e.g. 'pnet_308x308'."""
    return f"pnet_{size[0]}x{size[1]}"


def resize_area(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """HxWxC uint8/float -> size (h, w), area interpolation (as torch's mode='area'), same dtype."""
    t = torch.from_numpy(np.ascontiguousarray(img, dtype=np.float32)).permute(2, 0, 1)[None]
    out = F.interpolate(t, size=size, mode="area")[0].permute(1, 2, 0).numpy()
    return out.astype(img.dtype) if img.dtype == np.uint8 else out


def normalize(img: np.ndarray) -> np.ndarray:
    """HxWx3 (or NxHxWx3) pixels -> NCHW float32 in [-1, 1], as the networks were trained."""
    x = (np.asarray(img, np.float32) - 127.5) * 0.0078125
    x = x[None] if x.ndim == 3 else x
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


# ---------------------------------------------------------------- box helpers

def nms(boxes: np.ndarray, scores: np.ndarray, threshold: float, mode: str = "union") -> np.ndarray:
    """Greedy non-maximum suppression; returns kept indices, best first. `mode='min'` divides the overlap by
    the smaller area instead of the union (MTCNN's last stage)."""
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    area = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size:
        i, rest = order[0], order[1:]
        keep.append(i)
        w = np.maximum(0.0, np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]) + 1)
        h = np.maximum(0.0, np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]) + 1)
        inter = w * h
        denom = np.minimum(area[i], area[rest]) if mode == "min" else area[i] + area[rest] - inter
        order = rest[inter / denom <= threshold]
    return np.array(keep, dtype=np.int64)


def regress(boxes: np.ndarray, reg: np.ndarray, plus_one: bool = True) -> np.ndarray:
    """Apply the networks' box regression: offsets are fractions of the box width/height."""
    w = boxes[:, 2] - boxes[:, 0] + (1 if plus_one else 0)
    h = boxes[:, 3] - boxes[:, 1] + (1 if plus_one else 0)
    out = boxes.copy()
    out[:, 0:4] = boxes[:, 0:4] + reg[:, 0:4] * np.stack([w, h, w, h], axis=1)
    return out


def square(boxes: np.ndarray) -> np.ndarray:
    """Grow each box to a square around its centre (side = the longer side)."""
    out = boxes.copy()
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    side = np.maximum(w, h)
    out[:, 0] = boxes[:, 0] + w * 0.5 - side * 0.5
    out[:, 1] = boxes[:, 1] + h * 0.5 - side * 0.5
    out[:, 2:4] = out[:, 0:2] + side[:, None]
    return out


def crops(img: np.ndarray, boxes: np.ndarray, size: int) -> np.ndarray:
    """Cut each (truncated, 1-based inclusive) box out of the image, zero outside it, resized to size x size."""
    H, W = img.shape[:2]
    out = np.zeros((len(boxes), size, size, 3), np.float32)
    for k, (x1, y1, x2, y2) in enumerate(np.trunc(boxes[:, :4]).astype(int)):
        bw, bh = x2 - x1 + 1, y2 - y1 + 1
        if bw <= 0 or bh <= 0:
            continue
        patch = np.zeros((bh, bw, 3), np.float32)
        sx, sy, ex, ey = max(x1 - 1, 0), max(y1 - 1, 0), min(x2, W), min(y2, H)
        if ex > sx and ey > sy:
            patch[sy - (y1 - 1):ey - (y1 - 1), sx - (x1 - 1):ex - (x1 - 1)] = img[sy:ey, sx:ex]
        out[k] = resize_area(patch, (size, size))
    return out


# ---------------------------------------------------------------- the three stages
# Each stage is split into "inputs for the network" and "boxes from the network's outputs", and `detect` runs
# a stage for all photos before the next, so a runner can send one stage of every photo to a device at once.

def pnet_inputs(img: np.ndarray) -> dict[str, np.ndarray]:
    """Stage 1 inputs: the image pyramid, {P-Net signature: 1x3xhxw}."""
    return {pnet_signature(s): normalize(resize_area(img, s)) for s in pyramid_sizes(*img.shape[:2])}


def pnet_boxes(shape: tuple[int, ...], outputs: dict, threshold: float = THRESHOLDS[0]) -> np.ndarray:
    """Stage 1 boxes from {signature: (reg 1x4xh'xw', prob 1x2xh'xw')}: every window scoring >= threshold,
    mapped back to image pixels, NMS per level (0.5) and over all levels (0.7).
    Returns Nx9 [x1, y1, x2, y2, score, reg0..reg3]."""
    found = []
    for scale, size in zip(pyramid_scales(*shape[:2]), pyramid_sizes(*shape[:2])):
        reg, prob = outputs[pnet_signature(size)]
        ys, xs = np.nonzero(prob[0, 1] >= threshold)
        if ys.size == 0:
            continue
        corner = np.stack([xs, ys], axis=1).astype(np.float32) * 2  # P-Net: stride 2, 12x12 window
        q1, q2 = np.floor((corner + 1) / scale), np.floor((corner + 12) / scale)
        cand = np.concatenate([q1, q2, prob[0, 1, ys, xs][:, None], reg[0][:, ys, xs].T], axis=1)
        found.append(cand[nms(cand[:, :4], cand[:, 4], 0.5)])
    if not found:
        return np.zeros((0, 9), np.float32)
    cand = np.concatenate(found)
    return cand[nms(cand[:, :4], cand[:, 4], 0.7)]


def rnet_inputs(img: np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stage 2 inputs: P-Net boxes regressed and squared, and their 24x24 crops (Nx3x24x24)."""
    boxes = square(regress(cand[:, :5], cand[:, 5:9], plus_one=False))
    return boxes, normalize(crops(img, boxes, 24)) if len(boxes) else np.zeros((0, 3, 24, 24), np.float32)


def rnet_boxes(boxes: np.ndarray, reg: np.ndarray, prob: np.ndarray, threshold: float = THRESHOLDS[1]):
    """Stage 2 boxes: keep R-Net score > threshold, NMS 0.7, regress, square. Returns Mx5 [box, score]."""
    keep = prob[:, 1] > threshold
    boxes, reg = boxes[keep], reg[keep]
    boxes[:, 4] = prob[keep, 1]
    order = nms(boxes[:, :4], boxes[:, 4], 0.7)
    return square(regress(boxes[order], reg[order]))


def onet_inputs(img: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Stage 3 inputs: 48x48 crops of the R-Net boxes (Nx3x48x48)."""
    return normalize(crops(img, boxes, 48)) if len(boxes) else np.zeros((0, 3, 48, 48), np.float32)


def onet_faces(boxes, reg, marks, prob, threshold: float = THRESHOLDS[2]) -> tuple[np.ndarray, np.ndarray]:
    """Stage 3: keep O-Net score > threshold, landmarks in image pixels, regress, NMS 0.7 ('min' overlap).
    Returns (Kx5 [box, score], Kx5x2 landmarks)."""
    keep = prob[:, 1] > threshold
    boxes, reg, marks = boxes[keep], reg[keep], marks[keep]
    boxes[:, 4] = prob[keep, 1]
    w, h = boxes[:, 2] - boxes[:, 0] + 1, boxes[:, 3] - boxes[:, 1] + 1
    points = np.stack([w[:, None] * marks[:, 0:5] + boxes[:, 0:1] - 1,
                       h[:, None] * marks[:, 5:10] + boxes[:, 1:2] - 1], axis=2)
    boxes = regress(boxes, reg)
    order = nms(boxes[:, :4], boxes[:, 4], 0.7, mode="min")
    return boxes[order], points[order]


@dataclass
class Detections:
    boxes: np.ndarray       # Kx4 [x1, y1, x2, y2]
    scores: np.ndarray      # K
    landmarks: np.ndarray   # Kx5x2 (x, y): left eye, right eye, nose, left and right mouth corner
    stage_counts: tuple[int, int, int]  # boxes left after P-, R- and O-Net
    pnet_maps: dict         # {signature: (reg, prob)}: the P-Net outputs, kept for comparisons


# A runner takes one stage's inputs for every photo and returns that stage's outputs for every photo:
#   P-Net: [ {signature: 1x3xhxw} ] -> [ {signature: (reg, prob)} ]
#   R-Net: [ Nx3x24x24 ] -> [ (reg Nx4, prob Nx2) ];  O-Net: [ Nx3x48x48 ] -> [ (reg, landmarks, prob) ]
Runner = Callable[[list], list]


def detect(imgs: list[np.ndarray], run_pnet: Runner, run_rnet: Runner, run_onet: Runner) -> list[Detections]:
    """Detect faces in every image, one stage at a time across all images."""
    maps = run_pnet([pnet_inputs(img) for img in imgs])
    cands = [pnet_boxes(img.shape, m) for img, m in zip(imgs, maps)]
    stage2 = [rnet_inputs(img, c) for img, c in zip(imgs, cands)]
    rnet_out = run_rnet([x for _, x in stage2])
    refined = [rnet_boxes(b, *o) for (b, _), o in zip(stage2, rnet_out)]
    onet_out = run_onet([onet_inputs(img, b) for img, b in zip(imgs, refined)])
    found = []
    for c, b, o, m in zip(cands, refined, onet_out, maps):
        final, points = onet_faces(b, *o)
        found.append(Detections(final[:, :4], final[:, 4], points, (len(c), len(b), len(final)), m))
    return found


def torch_runners(nets: dict[str, nn.Module]) -> tuple[Runner, Runner, Runner]:
    """The three runners backed by the torch networks (the reference pipeline)."""
    @torch.no_grad()
    def call(name, x):
        return tuple(o.numpy() for o in nets[name](torch.from_numpy(x)))

    return (lambda per_photo: [{sig: call("pnet", x) for sig, x in d.items()} for d in per_photo],
            lambda per_photo: [call("rnet", x) for x in per_photo],
            lambda per_photo: [call("onet", x) for x in per_photo])


def match_faces(boxes: np.ndarray, ref: np.ndarray) -> list[tuple[int, int, float]]:
    """Pair each reference face with the detected face of highest IoU (greedy, best pairs first).
    Returns [(ref index, detected index, IoU)]; unpaired reference faces get detected index -1, IoU 0."""
    pairs = sorted(((box_iou(r, b), i, j) for i, r in enumerate(ref) for j, b in enumerate(boxes)), reverse=True)
    used_r, used_b, out = set(), set(), []
    for iou, i, j in pairs:
        if i not in used_r and j not in used_b and iou > 0:
            used_r.add(i), used_b.add(j), out.append((i, j, iou))
    out += [(i, -1, 0.0) for i in range(len(ref)) if i not in used_r]
    return sorted(out)
