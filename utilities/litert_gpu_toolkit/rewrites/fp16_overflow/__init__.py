"""Wall `fp16_overflow`: a reduction or fill that leaves fp16's range (inf / NaN at full residency).

`norms`: LayerNorm / InstanceNorm in a scaled form and overflow-safe means and sums (exact to fp32 rounding);
`group_norm`: GroupNorm the same way, as a module or an F.group_norm call in a forward (`patch_group_norm`);
`mask_fill`: the default, exact mask fill (`patch_mask_fill_exact`) and the opt-in, approximate -1e4 one
(`patch_mask_fill_fp16`); `softmax`: softmax floored at -65504, so a fully masked row is uniform
as in torch instead of NaN (`patch_safe_softmax`); `rescale`: activations too large for fp16 between two linear
layers scaled by a power of two folded into their weights (`patch_rescale_homogeneous`, bit-identical in fp32);
`attention_scores`: q @ k^T past fp16's range before its 1/sqrt(d) scale, the scale's power of two moved into the
query projection (`patch_prescale_attention`, bit-identical in fp32); `vector_norm`: an L2 norm over many elements
in a scaled form (`patch_safe_vector_norm`, exact to fp32 rounding); `reductions`: means and sums over >= 1024
elements (global pools, squeeze-excite) prescaled by a power of two (`patch_safe_reductions`, bit-identical) or
as a cascade of small average pools (`patch_pooled_reductions`, opt-in, exact to fp32 rounding); `stream`: a
residual stream past fp16's range scaled by 2^-k where it is written and read (`patch_rescale_stream`,
bit-identical); `products`: a product past fp16's range whose scale cancels later (linear attention's ratio,
a gain) scaled by 2^-k until it does (`patch_rescale_products`, bit-identical).
"""
from __future__ import annotations

from .softmax import patch_safe_softmax, safe_softmax
from .rescale import patch_rescale_homogeneous
from .stream import patch_rescale_stream  # before the norms' patches: on nn.LayerNorm the check is bit-exact
from .attention_scores import patch_prescale_attention
from .vector_norm import patch_safe_vector_norm, safe_vector_norm
from .reductions import LONG_REDUCTION, patch_pooled_reductions, patch_safe_reductions
from .mask_fill import FP16_MAX, MASK_FILL, mask_fill_exact, patch_mask_fill_exact, patch_mask_fill_fp16
from .norms import (
    hierarchical_mean,
    safe_mean,
    safe_sum,
    row_scale,
    SafeLayerNorm,
    SafeRMSNorm,
    SafeInstanceNorm,
    patch_safe_layernorm,
    patch_instance_norm,
)
from .group_norm import SafeGroupNorm, patch_group_norm, safe_group_norm
from .products import patch_rescale_products  # last: its pre-pass sees the other patches' modules
