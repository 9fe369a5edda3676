"""Every zoo row, one module per library. `ZOO` maps a row name to its `ZooModel`; `ROWS` keeps their order.
Importing this package imports no model library (each builder does, when called)."""
from __future__ import annotations

from . import (calls, diffusers_models, held_out, held_out_41, held_out_41b, held_out_41c, held_out_41d, held_out_41e,
               held_out_41f, hf, hf_calls, timm_models, torchvision_models, yolo)

ROWS = (*hf.ROWS, *hf_calls.ROWS, *timm_models.ROWS, *torchvision_models.ROWS, *diffusers_models.ROWS, *yolo.ROWS)
ZOO = {m.name: m for m in ROWS}
LIBRARIES = tuple(dict.fromkeys(m.library for m in ROWS))
HELD_OUT = held_out.HELD_OUT                     # not in ZOO, not in its score (see held_out.py)
HELD_OUT_41 = held_out_41.HELD_OUT_41            # issue 41's held-out set (scripts/measure_held_out.py)
HELD_OUT_41B = held_out_41b.HELD_OUT_41B         # its second set, named after the pass's rules landed
HELD_OUT_41C = held_out_41c.HELD_OUT_41C         # its third set, named 2026-12-07
HELD_OUT_41D = held_out_41d.HELD_OUT_41D         # its fourth set, named 2026-12-07 (later)
HELD_OUT_41E = held_out_41e.HELD_OUT_41E         # its fifth set, named 2026-12-07 (later still)
HELD_OUT_41F = held_out_41f.HELD_OUT_41F         # its sixth set, named 2026-12-08
CALL_ROWS = calls.call_rows(ROWS)               # each text row called each way users call it (calls.py)
# what the runner can build, by name
EVERY = {**ZOO, **HELD_OUT, **HELD_OUT_41, **HELD_OUT_41B, **HELD_OUT_41C, **HELD_OUT_41D, **HELD_OUT_41E,
         **HELD_OUT_41F, **CALL_ROWS}
assert len(ZOO) == len(ROWS) and not set(ZOO) & set(HELD_OUT), "zoo row names must be unique"
assert not (set(ZOO) | set(HELD_OUT)) & set(HELD_OUT_41), "zoo row names must be unique"
assert not (set(ZOO) | set(HELD_OUT) | set(HELD_OUT_41)) & set(HELD_OUT_41B), "zoo row names must be unique"
assert not (set(ZOO) | set(HELD_OUT) | set(HELD_OUT_41) | set(HELD_OUT_41B)) & set(HELD_OUT_41C), "names must be unique"
assert not (set(ZOO) | set(HELD_OUT) | set(HELD_OUT_41) | set(HELD_OUT_41B) | set(HELD_OUT_41C)) & set(HELD_OUT_41D), \
    "names must be unique"
_EARLIER = set(ZOO) | set(HELD_OUT) | set(HELD_OUT_41) | set(HELD_OUT_41B) | set(HELD_OUT_41C) | set(HELD_OUT_41D)
assert not _EARLIER & set(HELD_OUT_41E), "names must be unique"
assert not (_EARLIER | set(HELD_OUT_41E)) & set(HELD_OUT_41F), "names must be unique"
