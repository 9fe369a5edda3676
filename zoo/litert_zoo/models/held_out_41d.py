"""Issue 41's fourth held-out set: named on 2026-12-07, before any row was converted.

The first three sets (`held_out_41.py`, `held_out_41b.py`, `held_out_41c.py`) were measured once each and then
developed against. This set asks the same question of the toolkit as it is now, on architectures nobody here has
converted: none is in the zoo, `held_out.py`, the earlier held-out sets or the library-init rows (found after the
run: two are -- FCN-ResNet50 is in `held_out_41.py` and Swin3D-T in `held_out_41b.py`, spelt `_tv_seg` / `_tv_video`
there, which the name check missed; results.json's after-run notes count the set without them), and none of the
mixture-of-experts families the `expert_dispatch` tests build (OLMoE, Mixtral, Qwen2-MoE, GPT-OSS) is here. Same
protocol: each row named and committed before its first conversion; `scripts/measure_held_out.py --set
held_out_41d` runs each once through `convert_for_gpu` with the defaults and, for Hugging Face rows with a task,
through the `export` command; the results (`zoo/held_out_41d/`) are first-run numbers and are never re-run after a
change made for them.

Chosen to cover what people put on phones: seven causal LMs of recent families (one a mixture of experts in a form
not seen here), text encoders (one mixing tokens with a Fourier transform), vision
backbones (DINOv3, windowed ViT with relative positions, a text detector's backbone), a conformer speech encoder,
and timm and torchvision CNNs and vision transformers (one video transformer). Models are built from their config
class at a small size with the library's own initialisation, then the zoo's weight rule; nothing is downloaded, no
remote code runs. Text encoders get `input_ids` and a padded `attention_mask` only (`_masked(False)`), as users
call them.

Considered and left out before naming, after one torch forward each (allowed before naming; nothing converted):
see `LEFT_OUT` below.
"""
from __future__ import annotations

from ..build import image
from ..weights import ZooModel
from ._hf import _causal_lm, _hf, _masked
from .held_out_41c import _ENC, _LLM, _tv, _tv_seg      # the third set's size and builders, unchanged
from .timm_models import _timm
from .torchvision_models import _custom


def _row(name, build, library, domain="vision"):
    return ZooModel(f"h41d_{name}", domain, build, library=library)


def _video(fn: str, frames: int = 8, size: int = 64):
    def inputs():
        import torch

        return (torch.randn(1, 3, frames, size, size, generator=torch.Generator().manual_seed(1)),)
    return _custom(lambda: getattr(__import__("torchvision").models.video, fn)(weights=None, num_classes=10),
                   size, inputs=inputs)


def _features(frames: int = 64, bins: int = 80):
    def make():
        import torch

        return {"input_features": torch.randn(1, frames, bins, generator=torch.Generator().manual_seed(1))}
    return make


