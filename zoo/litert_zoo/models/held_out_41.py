"""Issue 41's held-out set: architectures named before any of them was converted, run once, first results kept.

None of these rows is in the zoo (`hf`, `hf_calls`, `timm_models`, `torchvision_models`, `diffusers_models`,
`yolo`) or in the earlier held-out set (`held_out.py`), and nobody here developed against them. They are named in
this file and committed before the first run; `scripts/measure_held_out.py` runs each once through
`convert_for_gpu` with the defaults (the zoo's runner) and, for the Hugging Face rows, through
`python -m litert_gpu_toolkit export --task TASK` on the same model saved with `save_pretrained`. The results
(`zoo/held_out_41/`) are reported apart from the zoo's score and are never re-run after a change made for them.

Every model is built from its config class at a small size with the library's own initialisation, then the zoo's
weight rule (`weights.py`); nothing is downloaded and no remote code runs. Text encoders are called as users call
them: `input_ids` and a padded `attention_mask`, no token type ids (`_masked(False)`). The text and LLM configs
keep 512 positions so that the export command's default lengths (128-token text, 128-token prefill with a 256-row
KV cache) fit them.

`EXPORT` names, per Hugging Face row, the export task: the command runs on the row's own model (its redrawn
weights, saved with `save_pretrained`) with the command's default shapes and no other argument. For the speech
rows the task's CTC head is new (transformers initialises it when it loads the saved encoder).

Considered and left out before naming, after one torch forward each (allowed before naming; nothing converted):
Nystromformer (its Nystrom branch cannot add a padded attention_mask in transformers 5.24: a shape error in torch),
MRA (on CPU its attention is all zeros without the CUDA kernels), LiLT (the small config tried failed in torch with a
shape error in its layout stream; not pursued), EfficientNet and MobileNetV1 (HF) (their random outputs sit at 1e-7 and
1e-5 under the zoo's weight rule: below fp16's normal range, a check of the rule rather than of the toolkit),
VGG-11-BN and AlexNet (128 M and 57 M parameters in fixed 4096-wide classifiers: too slow for this run's time).
"""
from __future__ import annotations

from ..build import audio, image
from ..weights import ZooModel
from ._hf import _SPEECH, _causal_lm, _hf, _masked
from .timm_models import _timm
from .torchvision_models import _tv

_ENC = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=512)
_VIT32 = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
              patch_size=8)


def _row(name, build, library, domain="vision"):
    return ZooModel(f"h41_{name}", domain, build, library=library)


