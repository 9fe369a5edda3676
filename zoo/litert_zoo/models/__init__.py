"""Every zoo row, one module per library. `ZOO` maps a row name to its `ZooModel`; `ROWS` keeps their order.
Importing this package imports no model library (each builder does, when called)."""
from __future__ import annotations

from . import diffusers_models, hf, hf_calls, timm_models, torchvision_models, yolo

ROWS = (*hf.ROWS, *hf_calls.ROWS, *timm_models.ROWS, *torchvision_models.ROWS, *diffusers_models.ROWS, *yolo.ROWS)
ZOO = {m.name: m for m in ROWS}
LIBRARIES = tuple(dict.fromkeys(m.library for m in ROWS))
assert len(ZOO) == len(ROWS), "zoo row names must be unique"