# In run order: libraries and domains interleave, so that a run cut short still covers each of them.
ROWS: tuple[ZooModel, ...] = (
    # GLM-4: partial rotary, post-attention and post-MLP norms (sandwich), fused gate-up MLP
    _row("glm4", _causal_lm("Glm4ForCausalLM", "Glm4Config", head_dim=16, pad_token_id=0, **_LLM), "transformers",
         "llm"),
    # RegNetZ: SE blocks, group convs with a bottleneck expansion (timm)
    _row("timm_regnetz_b16", _timm("regnetz_b16", 64), "timm"),
    # EuroBERT: a Llama-style bidirectional encoder (RMSNorm, rotary, GQA) for many languages
    _row("eurobert", _hf("EuroBertModel", "EuroBertConfig", _masked(False), head_dim=16, pad_token_id=0, **_LLM),
         "transformers", "text"),
    # DINOv3 ViT: rotary 2-D positions, register tokens, layer scale
    _row("dinov3_vit", _hf("DINOv3ViTModel", "DINOv3ViTConfig", lambda: image(64), image_size=64, patch_size=16,
                           hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                           num_register_tokens=2), "transformers"),
    # EXAONE 4: hybrid local / global attention with QK-norm, no rotary on global layers
    _row("exaone4", _causal_lm("Exaone4ForCausalLM", "Exaone4Config", head_dim=16, sliding_window=4,
                               sliding_window_pattern=2, **_LLM), "transformers", "llm"),
    # Xception-41: depthwise-separable convs everywhere, entry / middle / exit flows (timm)
    _row("timm_xception41", _timm("xception41", 64), "timm"),
    # FNet: token mixing with a 2-D Fourier transform instead of attention
    _row("fnet", _hf("FNetModel", "FNetConfig", _masked(False), vocab_size=100, hidden_size=64, num_hidden_layers=2,
                     intermediate_size=128, max_position_embeddings=512), "transformers", "text"),
    # torchvision ConvNeXt-T: channels-last LayerNorm via permutes, layer scale, stochastic depth
    _row("tv_convnext_tiny", _tv("convnext_tiny"), "torchvision"),
    # OLMo 3: sliding-window and full attention layers, QK-norm, post-norm blocks
    _row("olmo3", _causal_lm("Olmo3ForCausalLM", "Olmo3Config", sliding_window=4, **_LLM), "transformers", "llm"),
    # ViTDet backbone: windowed attention with decomposed relative positions and a few global blocks
    _row("vitdet", _hf("VitDetModel", "VitDetConfig", lambda: image(64), image_size=64, patch_size=16,
                       pretrain_image_size=64, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       mlp_ratio=2, window_size=2, window_block_indices=[0], use_relative_position_embeddings=True),
         "transformers"),
    # Parakeet: a FastConformer CTC encoder (8x subsampling convs, relative-position attention, conv modules)
    _row("parakeet", _hf("ParakeetForCTC", "ParakeetCTCConfig", _features(), vocab_size=32,
                         encoder_config=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                             intermediate_size=128, num_mel_bins=80, subsampling_conv_channels=32)),
         "transformers", "audio"),
    # RDNet: densely connected ConvNeXt-style blocks (timm)
    _row("timm_rdnet_tiny", _timm("rdnet_tiny", 64), "timm"),
    # Nemotron: squared-ReLU MLP, LayerNorm1p, partial rotary
    _row("nemotron", _causal_lm("NemotronForCausalLM", "NemotronConfig", head_dim=16, **_LLM), "transformers",
         "llm"),
    # RoBERTa-PreLayerNorm: RoBERTa with the norms before each sublayer
    _row("roberta_prelayernorm", _hf("RobertaPreLayerNormModel", "RobertaPreLayerNormConfig", _masked(False),
                                     pad_token_id=1, **_ENC), "transformers", "text"),
    # torchvision FCN (ResNet-50): a fully convolutional segmentation head, bilinear upsampling to the input
    _row("tv_fcn_resnet50", _tv_seg("fcn_resnet50"), "torchvision"),
    # Granite-MoE: a mixture of experts with its own parallel-experts layer (not transformers' experts decorator)
    _row("granitemoe", _causal_lm("GraniteMoeForCausalLM", "GraniteMoeConfig", num_local_experts=4,
                                  num_experts_per_tok=2, **_LLM), "transformers", "llm"),
    # TextNet: the FAST text detector's backbone (asymmetric 1x3 / 3x1 convs, re-parameterisable)
    _row("textnet", _hf("TextNetModel", "TextNetConfig", lambda: image(64)), "transformers"),
    # TNT: transformer in transformer (pixel-level attention inside each patch)
    _row("timm_tnt_s", _timm("tnt_s_patch16_224", 64, img_size=64), "timm"),
    # ERNIE 4.5 (dense): a Llama-style decoder with interleaved rotary
    _row("ernie4_5", _causal_lm("Ernie4_5ForCausalLM", "Ernie4_5Config", head_dim=16, **_LLM), "transformers",
         "llm"),
    # torchvision Swin3D-T: a video transformer on [B, 3, T, H, W] (3-D shifted windows)
    _row("tv_swin3d_t", _video("swin3d_t"), "torchvision", "video"),
    # NextViT: convolution and transformer blocks mixed per stage, for deployment (timm)
    _row("timm_nextvit_small", _timm("nextvit_small", 64), "timm"),
    # VaultGemma: Gemma with differentially-private training's architecture (no sliding window, tied heads)
    _row("vaultgemma", _causal_lm("VaultGemmaForCausalLM", "VaultGemmaConfig", head_dim=16, **_LLM),
         "transformers", "llm"),
    # FBNetV3: NAS-found inverted residuals with hard-swish and SE (timm)
    _row("timm_fbnetv3_b", _timm("fbnetv3_b", 64), "timm"),
)
HELD_OUT_41D = {m.name: m for m in ROWS}

# the export command's task per Hugging Face row (its model saved with save_pretrained; the command's defaults)
EXPORT: dict[str, str] = {
    "h41d_glm4": "text-generation",
    "h41d_eurobert": "feature-extraction",
    "h41d_dinov3_vit": "image-feature-extraction",
    "h41d_exaone4": "text-generation",
    "h41d_fnet": "feature-extraction",
    "h41d_olmo3": "text-generation",
    "h41d_vitdet": "image-feature-extraction",
    "h41d_parakeet": "automatic-speech-recognition",
    "h41d_nemotron": "text-generation",
    "h41d_roberta_prelayernorm": "feature-extraction",
    "h41d_granitemoe": "text-generation",
    "h41d_textnet": "image-feature-extraction",
    "h41d_ernie4_5": "text-generation",
    "h41d_vaultgemma": "text-generation",
}
assert set(EXPORT) <= set(HELD_OUT_41D)

LEFT_OUT: dict[str, str] = {
    "nystromformer": "NystromformerModel with a padded attention_mask fails in torch (transformers 5.24: the "
                     "[B, 1, 1, S] mask is added to the [B, H, S, landmarks] landmark scores); with no padding it "
                     "runs, but users pad, and this set calls text encoders with a padded mask",
}
