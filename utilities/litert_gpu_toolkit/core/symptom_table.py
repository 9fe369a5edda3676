"""The data of `symptoms`: the `Symptom` record and the table itself (one entry per wall or fault).

Kept apart from the lookups so the table can grow; import from `symptoms`, which re-exports both.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Symptom:
    id: str
    seen: str                       # what the user sees, in their words
    cause: str                      # why it happens
    rewrites: tuple[str, ...]       # toolkit names that remove it
    ops: tuple[str, ...] = ()       # op types that carry the symptom
    log: str | None = None          # regex over runtime / converter messages
    numeric: str | None = None      # numeric signature
    upstream: str | None = None     # upstream issue
    desktop_reproduces: bool = True # does the desktop (software Vulkan) GPU show it?
    phone_only_note: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    # op -> the subset of `rewrites` that can remove this symptom on that op (a rejection of ABS with a
    # constant input is not fixed by the softmax rewrite); ops not listed get all of `rewrites`
    by_op: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # where the `log` pattern is seen: "convert" (converter / torch.export errors), "gpu" (delegate / GPU
    # compile messages) or "any"; `for_log(text, stage=...)` matches only the symptoms of that stage
    stage: str = "any"
    # a numeric symptom's class: "fp16" (the fp32 GPU run is right: precision or range), "both" (fp32 on the GPU
    # is as wrong: a GPU miscompute), "any"; the checker suggests only the class the runs show
    fails_in: str = "any"


# elements reduced into one output value from which a MEAN / SUM is a phone-only risk (`long_reduction`): the
# lint's threshold and `patch_safe_reductions`'
LONG_REDUCTION = 1024


SYMPTOMS: tuple[Symptom, ...] = (
    Symptom(
        id="gather_nd",
        seen="GATHER_ND rejected by the GPU delegate",
        cause="Stride-2 slicing with a tensor index, grid_sample, MaxPool padding, bicubic / align_corners "
              "interpolation, reflect padding, torch.gather with a runtime index (HF buffered token-type ids) and "
              "indexing with integer tensors (HF attention-mask building: padding_mask[batch_idx, kv_idx]) "
              "lower to gathers, which the GPU does not run.",
        rewrites=("patch_grid_sample", "patch_maxpool_zeropad", "patch_interpolate", "patch_patch_merging",
                  "patch_reflect_pad", "patch_gather_onehot", "patch_index_onehot", "patch_index_arange",
                  "patch_fold_index_math"),
        ops=("GATHER_ND", "GATHER"),
        log=r"GATHER(_ND)?: ",
        stage="gpu",
    ),
    Symptom(
        id="rank_gt_4",
        seen="a tensor of rank 5 or more named in the compile error ('Tensor dimensions must be less than 5')",
        cause="PixelShuffle (rank-6 reshape), window attention, einops rearranges and packed-QKV head splits "
              "build tensors above rank 4, and a video network's input and activations are rank 5; the GPU "
              "handles at most rank 4.",
        rewrites=("patch_pixel_shuffle", "pixelshuffle_to_conv_transpose", "patch_window_attention", "patch_einops",
                  "patch_patch_merging", "lower_rank_views", "split_packed_qkv", "fold_rank5", "patch_pool3d"),
        log=r"dimensions must be less than 5",
        stage="gpu",
    ),
    Symptom(
        id="cumsum",
        seen="CUMSUM rejected by the GPU delegate ('indices must be constant int32 type')",
        cause="Hugging Face text models build position ids (RoBERTa-style cumsum over the non-pad mask) and "
              "masks with torch.cumsum; the GPU has no CUMSUM kernel.",
        rewrites=("patch_cumsum",),
        ops=("CUMSUM",),
    ),
    Symptom(
        id="constant_resize",
        seen="RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR rejected: the resize has no runtime input",
        cause="A constant (a position-embedding table) is resized on every forward; the converter keeps the "
              "resize and the GPU declines an op with only constant inputs. Often the target is the table's own "
              "size, i.e. an identity.",
        rewrites=("patch_identity_resize", "constant_to_input"),
        ops=("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"),
    ),
    Symptom(
        id="transpose_conv",
        seen="TRANSPOSE_CONV rejected (phones: op-version skew)",
        cause="The phone's delegate lags the converter's TRANSPOSE_CONV version; the op itself is fine.",
        rewrites=("patch_conv_transpose", "PolyphaseConvT1d", "PolyphaseConvT2d", "ZeroStuffConvT1d",
                  "ZeroStuffConvT2d"),
        ops=("TRANSPOSE_CONV",),
        log=r"legalize operation 'mhlo\.convolution'.*lhs_dilation",
        desktop_reproduces=False,
        phone_only_note="accepted by the desktop WebGPU delegate; rejected on some phones",
        notes=("litert-torch 0.10.0 converts ConvTranspose only with padding 0 or (k - s) / 2; any other "
               "padding (e.g. k=3, s=2, p=1, output_padding=1) fails to convert ('failed to legalize "
               "operation mhlo.convolution'); the same rewrites fix it.",),
        stage="convert",
    ),
    Symptom(
        id="select",
        seen="SELECT / SELECT_V2 rejected",
        cause="ELU, torch.where masking and in-place masked assignment lower to SELECT; the GPU declines "
              "it unless both branches have the output shape.",
        rewrites=("patch_select",),
        ops=("SELECT", "SELECT_V2"),
    ),
    Symptom(
        id="broadcast_to",
        seen="BROADCAST_TO rejected",
        cause="A runtime expand (GQA repeat_kv) or a constant outer product that did not fold. The GPU rejects "
              "runtime BROADCAST_TO even at rank 4.",
        rewrites=("patch_repeat_kv", "patch_broadcast_to"),
        ops=("BROADCAST_TO",),
        upstream="google-ai-edge/LiteRT#9191",
    ),
    Symptom(
        id="quantized_fc_rank3",
        seen="a FULLY_CONNECTED with int8 / int4 weights on the op reads a [B, S, C] input: GPU-only, wrong numbers "
             "(desktop); kernel creation fails on Mali ('Unable to parse bc coord for BATCH axis')",
        cause="The GPU's float FC parser turns a rank-3 FC into a 1x1 convolution; its integer-weight path does "
              "not. Every dynamic-range transformer encoder has it (each Linear on [B, S, C] feeding a residual ADD). "
              "Measured on llvmpipe, ai-edge-litert 2.3.0: corr 0.80-0.88 against the CPU; the same FC fed [B*S, C] "
              "is right.",
        rewrites=("fc_rank2",),
        log=r"Unable to parse bc coord for BATCH axis",
        upstream="google-ai-edge/LiteRT#9277",
        stage="gpu",
    ),
    Symptom(
        id="dequantized_weight",
        seen="a DEQUANTIZE feeds a FULLY_CONNECTED / EMBEDDING_LOOKUP / BATCH_MATMUL weight: 'Failed to initialize "
             "kernel' (int8 / int4), a crash, or 'EMBEDDING_LOOKUP: Empty quantization params' (an fp16 table)",
        cause="Weight-only quantization (an explicit DEQUANTIZE before the op) is a form the GPU delegate cannot "
              "take for these ops: the dequantized constant and the tensor the op reads get different layouts "
              "(LiteRT issue 9523, Metal / OpenCL / WebGPU). The forms it reads are integer weights on the op "
              "(dynamic-range) for FC and embedding tables, and fp16 behind a DEQUANTIZE for FC only.",
        rewrites=("quantize_for_gpu",),
        ops=("DEQUANTIZE",),
        upstream="google-ai-edge/LiteRT#9523",
    ),
    Symptom(
        id="masked_attention",
        seen="masked / biased attention compiles GPU-only and returns wrong numbers (fp16 and fp32)",
        cause="A rank-4 ADD of a mask or position bias onto attention scores is miscomputed: on older phone "
              "runtimes a [1,1,S,S] mask broadcast over heads; on the desktop GPU (llvmpipe, ai-edge-litert 2.3.0) "
              "any folded-constant operand (HF causal masks, T5 position bias), corr 0.33..0.90. The same ADD at "
              "rank 3 is right.",
        rewrites=("patch_attention_bias_add", "expand_attention_mask"),
    ),
    Symptom(
        id="output_aliasing",
        seen="an ADD result that is a graph output and also consumed downstream comes back wrong",
        cause="The returned buffer aliases an operand of the ADD (two runtime operands) instead of the sum: the "
              "shape of every explicit state update in a streaming or recurrent graph.",
        rewrites=("patch_output_aliasing", "alias_safe_output"),
        upstream="google-ai-edge/LiteRT#8599",
        desktop_reproduces=False,
        phone_only_note="seen on phones (Pixel 8a); the desktop GPU (llvmpipe) shows it under ai-edge-litert 2.1.3 "
                        "to 2.1.5 (the returned sum at corr 0.67 vs the CPU) and computes it right from 2.1.6 on "
                        "(scripts/runtime_walls.py, docs/runtime-walls.md)",
    ),
    Symptom(
        id="relu_0_to_1",
        seen="RELU_0_TO_1 rejected by the GPU delegate",
        cause="hard-sigmoid / Hardtanh(0, 1) lower to RELU_0_TO_1, accepted up to LiteRT 2.1.3 and rejected from "
              "2.1.5 on: a model at full residency fails after a runtime upgrade.",
        rewrites=("patch_hardsigmoid",),
        ops=("RELU_0_TO_1",),
        upstream="google-ai-edge/LiteRT#8598",
    ),
    Symptom(
        id="identical_or_constant_inputs",
        seen="'No support of few identical inputs' / 'Expected 1 const input tensor(s)' (device only)",
        cause="The delegate declines an op whose two inputs are the same tensor (x / x) and ops whose inputs are "
              "all constants; they split the graph into partitions.",
        rewrites=("patch_fold_constants", "patch_degenerate_softmax", "patch_relative_position_bias",
                  "constant_to_input", "l2_normalize"),
        log=r"identical inputs|const input tensor",
        by_op=(("ABS", ("patch_fold_constants", "patch_relative_position_bias", "constant_to_input")),
               ("LOG", ("patch_fold_constants", "patch_relative_position_bias", "constant_to_input")),
               ("MINIMUM", ("patch_fold_constants", "patch_relative_position_bias", "constant_to_input")),
               ("DIV", ("patch_fold_constants", "patch_degenerate_softmax", "constant_to_input")),
               ("SUB", ("patch_fold_constants", "patch_degenerate_softmax", "constant_to_input")),
               ("MUL", ("patch_fold_constants", "l2_normalize", "constant_to_input"))),
        upstream="google-ai-edge/LiteRT#9192",
        desktop_reproduces=False,
        stage="gpu",
    ),
    Symptom(
        id="amax",
        seen="'NHWC node rewriter not found: amax' at conversion",
        cause="Reduce-max over channels (stable softmax, adaptive norms, qk-norm) has no GPU-layout lowering.",
        rewrites=("patch_amax",),
        log=r"rewriter not found: amax",
        stage="convert",
    ),
    Symptom(
        id="split",
        seen="SPLIT rejected",
        cause="Tensor.chunk / split lower to SPLIT, which the GPU rejects; plain slices are exact.",
        rewrites=("patch_chunk",),
        ops=("SPLIT", "SPLIT_V"),
    ),
    Symptom(
        id="linear_channel_attention",
        seen="'tfl.mul operands don't have broadcast-compatible shapes' at conversion",
        cause="Channel attention written with nn.Linear confuses the converter's layout handling.",
        rewrites=("patch_channel_attention_linear",),
        log=r"broadcast-compatible shapes",
        stage="convert",
    ),
    Symptom(
        id="fft",
        seen="'Lowering not found: aten._fft_r2c' / 'aten.complex' / 'torch.complex64'",
        cause="torch.stft / istft, torch.fft's transforms and complex tensors have no lowering; a DFT is a fixed "
              "linear map and can be a convolution or a matrix product. The graph pass's `fft` rule writes any "
              "torch.fft transform of real data read back as real numbers (FNet's fftn(...).real, a magnitude "
              "spectrum) as cos / sin matrix products; the rewrites here cover stft / istft.",
        rewrites=("patch_stft", "ConvSTFT", "ConvISTFT", "LogMel"),
        log=r"_fft_|aten\.complex|view_as_real|view_as_complex|torch\.complex64",
        ops=("RFFT2D", "CUSTOM:FlexRFFT"),
        stage="convert",
    ),
    Symptom(
        id="maxpool_neg_inf_pad",
        seen="MaxPool padding as PADV2 with -inf, declined or miscomputed on phones",
        cause="Padded (or ceil-mode) max-pooling pads with -inf; fp16 GPUs and older delegates mishandle it.",
        rewrites=("patch_maxpool_zeropad",),
        ops=("PADV2",),
        desktop_reproduces=False,
    ),
    Symptom(
        id="padded_mean",
        seen="compiles GPU-only, the output is inf in fp16 and in fp32 (LiteRT's CPU is right): a global average "
             "pool right after a normalisation or a division, at a small map",
        cause="The GPU fuses elementwise ops into the MEAN after them and reduces the plane 4 columns at a time; a "
              "width that is not a multiple of 4 leaves empty lanes, where a fused DIV (by a tensor that varies "
              "over the plane) or RSQRT gives inf. Measured on llvmpipe, ai-edge-litert 2.3.0: widths 1-3 and 5-7 "
              "fail, 4 and 8 do not; AVERAGE_POOL_2D over the same plane is right.",
        rewrites=("patch_padded_mean",),
        numeric="nonfinite",
        fails_in="both",
    ),
    Symptom(
        id="long_reduction",
        seen="a global pool / squeeze-excite / long mean runs, and on a phone comes back inf or wrong",
        cause="MEAN or SUM reducing >= 1024 elements per output: a GPU that accumulates in fp16 passes 65504 once "
              "a partial sum does, and a running sum of similar terms m goes wrong past ~2048 m (each term counts as "
              "0 or 2 m) and stops growing past ~4096 m. The desktop delegate here reduces these correctly; phones' "
              "fp16 kernels need not.",
        rewrites=("patch_pooled_reductions", "patch_safe_reductions", "hierarchical_mean", "safe_mean", "safe_sum"),
        ops=("MEAN", "SUM"),
        desktop_reproduces=False,
        phone_only_note="reduced correctly by the desktop WebGPU delegate (llvmpipe); an fp16 accumulator is not",
        fails_in="fp16",
    ),
    Symptom(
        id="cast",
        seen="CAST ops fall to the CPU",
        cause="Integer / boolean masks (attention masks, index arithmetic) are cast inside the graph; the GPU "
              "delegate does not take CAST on every phone.",
        rewrites=("patch_select",),
        ops=("CAST",),
        desktop_reproduces=False,
        notes=("Feed masks as float inputs, or build them arithmetically in float.",),
    ),
    Symptom(
        id="reverse_v2",
        seen="torch.flip: compiles GPU-only, runs, and returns wrong values (no error)",
        cause="REVERSE_V2 (from torch.flip) is accepted by the desktop WebGPU delegate but computed wrongly "
              "(correlation 0.37 on a ramp, llvmpipe, ai-edge-litert 2.3.0).",
        rewrites=("patch_flip",),
        ops=("REVERSE_V2",),
    ),
    Symptom(
        id="grouped_conv",
        seen="a grouped convolution compiles GPU-only and returns wrong values (or the process dies with SIGILL)",
        cause="The desktop GPU's grouped CONV_2D is wrong unless the input and output channels per group are both "
              "multiples of 4 (depthwise is fine, except a 1x1 depthwise conv with a channel multiplier: FastViT); "
              "measured on llvmpipe, ai-edge-litert 2.3.0.",
        rewrites=("patch_grouped_conv", "conv_per_group"),
        ops=("CONV_2D",),
    ),
    Symptom(
        id="conv_forms",
        seen="Conv1d(padding='same') fails to convert (\"Expected a value of type 'List[int]' for argument "
             "'padding'\"); a functional grouped conv returns wrong values; Conv3d is rejected (rank 5)",
        cause="litert-torch cannot lower conv1d's string-padding overload; the GPU's grouped CONV_2D is wrong "
              "unless the channels per group are multiples of 4 (a weight built in forward escapes the module "
              "patch); Conv3d's tensors are rank 5. Measured on llvmpipe, ai-edge-litert 2.3.0.",
        rewrites=("patch_conv_forms",),
        log=r"for argument 'padding'",
    ),
    Symptom(
        id="unfold",
        seen="Tensor.unfold framing or F.unfold / nn.Unfold patches: GATHER_ND, BROADCAST_TO or rank-5/6 "
             "tensors rejected, or a conversion error; F.fold / nn.Fold: a STABLEHLO_SCATTER LiteRT's CPU cannot "
             "prepare ('Only update, Add, Multiply, Maximum and Minimum operations ...')",
        cause="unfold lowers to index arithmetic and gathers (framing for STFTs, im2col for patch embeddings); "
              "chained image-patch unfolds build rank-6 tensors; fold (col2im) lowers to a scatter.",
        rewrites=("patch_unfold",),
        log=r"aten\.(unfold|im2col|col2im)|stablehlo\.scatter",
    ),
    Symptom(
        id="fp16_overflow",
        seen="compiles and runs on the GPU, output is NaN / inf",
        cause="A reduction (variance, sum of squares, long mean) passes fp16's 65504 on the GPU, a constant "
              "beyond it (HF's finfo(float32).min mask fill) meets a multiply by 0, or a layer's outputs "
              "themselves pass it (large BN-folded weights, a gated MLP's product, attention scores formed "
              "before their 1/sqrt(d) scale); or the other end: a constant below fp16's smallest subnormal "
              "rounds to 0 (F.normalize's eps = 1e-12: a zero vector, a padded key, gives 0 / 0). bisect "
              "names the op by running torch with fp16 tensors (class overflow or underflow).",
        rewrites=("patch_safe_layernorm", "patch_rmsnorm", "patch_instance_norm", "patch_group_norm",
                  "hierarchical_mean", "safe_mean", "safe_sum", "patch_mask_fill_exact", "patch_safe_softmax",
                  "patch_rescale_homogeneous", "patch_prescale_attention", "patch_safe_vector_norm",
                  "patch_mask_fill_fp16", "l2_normalize", "patch_safe_reductions", "patch_rescale_stream",
                  "patch_rescale_products"),
        numeric="nonfinite",
        fails_in="fp16",
    ),
    Symptom(
        id="fp16_silent_zero",
        seen="compiles and runs on the GPU, output is exactly zero (a head outputs all zeros)",
        cause="RMSNorm's sum of squares overflowed to inf in fp16 and the normalisation divided it away.",
        rewrites=("patch_rmsnorm", "patch_safe_layernorm", "hierarchical_mean"),
        numeric="all_zero",
        fails_in="fp16",
    ),
    Symptom(
        id="fp16_degraded",
        seen="compiles and runs on the GPU, output finite but far from the reference",
        cause="fp16 precision loss in one block (bisect finds it) or compounding with depth. One known source: "
              "ELU / CELU / SELU / expm1 lower to EXP then SUB, and exp(x) - 1 cancels for x near 0 (an ELU of "
              "inputs in [-0.01, 0] comes back at SNR 32 dB on llvmpipe, ai-edge-litert 2.3.0; EnCodec's decoder "
              "has one between every conv).",
        rewrites=("bisect", "patch_safe_expm1", "patch_safe_layernorm", "patch_instance_norm", "patch_group_norm",
                  "hierarchical_mean"),
        numeric="degraded",
        fails_in="fp16",
    ),
    Symptom(
        id="fp16_compounding",
        seen="output starts near-correct and degrades steadily with depth",
        cause="Precision compounding across many fp16 blocks. bisect's torch16 column (torch with fp16 tensors) "
              "tells the two kinds apart: torch16 right, the GPU wrong -- the GPU's own accumulation, which split-K "
              "wins back for long dot products; torch16 wrong too -- fp16 storage itself, which no exact rewrite "
              "fixes: a precision plan cut where bisect measures fp16 still holds, or fp32 (the zoo's trained-mode "
              "MobileNetV2 plant: torch16 0.96 at the output).",
        rewrites=("bisect", "patch_split_k", "plan_precision"),
        numeric="compounding",
        fails_in="fp16",
    ),
    Symptom(
        id="parametrized_weights",
        seen="a weight_norm / spectral_norm / parametrized layer: copying the model fails ('Only Tensors created "
             "explicitly by the user (graph leaves) support the deepcopy protocol'), or the weight's norm is "
             "recomputed inside the converted graph",
        cause="torch.nn.utils.weight_norm / spectral_norm and torch.nn.utils.parametrize recompute a layer's weight "
              "from other parameters on every forward; the hook version keeps a non-leaf tensor on the module. For "
              "inference the weight is a constant.",
        rewrites=("fold_parametrizations",),
        log=r"graph leaves\) support the deepcopy|_weight_norm|torch/nn/utils/parametriz",
        stage="convert",
    ),
    Symptom(
        id="constant_blowup",
        seen="the .tflite is far larger than the weights",
        cause="A frozen parameter times a constant folds into a full-size constant per block.",
        rewrites=("constant_to_input",),
        desktop_reproduces=True,
        notes=("Detect from the file: rewrites.constant_blowup.find_constant_blowup(model_info, module).",
               "On llvmpipe the folded [1, S, D] constant ADDed onto a rank-2 FULLY_CONNECTED result was also "
               "miscomputed (corr ~0.8); feeding the factor as an input fixed both.",),
    ),
    Symptom(
        id="constant_operand",
        seen="an elementwise op (ADD, MUL, ...) with a constant operand compiles GPU-only and returns wrong numbers "
             "(fp16 and fp32) when its output has rank 2 or 3",
        cause="The desktop GPU computes a rank-2/3 binary op wrongly when its constant operand varies along an axis "
              "other than the last (runtime [4, 8, 1] * constant [4, 8, 8]: corr 0.09; [2, 8] + constant [1, 2, 8]: "
              "0.59); the same op at rank 4 is right, unless the runtime operand is broadcast over a first axis the "
              "constant fills (runtime [1, 1, 1, 1] - constant [8, 256, 1, 1]: 0.07). Seen in WavLM's gated position "
              "bias, folded tables added to rank-2 results, a decoder's cache-write one-hot from its position. "
              "A zero PAD of a rank-3 tensor whose first axis is > 1 is wrong the same way ([2, 15, 32]: corr "
              "-0.06; MobileBERT's trigram embedding). "
              "bisect names such nodes in a miscomputing block. Measured on llvmpipe, ai-edge-litert 2.3.0.",
        rewrites=("patch_constant_operand_rank4", "patch_fold_constants", "patch_pad_rank4"),
        numeric="degraded",
        fails_in="both",
    ),
    Symptom(
        id="batch_matmul",
        seen="BATCH_MATMUL rejected ('Not supported batched mat mul case: non-constant tensor'), or a batched matmul "
             "whose batch axes broadcast compiles GPU-only and returns wrong numbers",
        cause="The GPU takes a constant only as the right operand of a batched matmul (a learned attention query, "
              "a ones matrix after a length-1 softmax, a learned table in an einsum that torch orders constant-first "
              "are left operands); a batched matmul whose operands' batch "
              "axes differ and broadcast is miscomputed (corr ~0.5 on llvmpipe, ai-edge-litert 2.3.0).",
        rewrites=("patch_matmul_operands",),
        ops=("BATCH_MATMUL",),
        log=r"batched mat mul",
    ),
    Symptom(
        id="bool_slice",
        seen="STRIDED_SLICE rejected by the GPU delegate ('Max version supported: 2. Requested version 3.')",
        cause="A stepped slice of a bool tensor (mask[:, ::2]: Funnel Transformer pools its attention and token-type "
              "masks so) converts to the bool form of STRIDED_SLICE, version 3; the GPU takes version 2 at most. The "
              "same slice of a float tensor runs. Measured on llvmpipe, ai-edge-litert 2.3.0.",
        rewrites=("patch_bool_slice",),
        ops=("STRIDED_SLICE",),
        log=r"STRIDED_SLICE: Max version supported",
    ),
    Symptom(
        id="avg_pool",
        seen="a padded average pool (AvgPool2d with padding) compiles GPU-only and returns wrong numbers, or "
             "STABLEHLO_REDUCE_WINDOW is rejected (count_include_pad=False)",
        cause="AvgPool2d(3, 2, 1) converts to PAD + AVERAGE_POOL_2D, which the desktop GPU computes wrongly near the "
              "borders (corr 0.968, fp16 and fp32); count_include_pad=False becomes a REDUCE_WINDOW the GPU has no "
              "kernel for. Measured on llvmpipe, ai-edge-litert 2.3.0.",
        rewrites=("patch_avg_pool",),
        ops=("STABLEHLO_REDUCE_WINDOW",),
        numeric="degraded",
        fails_in="both",
    ),
    Symptom(
        id="strided_assign",
        seen="STABLEHLO_PAD rejected by the GPU delegate ('Operation is not supported')",
        cause="Assignment into a strided slice (y[:, 2::3] = v, YOLO pose keypoint decoding) converts to a pad with "
              "interior padding, which the GPU has no kernel for.",
        rewrites=("patch_strided_assign",),
        ops=("STABLEHLO_PAD",),
    ),
    Symptom(
        id="recurrent",
        seen="nn.GRU without an initial state (batch > 1) compiles GPU-only and returns wrong numbers (fp16 and fp32)",
        cause="The converter's lowering of nn.GRU materialises a missing initial state as zeros and folds them (with "
              "the hidden bias) into a [1, B, H] constant operand of the first step's rank-2 [B, H] ADD / MUL. The "
              "desktop GPU miscomputes an elementwise op whose constant operand spans a non-last axis: [B, H] + "
              "C[1, B, H] is wrong even with equal rows, [B, H] + C[B, H] with unequal rows too; a [H] bias is "
              "right. Bidirectional layers also reverse the sequence with REVERSE_V2.",
        rewrites=("patch_recurrent",),
        numeric="degraded",
        notes=("Measured on llvmpipe, ai-edge-litert 2.3.0: nn.GRU(8, 16) on [2, 5, 8], corr 0.994 (0.905 with "
               "bias=False); the same layer with h0 given, or at batch 1, is right. LSTM / RNN and the cells "
               "convert right; patch_recurrent unrolls all of them so no zero-state constant is emitted.",),
        fails_in="both",
    ),
    Symptom(
        id="expert_dispatch",
        seen="a mixture-of-experts model does not convert ('no lowering for aten.histc', a data-dependent "
             "nonzero / sort), or its experts' weights are gathered per token (GATHER)",
        cause="Hugging Face's expert layers send each token only to its top-k experts: the grouped form counts "
              "tokens per expert with histc and sorts them, the eager form loops over the experts that were hit, "
              "the batched form gathers each token's expert weights. None is a static graph of GPU ops.",
        rewrites=("patch_dense_experts",),
        log=r"aten\.histc|grouped_mm",
        stage="convert",
        notes=("Measured on llvmpipe, ai-edge-litert 2.3.0: OLMoE (4 experts, top-2) CONVERT_FAIL on histc; with "
               "the dense experts 320/320 ops on the GPU. The dense form costs E / k times the expert compute.",),
    ),
)
