"""Fixed-size tiles with overlap, for running a fixed-shape graph over a whole image.

A graph exported for a T x T input runs on any image: cut overlapping T x T tiles (the last one
flush with the edge), run each, and paste each output tile's centre region (the overlap split
half and half between neighbours) into the full-size output.
"""
from __future__ import annotations

import numpy as np


def positions(length: int, tile: int, overlap: int) -> list[int]:
    """Start offsets covering [0, length) with tiles of `tile` overlapping by at least `overlap`."""
    if length < tile:
        raise ValueError(f"image side {length} is smaller than the tile {tile}; pad it first")
    if not 0 <= overlap < tile:
        raise ValueError("overlap must be in [0, tile)")
    step = tile - overlap
    starts = list(range(0, length - tile + 1, step))
    if starts[-1] != length - tile:
        starts.append(length - tile)
    return starts


def split(image: np.ndarray, tile: int, overlap: int) -> tuple[list[np.ndarray], list[tuple[int, int]]]:
    """Cut an (H, W, C) image into tiles; returns the tiles and their (y, x) offsets."""
    h, w = image.shape[:2]
    tiles, where = [], []
    for y in positions(h, tile, overlap):
        for x in positions(w, tile, overlap):
            tiles.append(image[y:y + tile, x:x + tile])
            where.append((y, x))
    return tiles, where


def stitch(tiles: list[np.ndarray], where: list[tuple[int, int]], in_shape: tuple[int, int], tile: int,
           scale: float = 1.0) -> np.ndarray:
    """Paste output tiles (each `tile*scale` square) back; neighbours share their overlap at the midpoint."""
    h, w = in_shape
    out_tile = tiles[0].shape[0]
    oh, ow = round(h * scale), round(w * scale)
    out = np.zeros((oh, ow) + tiles[0].shape[2:], dtype=tiles[0].dtype)
    ys = sorted({y for y, _ in where})
    xs = sorted({x for _, x in where})

    def span(starts, idx, full):
        s = starts[idx]
        lo = 0 if idx == 0 else (starts[idx - 1] + tile + s) // 2
        hi = full if idx == len(starts) - 1 else (s + tile + starts[idx + 1]) // 2
        return lo, hi

    for t, (y, x) in zip(tiles, where):
        y0, y1 = span(ys, ys.index(y), h)
        x0, x1 = span(xs, xs.index(x), w)
        Y0, Y1, X0, X1 = (round(v * scale) for v in (y0, y1, x0, x1))
        oy, ox = round(y * scale), round(x * scale)
        out[Y0:Y1, X0:X1] = t[Y0 - oy:Y1 - oy, X0 - ox:X1 - ox]
        assert out_tile >= Y1 - oy and out_tile >= X1 - ox
    return out
