"""Wall `gather_nd`: ops that lower to GATHER / GATHER_ND, which the GPU does not run.

One module per spelling: `reflect_pad`, `maxpool`, `interpolate`, `grid_sample`, `onehot` (torch.gather and
integer-tensor indexing), `arange_index` (indexing by aranges: HF mask building, per-row picks). Every
rewrite here is exact (see each module for its bound).
"""
from __future__ import annotations

from .arange_index import arange_offset, index_by_arange, patch_index_arange
from .index_math import patch_fold_index_math
from .grid_sample import grid_sample_dense, patch_grid_sample
from .interpolate import resize_matrix, interpolate_separable, SeparableUpsample, patch_interpolate
from .maxpool import maxpool_edge_pad, EdgePadMaxPool, patch_maxpool_zeropad
from .onehot import GATHER_MAX_ELEMENTS, gather_onehot, patch_gather_onehot, index_onehot, patch_index_onehot
from .reflect_pad import PAD_MODES, pad_by_slices, SliceConcatPadConv, patch_reflect_pad
