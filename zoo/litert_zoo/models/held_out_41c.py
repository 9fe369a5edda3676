"""Issue 41's third held-out set: named on 2026-12-07, before any row was converted.

The first two sets (`held_out_41.py`, `held_out_41b.py`) were measured once each and then developed against. This
set asks the same question of the toolkit as it is now, on architectures nobody here has converted: none is in the
zoo, `held_out.py`, `held_out_41.py`, `held_out_41b.py` or the library-init rows. Same protocol: each row named and
committed before the first conversion; `scripts/measure_held_out.py --set held_out_41c` runs each once through
`convert_for_gpu` with the defaults and, for Hugging Face rows with a task, through the `export` command; the results
(`zoo/held_out_41c/`) are first-run numbers and are never re-run after a change made for them.

Chosen to cover what people put on phones, not what is easy: text encoders (a protein LM among them), five causal
LMs (multi-query, local attention, ALiBi, NoPE layers, a mixture of experts), vision backbones, an image
super-resolution network, three speech encoders (one reading log-mel features), timm and torchvision CNNs and
vision transformers. Models are built from their config class at a small size with the library's own
initialisation, then the zoo's weight rule; nothing is downloaded, no remote code runs. Text encoders get
`input_ids` and a padded `attention_mask` only (`_masked(False)`), as users call them. CTC-capable speech configs
set `vocab_size`, as every CTC checkpoint does. Config values were fixed where the small size broke the model in
torch before any conversion (EfficientNet's `hidden_dim`, SmolLM3's `pad_token_id`, LiLT's width, a multiple of 6).

Considered and left out before naming, after one torch forward each (allowed before naming; nothing converted):
see `LEFT_OUT` below.
"""
from __future__ import annotations

from ..build import audio, image
from ..weights import ZooModel
from ._hf import _SPEECH, _causal_lm, _hf, _masked
from .timm_models import _timm
from .torchvision_models import _custom

_ENC = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=512)
_LLM = dict(_ENC, num_key_value_heads=2)


def _row(name, build, library, domain="vision"):
    return ZooModel(f"h41c_{name}", domain, build, library=library)


def _tv(fn: str, size: int = 64, **kw):
    return _custom(lambda: getattr(__import__("torchvision").models, fn)(weights=None, num_classes=10, **kw), size)


def _tv_seg(fn: str, size: int = 64):
    def make():
        from torchvision.models import segmentation

        return getattr(segmentation, fn)(weights=None, weights_backbone=None, num_classes=10, aux_loss=False)
    return _custom(make, size)


def _features(frames: int = 50, bins: int = 160):
    def make():
        import torch

        return {"input_features": torch.randn(1, frames, bins, generator=torch.Generator().manual_seed(1))}
    return make