# In run order: the libraries and domains interleave, so that a run cut short still covers each of them.
ROWS: tuple[ZooModel, ...] = (
    # DeBERTa (v1): disentangled relative attention (c2p + p2c), no absolute positions, XSoftmax masking
    _row("deberta", _hf("DebertaModel", "DebertaConfig", _masked(False), relative_attention=True,
                        pos_att_type=["c2p", "p2c"], position_biased_input=False, max_relative_positions=32,
                        type_vocab_size=0, **_ENC), "transformers", "text"),
    # TinyViT: MBConv stem stages, then windowed attention with an attention-bias table, padded windows
    _row("timm_tiny_vit_5m", _timm("tiny_vit_5m_224", 64), "timm"),
    # GPT-J: parallel attention + MLP, interleaved (rotate-every-two) rotary on 8 of 16 head dims
    _row("gptj", _causal_lm("GPTJForCausalLM", "GPTJConfig", vocab_size=100, n_embd=64, n_layer=2, n_head=4,
                            n_positions=512, rotary_dim=8), "transformers", "llm"),
    # Data2Vec vision: BEiT-style relative position bias per layer, layer scale, mean pooling
    _row("data2vec_vision", _hf("Data2VecVisionModel", "Data2VecVisionConfig", image,
                                use_relative_position_bias=True, use_mean_pooling=True, **_VIT32), "transformers"),
    # ResNeXt-50 32x4d: grouped 3x3 convolutions (32 groups)
    _row("tv_resnext50_32x4d", _tv("resnext50_32x4d", num_classes=10), "torchvision"),
    # SEW: wav2vec2-style conv front end, sequence squeezed (pooled x2) before the transformer, upsampled after
    _row("sew", _hf("SEWModel", "SEWConfig", audio, squeeze_factor=2, **_SPEECH), "transformers", "audio"),
    # YOSO: LSH-based attention, at inference its expectation (collision probabilities from angles, acos)
    _row("yoso", _hf("YosoModel", "YosoConfig", _masked(False), **_ENC), "transformers", "text"),
    # ConViT: gated positional self-attention (learned blend of content and positional attention)
    _row("timm_convit_tiny", _timm("convit_tiny", 64, img_size=64), "timm"),
    # Persimmon: partial rotary (half the head dims), LayerNorm on queries and keys, squared ReLU MLP
    _row("persimmon", _causal_lm("PersimmonForCausalLM", "PersimmonConfig", partial_rotary_factor=0.5,
                                 qk_layernorm=True, **_ENC), "transformers", "llm"),
    # SwiftFormer: efficient additive attention (no QK^T), conv encoders
    _row("swiftformer", _hf("SwiftFormerModel", "SwiftFormerConfig", lambda: image(64), image_size=64,
                            depths=[1, 1, 1, 1], embed_dims=[16, 24, 32, 48]), "transformers"),
    # MobileOne S0: train-time over-parameterised branches (several convs + BN summed), not re-parameterised
    _row("timm_mobileone_s0", _timm("mobileone_s0"), "timm"),
    # LayoutLM: BERT with 2-D (bounding box) position embeddings; the boxes default to zeros
    _row("layoutlm", _hf("LayoutLMModel", "LayoutLMConfig", _masked(False), **_ENC), "transformers", "text"),
    # EfficientNetV2-S: fused MBConv stages, squeeze-excitation, stochastic depth (off in eval)
    _row("tv_efficientnet_v2_s", _tv("efficientnet_v2_s", num_classes=10), "torchvision"),
    # Cohere: parallel attention + MLP, bias-free LayerNorm, interleaved rotary, GQA, logit scale
    _row("cohere", _causal_lm("CohereForCausalLM", "CohereConfig", num_key_value_heads=2, **_ENC), "transformers",
         "llm"),
    # Hiera: hierarchical ViT, mask-unit attention with unroll / reroll of the token order, query pooling
    _row("hiera", _hf("HieraModel", "HieraConfig", lambda: image(64), image_size=[64, 64], embed_dim=16,
                      depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2]), "transformers"),
    # GhostNetV2: ghost modules with DFC attention (horizontal / vertical depthwise convs on a pooled map)
    _row("timm_ghostnetv2_100", _timm("ghostnetv2_100"), "timm"),
    # Longformer: sliding-window attention (window 8) with the sequence padded to the window
    _row("longformer", _hf("LongformerModel", "LongformerConfig", _masked(False), attention_window=8, pad_token_id=1,
                           **_ENC), "transformers", "text"),
    # Data2Vec audio: wav2vec2-style encoder with a stack of 5 grouped conv position layers
    _row("data2vec_audio", _hf("Data2VecAudioModel", "Data2VecAudioConfig", audio,
                               **{k: v for k, v in _SPEECH.items() if k != "num_conv_pos_embeddings"}),
         "transformers", "audio"),
    # Phi (1/2): parallel attention + MLP, partial rotary, biases everywhere, gelu_new
    _row("phi", _causal_lm("PhiForCausalLM", "PhiConfig", partial_rotary_factor=0.5, **_ENC), "transformers",
         "llm"),
    # DPN-68: dual-path blocks (residual and densely concatenated paths split and joined by channel slices)
    _row("timm_dpn68", _timm("dpn68"), "timm"),
    # GLPN: a SegFormer-style encoder and a depth decoder with selective feature fusion, bilinear upsampling
    _row("glpn", _hf("GLPNForDepthEstimation", "GLPNConfig", lambda: image(64), num_encoder_blocks=4,
                     depths=[1, 1, 1, 1], sr_ratios=[8, 4, 2, 1], hidden_sizes=[16, 32, 48, 64],
                     num_attention_heads=[1, 1, 2, 2], decoder_hidden_size=32, image_size=64), "transformers",
         "depth"),
    # XLM: post-LayerNorm encoder, learned positions, sequence lengths counted from the ids, its own padding mask
    _row("xlm", _hf("XLMModel", "XLMConfig", _masked(False), vocab_size=100, emb_dim=64, n_layers=2, n_heads=4,
                    max_position_embeddings=512), "transformers", "text"),
    # FCN-ResNet50: dilated ResNet-50 backbone (output stride 8), FCN head, bilinear upsampling to the input
    _row("tv_fcn_resnet50", _tv("segmentation.fcn_resnet50", num_classes=4, weights_backbone=None, aux_loss=False),
         "torchvision", "segmentation"),
)
HELD_OUT_41 = {m.name: m for m in ROWS}

# the export command's task per Hugging Face row (the model the row builds, saved with save_pretrained; the
# command's default shapes); the timm and torchvision rows have no export path
EXPORT: dict[str, str] = {
    "h41_deberta": "feature-extraction",
    "h41_gptj": "text-generation",
    "h41_data2vec_vision": "image-feature-extraction",
    "h41_sew": "automatic-speech-recognition",
    "h41_yoso": "feature-extraction",
    "h41_persimmon": "text-generation",
    "h41_swiftformer": "image-feature-extraction",
    "h41_layoutlm": "feature-extraction",
    "h41_cohere": "text-generation",
    "h41_hiera": "image-feature-extraction",
    "h41_longformer": "feature-extraction",
    "h41_data2vec_audio": "automatic-speech-recognition",
    "h41_phi": "text-generation",
    "h41_glpn": "depth-estimation",
    "h41_xlm": "feature-extraction",
}
assert set(EXPORT) <= set(HELD_OUT_41)
