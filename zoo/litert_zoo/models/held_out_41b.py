"""Issue 41's second held-out set: named after the graph pass's rules landed, before any row was converted.

The first set (`held_out_41.py`) was measured once at a2d5c8f and then developed against (its README says which
rows changed after). This set asks the same question of the toolkit as it is now, on architectures nobody here has
converted: none is in the zoo, `held_out.py` or `held_out_41.py`. Same protocol: each row named and committed
before the first conversion; `scripts/measure_held_out.py --set held_out_41b` runs each once through
`convert_for_gpu` with the defaults and, for Hugging Face rows with a task, through the `export` command; the
results (`zoo/held_out_41b/`) are first-run numbers and are never re-run after a change made for them.

Models are built from their config class at a small size with the library's own initialisation, then the zoo's
weight rule; nothing is downloaded, no remote code runs. Text encoders get `input_ids` and a padded
`attention_mask` only (`_masked(False)`), as users call them.

Considered and left out before naming, after one torch forward each (allowed before naming; nothing converted):
see `LEFT_OUT` below.
"""
from __future__ import annotations

from ..build import audio, image
from ..weights import ZooModel
from ._hf import _SPEECH, _causal_lm, _hf, _masked
from .timm_models import _timm
from .torchvision_models import _custom, _video

_ENC = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=512)
_VIT32 = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
              patch_size=8)
_LLM = dict(_ENC, num_key_value_heads=2)


def _row(name, build, library, domain="vision"):
    return ZooModel(f"h41b_{name}", domain, build, library=library)


def _tv_video(fn: str, **kw):
    return _custom(lambda: getattr(__import__("torchvision").models.video, fn)(weights=None, num_classes=10, **kw),
                   inputs=_video)