# In run order: libraries and domains interleave, so that a run cut short still covers each of them.
ROWS: tuple[ZooModel, ...] = (
    # ESM-2: protein masked LM encoder, rotary positions, token-dropout rescaling of the embeddings
    _row("esm", _hf("EsmModel", "EsmConfig", _masked(False, vocab=33), vocab_size=33, hidden_size=64,
                    num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, max_position_embeddings=512,
                    position_embedding_type="rotary", pad_token_id=1, mask_token_id=32, token_dropout=True),
         "transformers", "text"),
    # SK-ResNet: selective kernels (two dilated branches mixed by a softmax over branch attention)
    _row("timm_skresnet18", _timm("skresnet18", 64), "timm"),
    # GPTBigCode (StarCoder v1): multi-query attention, learned positions
    _row("gpt_bigcode", _causal_lm("GPTBigCodeForCausalLM", "GPTBigCodeConfig", vocab_size=100, n_embd=64,
                                   n_layer=2, n_head=4, n_positions=512, multi_query=True), "transformers", "llm"),
    # PVT (v1): spatial-reduction attention (keys / values from a strided conv of the tokens)
    _row("pvt", _hf("PvtModel", "PvtConfig", lambda: image(64), image_size=64, depths=[1, 1, 1, 1],
                    hidden_sizes=[16, 32, 40, 64], num_attention_heads=[1, 2, 5, 8]), "transformers"),
    # Wide ResNet-50-2: bottlenecks twice as wide
    _row("tv_wide_resnet50_2", _tv("wide_resnet50_2"), "torchvision"),
    # SEW-D: squeezed wav2vec2-style encoder with DeBERTa's disentangled attention
    _row("sew_d", _hf("SEWDModel", "SEWDConfig", audio, vocab_size=32, **_SPEECH), "transformers", "audio"),
    # Res2Net: hierarchical residual-like connections inside each bottleneck (scale-wise splits)
    _row("timm_res2net50_14w_8s", _timm("res2net50_14w_8s", 64), "timm"),
    # GPT-Neo: alternating global and local (windowed) causal attention
    _row("gpt_neo", _causal_lm("GPTNeoForCausalLM", "GPTNeoConfig", vocab_size=100, hidden_size=64, num_layers=2,
                               num_heads=4, attention_types=[[["global", "local"], 1]], window_size=4,
                               max_position_embeddings=512), "transformers", "llm"),
    # EfficientNet (Hugging Face's): MBConv blocks with squeeze-excitation, compound scaling
    _row("efficientnet", _hf("EfficientNetModel", "EfficientNetConfig", lambda: image(64), image_size=64,
                             width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320), "transformers"),
    # XLM-RoBERTa-XL: pre-LayerNorm RoBERTa
    _row("xlm_roberta_xl", _hf("XLMRobertaXLModel", "XLMRobertaXLConfig", _masked(False), pad_token_id=1, **_ENC),
         "transformers", "text"),
    # NFNet (ECA): normaliser-free, scaled weight standardisation, efficient channel attention
    _row("timm_eca_nfnet_l0", _timm("eca_nfnet_l0", 64), "timm"),
    # VGG-11 with batch norm
    _row("tv_vgg11_bn", _tv("vgg11_bn"), "torchvision"),
    # MPT: ALiBi attention biases, no positional embeddings, LayerNorm without bias
    _row("mpt", _causal_lm("MptForCausalLM", "MptConfig", vocab_size=100, d_model=64, n_heads=4, n_layers=2,
                           max_seq_len=512), "transformers", "llm"),
    # UniSpeech: wav2vec2-style encoder trained with phonetic CTC
    _row("unispeech", _hf("UniSpeechModel", "UniSpeechConfig", audio, vocab_size=32, **_SPEECH), "transformers",
         "audio"),
    # CSPDarkNet (focus stem): cross-stage partial blocks, the YOLO backbone family
    _row("timm_cs3darknet_focus_s", _timm("cs3darknet_focus_s", 64), "timm"),
    # MobileNetV1 (Hugging Face's): depthwise-separable convs, TF "same" padding
    _row("mobilenet_v1", _hf("MobileNetV1Model", "MobileNetV1Config", lambda: image(64), image_size=64,
                             depth_multiplier=0.25), "transformers"),
    # SmolLM3: GQA with rotary on most layers and none (NoPE) on every fourth
    _row("smollm3", _causal_lm("SmolLM3ForCausalLM", "SmolLM3Config", head_dim=16, no_rope_layer_interval=2,
                               pad_token_id=0, **_LLM), "transformers", "llm"),
    # MViTv2: multiscale attention with pooled queries / keys / values and decomposed relative positions
    _row("timm_mvitv2_tiny", _timm("mvitv2_tiny", 64, img_size=64), "timm"),
    # DeepLabV3 (ResNet-50): dilated convs and atrous spatial pyramid pooling with an image-level pool
    _row("tv_deeplabv3_resnet50", _tv_seg("deeplabv3_resnet50"), "torchvision"),
    # LiLT: a text stream and a layout (bounding box) stream with bi-directional attention complementation
    _row("lilt", _hf("LiltModel", "LiltConfig", _masked(False), **dict(_ENC, hidden_size=96, intermediate_size=192)),
         "transformers", "text"),
    # EfficientFormer-L1: MetaBlocks (pooling mixers) then a last-stage attention with a learned bias table
    _row("timm_efficientformer_l1", _timm("efficientformer_l1", 224), "timm"),
    # Swin2SR: image super-resolution (Swin V2 blocks, pixel-shuffle upsampler)
    _row("swin2sr", _hf("Swin2SRModel", "Swin2SRConfig", lambda: image(32), image_size=32, embed_dim=24,
                        depths=[1, 1], num_heads=[2, 2], window_size=4, upscale=2), "transformers"),
    # Wav2Vec2-BERT: a conformer encoder reading 160-wide log-mel feature stacks (input_features), not waveforms
    _row("wav2vec2_bert", _hf("Wav2Vec2BertModel", "Wav2Vec2BertConfig", _features(), vocab_size=32, hidden_size=64,
                              num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                              output_hidden_size=64), "transformers", "audio"),
    # ViT with relative position bias (timm's relpos MLP), no class-token position embedding
    _row("timm_vit_relpos_small", _timm("vit_relpos_small_patch16_224", 64, img_size=64), "timm"),
    # AlexNet: large strided kernels, adaptive average pool to 6 x 6
    _row("tv_alexnet", _tv("alexnet"), "torchvision"),
    # OLMoE: a mixture-of-experts decoder (top-k routing over 4 experts), QK-norm
    _row("olmoe", _causal_lm("OlmoeForCausalLM", "OlmoeConfig", num_experts=4, num_experts_per_tok=2, **_LLM),
         "transformers", "llm"),
)
HELD_OUT_41C = {m.name: m for m in ROWS}

# the export command's task per Hugging Face row (its model saved with save_pretrained; the command's defaults)
EXPORT: dict[str, str] = {
    "h41c_esm": "feature-extraction",
    "h41c_gpt_bigcode": "text-generation",
    "h41c_pvt": "image-feature-extraction",
    "h41c_sew_d": "automatic-speech-recognition",
    "h41c_gpt_neo": "text-generation",
    "h41c_efficientnet": "image-feature-extraction",
    "h41c_xlm_roberta_xl": "feature-extraction",
    "h41c_mpt": "text-generation",
    "h41c_unispeech": "automatic-speech-recognition",
    "h41c_mobilenet_v1": "image-feature-extraction",
    "h41c_smollm3": "text-generation",
    "h41c_lilt": "feature-extraction",
    "h41c_wav2vec2_bert": "automatic-speech-recognition",
    "h41c_olmoe": "text-generation",
}
assert set(EXPORT) <= set(HELD_OUT_41C)

LEFT_OUT: dict[str, str] = {}
