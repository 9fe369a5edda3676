"""Old import path, kept for existing importers (scripts/bench_rewrites.py, tests, recipes).

The rewrites that lived here are now one module per wall (named for the symptom id in
`litert_gpu_toolkit.symptoms`): `select`, `broadcast_to`, `relu_0_to_1`, `amax`, `split`,
`linear_channel_attention`, `identical_inputs`, with the shared helpers in `scoping`.
New code should import from those modules.
"""
from __future__ import annotations

from .amax import *  # noqa: F401,F403
from .amax import __all__ as _amax
from .broadcast_to import *  # noqa: F401,F403
from .broadcast_to import __all__ as _broadcast
from .identical_inputs import *  # noqa: F401,F403
from .identical_inputs import __all__ as _identical
from .linear_channel_attention import *  # noqa: F401,F403
from .linear_channel_attention import __all__ as _linear
from .relu_0_to_1 import *  # noqa: F401,F403
from .relu_0_to_1 import __all__ as _relu01
from .scoping import scope_rewrites, scoped_rewrites  # noqa: F401
from .select import *  # noqa: F401,F403
from .select import __all__ as _select
from .split import *  # noqa: F401,F403
from .split import __all__ as _split

__all__ = [*_select, *_broadcast, *_relu01, *_amax, *_split, *_linear, *_identical,
           "scope_rewrites", "scoped_rewrites"]