# In run order: libraries and domains interleave, so that a run cut short still covers each of them.
ROWS: tuple[ZooModel, ...] = (
    # MegatronBERT: pre-LayerNorm BERT (LayerNorm before attention and MLP, one after the last layer)
    _row("megatron_bert", _hf("MegatronBertModel", "MegatronBertConfig", _masked(False), **_ENC), "transformers",
         "text"),
    # HaloNet: blocked local self-attention over halo-padded windows (unfold into blocks, relative logits)
    _row("timm_halonet26t", _timm("halonet26t", 256, img_size=256), "timm"),
    # OLMo (v1): non-parametric LayerNorm, SwiGLU, rotary, optional q/k clipping
    _row("olmo", _causal_lm("OlmoForCausalLM", "OlmoConfig", **_LLM), "transformers", "llm"),
    # DINOv2 with registers: extra learned register tokens beside the class token, layer scale
    _row("dinov2_registers", _hf("Dinov2WithRegistersModel", "Dinov2WithRegistersConfig", lambda: image(32),
                                 num_register_tokens=4, **_VIT32), "transformers"),
    # Swin3D-T: 3-D shifted-window attention on a video clip (rank-5 activations, 3-D relative position bias)
    _row("tv_swin3d_t", _tv_video("swin3d_t"), "torchvision", "video"),
    # UniSpeech-SAT: wav2vec2-style encoder with speaker-aware pre-training heads off at inference
    _row("unispeech_sat", _hf("UniSpeechSatModel", "UniSpeechSatConfig", audio, **_SPEECH), "transformers",
         "audio"),
    # BoTNet: ResNet with the last stages' 3x3 convs replaced by multi-head self-attention with 2-D relative logits
    _row("timm_botnet26t", _timm("botnet26t_256", 64, img_size=64), "timm"),
    # RemBERT: decoupled input / output embeddings (small input embedding projected up)
    _row("rembert", _hf("RemBertModel", "RemBertConfig", _masked(False), input_embedding_size=32,
                        output_embedding_size=64, **_ENC), "transformers", "text"),
    # MobileViTV2: separable linear self-attention (context scores by softmax over patches), unfold / fold of patches
    _row("mobilevitv2", _hf("MobileViTV2Model", "MobileViTV2Config", lambda: image(64), image_size=64,
                            width_multiplier=0.5), "transformers"),
    # XGLM: sinusoidal positions offset by the padding index, scaled embeddings, pre-LN decoder
    _row("xglm", _causal_lm("XGLMForCausalLM", "XGLMConfig", vocab_size=100, d_model=64, num_layers=2,
                            attention_heads=4, ffn_dim=128, max_position_embeddings=512), "transformers", "llm"),
    # LambdaNet: lambda layers (content and positional lambdas from a 3-D relative position conv)
    _row("timm_lambda_resnet26t", _timm("lambda_resnet26t", 64, img_size=64), "timm"),
    # Wav2Vec2-Conformer: conformer blocks (depthwise conv module, macaron FFN) with rotary position embeddings
    _row("wav2vec2_conformer", _hf("Wav2Vec2ConformerModel", "Wav2Vec2ConformerConfig", audio,
                                   position_embeddings_type="rotary", **_SPEECH), "transformers", "audio"),
    # BigBird: block-sparse attention config (falls back to full attention at this length), learned positions
    _row("big_bird", _hf("BigBirdModel", "BigBirdConfig", _masked(False), attention_type="original_full", **_ENC),
         "transformers", "text"),
    # DaViT: alternating spatial-window attention and channel-group attention, conv position encodings
    _row("timm_davit_tiny", _timm("davit_tiny", 64, depths=(1, 1, 1, 1)), "timm"),
    # GLM: partial interleaved rotary, fused gate-up MLP, GQA
    _row("glm", _causal_lm("GlmForCausalLM", "GlmConfig", partial_rotary_factor=0.5, head_dim=16, pad_token_id=0,
                           **_LLM),
         "transformers", "llm"),
    # I-JEPA: a ViT encoder without class token, mean-free patch outputs
    _row("ijepa", _hf("IJepaModel", "IJepaConfig", lambda: image(32), **_VIT32), "transformers"),
    # BioGPT: scaled embeddings, learned positions with an offset, pre-LN decoder
    _row("biogpt", _causal_lm("BioGptForCausalLM", "BioGptConfig", **_ENC), "transformers", "llm"),
    # GENet (GPU-efficient net): plain / bottleneck / depthwise stages chosen for GPU throughput
    _row("timm_gernet_s", _timm("gernet_s", 64), "timm"),
    # I-BERT (float mode): RoBERTa with its integer-only kernels switched off
    _row("ibert", _hf("IBertModel", "IBertConfig", _masked(False), quant_mode=False, pad_token_id=1, **_ENC),
         "transformers", "text"),
    # EfficientViT-M0 (Microsoft): cascaded group attention, each head on a channel split, token interaction convs
    _row("timm_efficientvit_m0", _timm("efficientvit_m0", 64, img_size=64), "timm"),
    # Helium: RMSNorm, GQA, rotary, SwiGLU, attention bias-free
    _row("helium", _causal_lm("HeliumForCausalLM", "HeliumConfig", head_dim=16, **_LLM), "transformers", "llm"),
    # SelecSLS-42b: select-and-skip concatenations of earlier features
    _row("timm_selecsls42b", _timm("selecsls42b", 64), "timm"),
    # ViT-MSN: a ViT (class token, learned positions) from masked siamese pre-training
    _row("vit_msn", _hf("ViTMSNModel", "ViTMSNConfig", lambda: image(32), **_VIT32), "transformers"),
    # RepGhostNet: re-parameterisable ghost modules (identity BN branch added in training form)
    _row("timm_repghostnet_050", _timm("repghostnet_050", 64), "timm"),
)
HELD_OUT_41B = {m.name: m for m in ROWS}

# the export command's task per Hugging Face row (its model saved with save_pretrained; the command's defaults)
EXPORT: dict[str, str] = {
    "h41b_megatron_bert": "feature-extraction",
    "h41b_olmo": "text-generation",
    "h41b_dinov2_registers": "image-feature-extraction",
    "h41b_unispeech_sat": "automatic-speech-recognition",
    "h41b_rembert": "feature-extraction",
    "h41b_mobilevitv2": "image-feature-extraction",
    "h41b_xglm": "text-generation",
    "h41b_wav2vec2_conformer": "automatic-speech-recognition",
    "h41b_big_bird": "feature-extraction",
    "h41b_glm": "text-generation",
    "h41b_ijepa": "image-feature-extraction",
    "h41b_biogpt": "text-generation",
    "h41b_ibert": "feature-extraction",
    "h41b_helium": "text-generation",
    "h41b_vit_msn": "image-feature-extraction",
}
assert set(EXPORT) <= set(HELD_OUT_41B)

LEFT_OUT: dict[str, str] = {
    "tv_mvit_v2_s": "its relative-position tables fix the clip at 16 x 224 x 224 (a shape error at 4 x 32 x 32 in "
                    "torch); 34 M parameters on that clip is beyond this run's time",
}
