"""Issue 41's fifth held-out set: named on 2026-12-07, before any row was converted.

The first four sets (`held_out_41.py` ... `held_out_41d.py`) were measured once each and then developed against.
This set asks the same question of the toolkit as it is now, on architectures nobody here has converted. Before
naming, every candidate was checked against the zoo's rows, `held_out.py`, the four earlier sets and the library-
init rows under every spelling they use (HF class names, `_tv` / `_tv_seg` / `_tv_video`, timm names, YOLO yaml
names, diffusers classes): none is there (CAFormer shares timm's MetaFormer code with the zoo's PoolFormerV2, with
separable-conv and attention token mixers where that one pools). Same protocol: each row named and committed before
its first conversion; `scripts/measure_held_out.py --set held_out_41e` runs each once through `convert_for_gpu` with
the defaults and, for Hugging Face rows with a task, through the `export` command; the results (`zoo/held_out_41e/`)
are first-run numbers and are never re-run after a change made for them.

Chosen to cover what people put on phones, leaning to the newest families: six causal LMs (one built for
devices with short convolutions beside attention, one from a phone-first family with per-layer embeddings and
AltUp, one mixture of experts), two text encoders, vision encoders (SAM's windowed ViT, AIMv2, a pose model, a
video ViT with tubelet patches), an audio transformer and a neural vocoder, timm CNNs, MLP and hybrid models, the
newest YOLO detectors, and two diffusion blocks (MMDiT and a deep-compression autoencoder). Models are built from
their config class at a small size with the library's own initialisation, then the zoo's weight rule; nothing is
downloaded, no remote code runs. Text encoders get `input_ids` and a padded `attention_mask` only
(`_masked(False)`), as users call them.

Considered and left out before naming, after one torch forward each (allowed before naming; nothing converted):
see `LEFT_OUT` below.
"""
from __future__ import annotations

from ..build import built, image, install_torchvision_placeholders
from ..weights import ZooModel
from ._hf import _causal_lm, _hf, _masked
from .diffusers_models import _diffusers, _rand     # the zoo's builders, unchanged
from .held_out_41c import _ENC, _LLM
from .timm_models import _timm
from .yolo import _yolo


def _row(name, build, library, domain="vision"):
    return ZooModel(f"h41e_{name}", domain, build, library=library)


def _tensors(**shapes):
    return lambda: {k: _rand(*v) for k, v in shapes.items()}


def _sd3_inputs():
    import torch

    return {"hidden_states": _rand(1, 4, 16, 16), "encoder_hidden_states": _rand(1, 8, 32, seed=2),
            "pooled_projections": _rand(1, 16, seed=3), "timestep": torch.tensor([10])}


def _vitpose():
    def build():
        install_torchvision_placeholders()
        import transformers

        backbone = transformers.VitPoseBackboneConfig(image_size=[64, 48], patch_size=[16, 16], hidden_size=64,
                                                      num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2,
                                                      out_indices=[2])
        model = transformers.VitPoseForPoseEstimation(transformers.VitPoseConfig(backbone_config=backbone,
                                                                                 num_labels=17))
        return built(model, {"pixel_values": _rand(1, 3, 64, 48)})
    return build


