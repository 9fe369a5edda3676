"""Transposed convolution without TRANSPOSE_CONV: zero-stuffed and polyphase forms.

Wall: `transpose_conv` in `symptoms.py`. Some phone GPU delegates reject the converter's
TRANSPOSE_CONV (op-version skew); the desktop WebGPU delegate accepts it, so on this toolchain the
proof is that the original graph *contains* TRANSPOSE_CONV and the rewritten one does not. A grouped
(depthwise) ConvTranspose is worse still: the converter splits it into one SLICE + TRANSPOSE_CONV per
group and a CONCATENATION.

Two exact replacements, both plain stride-1 convolutions plus rank-4 reshapes / transposes:

* `ZeroStuffConvT1d` / `ZeroStuffConvT2d`: insert `stride - 1` zeros between input samples
  (a reshape + PAD), pad / crop the borders, convolve with the flipped, transposed kernel. Handles
  every ConvTranspose option (groups, padding, output_padding, dilation, unequal strides). It
  multiplies by the stuffed zeros: stride (1-D) or stride_h * stride_w (2-D) times the MACs of the
  transposed conv, and it materialises the full-resolution stuffed input.
* `PolyphaseConvT1d` / `PolyphaseConvT2d`: one stride-1 conv at the *input* resolution computes every
  output phase (stride (1-D) or stride_h * stride_w (2-D) phases, `out_channels * phases` conv
  outputs, channel-major order c * phases + phase), then a rank-4 interleave (depth-to-space) and a
  crop. The kernel is zero-padded up to a multiple of the stride, so it applies to any kernel size;
  groups (including depthwise) map to a grouped conv; dilation is handled by densifying the kernel
  (zeros between taps), which costs MACs, so `patch_conv_transpose(mode="auto")` picks the form with
  fewer MACs. Its MACs equal the transposed conv's own, up to the kernel padding.
* Depthwise upsamplers (groups == in_channels == out_channels) become a DEPTHWISE_CONV_2D with depth
  multiplier stride**2 -- each output phase is a per-channel m x m filter of the input (m =
  ceil(kernel / stride); for kernel == stride it is a per-channel multiply) -- plus the interleave.
  `DepthwisePolyphaseConvT2d` / `DepthwisePolyphaseConvT1d` are that form (a `PolyphaseConvT*d`
  whose conv is depthwise); `patch_conv_transpose` uses it automatically.
* The functional spelling `F.conv_transpose1d` / `F.conv_transpose2d` (= `torch.conv_transpose1d` / 2d),
  often with a weight built in forward, is caught by a handler of the same rewrite name
  (`patch_conv_transpose`, active inside `GpuRewriteWrapper`): the weight is rearranged into the
  polyphase layout with rank <= 4 ops (constant 0/1 selection matmuls, transposes, reshapes), so a
  constant-built weight folds and a runtime weight stays GPU-clean (CONV_2D with a runtime filter runs
  on llvmpipe). See `functional.py`.

Exactness: all forms compute the same sums of products as ConvTranspose, in a different order, so
they agree to fp32 rounding (measured max relative error ~1e-6 of the output scale, bound
`<= k_taps * in_channels * 2**-23` relative to sum(|x| |w|)), for any finite input. Inputs holding
inf/NaN: the zero-stuffed form multiplies stuffed zeros by kernel taps only (never the input), so a
non-finite input spreads exactly as far as in ConvTranspose; the polyphase form's zero-padded kernel
taps multiply real inputs, so an inf input can turn into NaN at neighbouring outputs (0 * inf).
"""
from __future__ import annotations

from .patch import choose_form, patch_conv_transpose
from .polyphase import (
    polyphase_forward,
    polyphase_weight,
    PolyphaseConvT1d,
    PolyphaseConvT2d,
    DepthwisePolyphaseConvT1d,
    DepthwisePolyphaseConvT2d,
)
from .spec import ConvTSpec, conv_transpose_macs, interleave_phases, zero_stuff, conv_per_group
from .zero_stuff import ZeroStuffConvT1d, ZeroStuffConvT2d
from .functional import conv_transpose_polyphase, polyphase_weight_rank4, selection_matrix