# In run order: libraries and domains interleave, so that a run cut short still covers each of them.
ROWS: tuple[ZooModel, ...] = (
    # LFM2: a hybrid for devices -- gated short 1-D convolutions in most layers, GQA attention in a few
    _row("lfm2", _causal_lm("Lfm2ForCausalLM", "Lfm2Config", layer_types=["conv", "full_attention"], **_LLM),
         "transformers", "llm"),
    # CAFormer: MetaFormer with separable-conv token mixers, then attention stages (timm)
    _row("timm_caformer_s18", _timm("caformer_s18", 64), "timm"),
    # XMOD: an XLM-R encoder with per-language adapter modules
    _row("xmod", _hf("XmodModel", "XmodConfig", _masked(False), pad_token_id=1, languages=["en_XX"],
                     default_language="en_XX", **_ENC), "transformers", "text"),
    # SAM's image encoder: windowed attention with decomposed relative positions, global blocks, a conv neck
    _row("sam_vision", _hf("SamVisionModel", "SamVisionConfig", lambda: image(64), image_size=64, patch_size=16,
                           hidden_size=64, num_hidden_layers=2, num_attention_heads=4, mlp_dim=128,
                           output_channels=32, window_size=2, global_attn_indexes=[1]), "transformers"),
    # YOLO26: the newest ultralytics detector (NMS-free head)
    _row("yolo26n", _yolo("yolo26n.yaml"), "ultralytics", "detection"),
    # Apertus: xIELU activation, QK-norm, no gated MLP
    _row("apertus", _causal_lm("ApertusForCausalLM", "ApertusConfig", **_LLM), "transformers", "llm"),
    # MLP-Mixer: token mixing by MLPs over the patch axis (timm)
    _row("timm_mixer_s16_224", _timm("mixer_s16_224", 64, img_size=64), "timm"),
    # SD3's MMDiT: joint attention over image and text tokens, AdaLN-zero modulation (diffusers)
    _row("sd3_transformer", _diffusers("SD3Transformer2DModel", _sd3_inputs, sample_size=16, patch_size=2,
                                       in_channels=4, num_layers=2, attention_head_dim=16, num_attention_heads=2,
                                       joint_attention_dim=32, caption_projection_dim=32, pooled_projection_dim=16,
                                       out_channels=4, pos_embed_max_size=16), "diffusers", "generative"),
    # Cohere 2: interleaved sliding-window and global attention, parallel attention + MLP block, no-bias LayerNorm
    _row("cohere2", _causal_lm("Cohere2ForCausalLM", "Cohere2Config", sliding_window=4, **_LLM), "transformers",
         "llm"),
    # AIMv2 vision encoder: RMSNorm and SwiGLU ViT trained autoregressively
    _row("aimv2_vision", _hf("Aimv2VisionModel", "Aimv2VisionConfig", lambda: image(64), image_size=64,
                             patch_size=16, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=128), "transformers"),
    # TResNet-M: space-to-depth stem, anti-aliased downsampling, in-place activated BN (timm)
    _row("timm_tresnet_m", _timm("tresnet_m", 64), "timm"),
    # Qwen3-MoE: a sparse mixture of experts with QK-norm attention
    _row("qwen3_moe", _causal_lm("Qwen3MoeForCausalLM", "Qwen3MoeConfig", num_experts=4, num_experts_per_tok=2,
                                 moe_intermediate_size=64, **_LLM), "transformers", "llm"),
    # VideoMAE: a ViT on video with 3-D tubelet patches
    _row("videomae", _hf("VideoMAEModel", "VideoMAEConfig", _tensors(pixel_values=(1, 4, 3, 64, 64)),
                         image_size=64, patch_size=16, num_frames=4, tubelet_size=2, hidden_size=64,
                         num_hidden_layers=2, num_attention_heads=4, intermediate_size=128), "transformers", "video"),
    # YOLO12: area attention blocks in the neck (ultralytics)
    _row("yolo12n", _yolo("yolo12n.yaml"), "ultralytics", "detection"),
    # Inception-v4: the classic multi-branch CNN (timm)
    _row("timm_inception_v4", _timm("inception_v4", 96), "timm"),
    # Gemma 3n (text): per-layer embeddings, AltUp, LAuReL, KV sharing -- Google's phone-first family
    _row("gemma3n", _causal_lm("Gemma3nForCausalLM", "Gemma3nTextConfig", vocab_size_per_layer_input=100,
                               hidden_size_per_layer_input=16, num_kv_shared_layers=0, laurel_rank=8,
                               layer_types=["sliding_attention", "full_attention"], sliding_window=4,
                               activation_sparsity_pattern=[0.0, 0.0], **_LLM), "transformers", "llm"),
    # CLAP's audio encoder: a Swin transformer on a mel spectrogram with feature fusion off
    _row("clap_audio", _hf("ClapAudioModel", "ClapAudioConfig", _tensors(input_features=(1, 1, 64, 64)),
                           spec_size=64, num_mel_bins=64, patch_size=4, patch_embeds_hidden_size=32, depths=[1, 1],
                           num_attention_heads=[2, 4], window_size=4, hidden_size=64), "transformers", "audio"),
    # ConvMixer: a patch-embedding conv, then depthwise and pointwise convs at one resolution (timm)
    _row("timm_convmixer_768_32", _timm("convmixer_768_32", 64), "timm"),
    # LUKE: entity-aware self-attention, called with words only
    _row("luke", _hf("LukeModel", "LukeConfig", _masked(False), entity_vocab_size=10, entity_emb_size=32, **_ENC),
         "transformers", "text"),
    # AutoencoderDC: a deep-compression autoencoder with linear-attention blocks (diffusers)
    _row("autoencoder_dc", _diffusers("AutoencoderDC", _tensors(sample=(1, 3, 64, 64)), in_channels=3,
                                      latent_channels=8, attention_head_dim=8,
                                      encoder_block_types=("ResBlock", "EfficientViTBlock"),
                                      decoder_block_types=("ResBlock", "EfficientViTBlock"),
                                      encoder_block_out_channels=(16, 32), decoder_block_out_channels=(16, 32),
                                      encoder_layers_per_block=(1, 1), decoder_layers_per_block=(1, 1),
                                      encoder_qkv_multiscales=((), (5,)), decoder_qkv_multiscales=((), (5,)),
                                      upsample_block_type="interpolate", downsample_block_type="Conv",
                                      decoder_norm_types="rms_norm", decoder_act_fns="silu"),
         "diffusers", "generative"),
    # Seed-OSS: a dense decoder with attention biases on Q / K / V and none on the output
    _row("seed_oss", _causal_lm("SeedOssForCausalLM", "SeedOssConfig", **_LLM), "transformers", "llm"),
    # ViTPose: a plain ViT backbone with a deconvolution heatmap head, 17 keypoints
    _row("vitpose", _vitpose(), "transformers"),
    # UnivNet: a GAN vocoder with location-variable convolutions (mel -> waveform)
    # (called with its noise, as its feature extractor hands it over: without, the model draws it itself)
    _row("univnet", _hf("UnivNetModel", "UnivNetConfig", _tensors(input_features=(1, 16, 100),
                                                                  noise_sequence=(1, 16, 16)),
                        model_in_channels=16, model_hidden_channels=16, num_mel_bins=100, resblock_kernel_sizes=[3],
                        resblock_stride_sizes=[8], resblock_dilation_sizes=[[1, 3]], kernel_predictor_num_blocks=1,
                        kernel_predictor_hidden_channels=16), "transformers", "audio"),
    # YOLOv9-T: GELAN with programmable-gradient-information blocks (ultralytics)
    _row("yolov9t", _yolo("yolov9t.yaml"), "ultralytics", "detection"),
    # ViTamin: MBConv stages then ViT stages, a vision-language backbone (timm)
    _row("timm_vitamin_small", _timm("vitamin_small_224", 64, img_size=64), "timm"),
)
HELD_OUT_41E = {m.name: m for m in ROWS}

# the export command's task per Hugging Face row (its model saved with save_pretrained; the command's defaults)
EXPORT: dict[str, str] = {
    "h41e_lfm2": "text-generation",
    "h41e_xmod": "feature-extraction",
    "h41e_sam_vision": "image-feature-extraction",
    "h41e_apertus": "text-generation",
    "h41e_cohere2": "text-generation",
    "h41e_aimv2_vision": "image-feature-extraction",
    "h41e_qwen3_moe": "text-generation",
    "h41e_gemma3n": "text-generation",
    "h41e_luke": "feature-extraction",
    "h41e_seed_oss": "text-generation",
}
assert set(EXPORT) <= set(HELD_OUT_41E)

LEFT_OUT: dict[str, str] = {
    "timm cspdarknet53": "the CSPDarkNet family is in the third set (cs3darknet_focus_s)",
    "timm fastvit_mci0": "MobileCLIP's encoder is timm's FastViT, which the zoo has (fastvit_t8)",
}
