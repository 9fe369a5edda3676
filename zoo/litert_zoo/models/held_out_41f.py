"""Issue 41's sixth held-out set: named on 2026-12-08, before any row was converted.

The first five sets (`held_out_41.py` ... `held_out_41e.py`) were measured once each and then developed against.
This set asks the same question of the toolkit as it is now (the graph pass with the rules added up to this
commit), on architectures nobody here has converted. Before naming, every candidate was checked against the zoo's
rows, `held_out.py`, the five earlier sets and the library-init rows under every spelling they use (HF class names,
`_tv` / `_tv_seg` / `_tv_video`, timm names and the timm module that defines each, YOLO yaml names, diffusers
classes): none is there. Two share a timm module with a zoo row and are kept because the block each is chosen for
is not in that row (MobileNetV4-Hybrid's mobile multi-query attention beside the zoo's all-conv MobileNetV4;
GC-ResNet's global-context block in the `byobnet` module of the zoo's GerNet and RepVGG). Same protocol: each row
named and committed before its first conversion; `scripts/measure_held_out.py --set held_out_41f` runs each once
through `convert_for_gpu` with the defaults and, for Hugging Face rows with a task, through the `export` command;
the results (`zoo/held_out_41f/`) are first-run numbers and are never re-run after a change made for them.

Chosen to cover what people put on phones and what they are starting to: five causal LMs (a ReLU^2 Llama
variant, a dense model with QK-norm, multi-head latent attention with routed experts, attention sinks with
experts, and a state-space model), two text encoders, dense prediction (segmentation, metric depth, matting),
a NaFlex vision encoder and an on-device VLM's vision encoder, an audio conformer from a phone-first family, a
neural audio codec, a detector-free keypoint matcher, timm CNNs and transformers, three diffusion blocks (Flux's
MMDiT, Sana's linear-attention DiT, a ControlNet), and two YOLO detectors (YOLOv3-tiny, YOLOv6). Models are
built from their config class at a small size with the library's own initialisation, then the zoo's weight rule;
nothing is downloaded, no remote code runs. Text encoders get `input_ids` and a padded `attention_mask` only
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
from .held_out_41e import _tensors
from .timm_models import _timm
from .yolo import _yolo


def _row(name, build, library, domain="vision"):
    return ZooModel(f"h41f_{name}", domain, build, library=library)


def _flux_inputs():
    import torch

    return {"hidden_states": _rand(1, 64, 16), "encoder_hidden_states": _rand(1, 8, 32, seed=2),
            "pooled_projections": _rand(1, 16, seed=3), "timestep": torch.tensor([0.5]),
            "img_ids": torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(8.0), torch.arange(8.0),
                                                  indexing="ij"), -1).reshape(64, 3),
            "txt_ids": torch.zeros(8, 3)}


def _sana_inputs():
    import torch

    return {"hidden_states": _rand(1, 4, 16, 16), "encoder_hidden_states": _rand(1, 8, 32, seed=2),
            "timestep": torch.tensor([10])}


def _controlnet_inputs():
    import torch

    return {"sample": _rand(1, 4, 16, 16), "timestep": torch.tensor([10]),
            "encoder_hidden_states": _rand(1, 8, 32, seed=2), "controlnet_cond": _rand(1, 3, 128, 128, seed=3)}


def _siglip2_inputs():
    import torch

    # as Siglip2ImageProcessor hands them over: 16 patches of 16 x 16 x 3, the last 4 padding, a 3 x 4 grid
    mask = torch.ones(1, 16, dtype=torch.long)
    mask[:, 12:] = 0
    return {"pixel_values": _rand(1, 16, 768), "pixel_attention_mask": mask,
            "spatial_shapes": torch.tensor([[3, 4]])}


def _backbone(build_fn):
    """A model whose config takes a backbone config: built in a function so transformers is imported late."""
    def build():
        install_torchvision_placeholders()
        import transformers

        model, inputs = build_fn(transformers)
        return built(model, inputs)
    return build


def _upernet(t):
    backbone = t.ConvNextConfig(num_channels=3, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                out_features=["stage1", "stage2", "stage3", "stage4"])
    config = t.UperNetConfig(backbone_config=backbone, hidden_size=32, auxiliary_in_channels=64, num_labels=5,
                             use_auxiliary_head=False)
    return t.UperNetForSemanticSegmentation(config), {"pixel_values": image(64)[0]}


def _zoedepth(t):
    backbone = t.BeitConfig(image_size=64, patch_size=16, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                            intermediate_size=128, use_relative_position_bias=True, reshape_hidden_states=False,
                            out_features=["stage1", "stage2", "stage3", "stage4"])
    config = t.ZoeDepthConfig(backbone_config=backbone, neck_hidden_sizes=[16, 32, 64, 64], fusion_hidden_size=32,
                              reassemble_factors=[4, 2, 1, 0.5], bottleneck_features=32, num_relative_features=16,
                              bin_embedding_dim=16, num_attractors=[4, 4, 4, 4], patch_size=16)
    return t.ZoeDepthForDepthEstimation(config), {"pixel_values": image(64)[0]}


def _vitmatte(t):
    backbone = t.VitDetConfig(image_size=64, patch_size=16, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                              mlp_ratio=2, num_channels=4, out_features=["stage2"])
    config = t.VitMatteConfig(backbone_config=backbone, hidden_size=64, convstream_hidden_sizes=[8, 16, 32],
                              fusion_hidden_sizes=[32, 16, 8, 8])
    return t.VitMatteForImageMatting(config), {"pixel_values": image(64, channels=4)[0]}


def _loftr(t):
    # the library's default configuration (16 M parameters): a smaller one did not build consistently
    return t.EfficientLoFTRForKeypointMatching(t.EfficientLoFTRConfig()), {"pixel_values": _rand(1, 2, 3, 64, 64)}


def _gemma3n_audio():
    def build():
        install_torchvision_placeholders()
        import torch
        import transformers

        config = transformers.Gemma3nAudioConfig(hidden_size=64, conf_num_hidden_layers=2, conf_num_attention_heads=4,
                                                 input_feat_size=32, vocab_size=16, sscp_conv_channel_size=[16, 8],
                                                 conf_attention_chunk_size=4, conf_attention_context_left=5,
                                                 conf_attention_context_right=0)
        # as Gemma 3n's feature extractor hands a clip over: log-mel frames and their padding mask (none padded)
        return built(transformers.Gemma3nAudioEncoder(config), (_rand(1, 64, 32), torch.zeros(1, 64, dtype=torch.bool)))
    return build


_DEEPSEEK = dict(_LLM, num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2,
                 n_shared_experts=1, n_group=1, topk_group=1, first_k_dense_replace=1, q_lora_rank=32,
                 kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16)

# In run order: libraries and domains interleave, so that a run cut short still covers each of them.
ROWS: tuple[ZooModel, ...] = (
    # Arcee (AFM): a Llama-style decoder with a ReLU^2 MLP, no gate
    _row("arcee", _causal_lm("ArceeForCausalLM", "ArceeConfig", **_LLM), "transformers", "llm"),
    # CSATv2: timm's convolution + self-attention hybrid
    _row("timm_csatv2", _timm("csatv2", 64), "timm"),
    # Gemma 3n's audio encoder: a USM-style conformer (subsampling convs, chunked local attention, logit cap)
    _row("gemma3n_audio", _gemma3n_audio(), "transformers", "audio"),
    # UperNet: pyramid pooling and an FPN over a ConvNeXt backbone (semantic segmentation)
    _row("upernet", _backbone(_upernet), "transformers"),
    # YOLOv3-tiny (u): the classic two-scale tiny detector with the anchor-free head (ultralytics)
    _row("yolov3_tinyu", _yolo("yolov3-tinyu.yaml"), "ultralytics", "detection"),
    # HunYuan dense: a decoder with QK-norm and dynamic NTK rotary scaling
    _row("hunyuan_dense", _causal_lm("HunYuanDenseV1ForCausalLM", "HunYuanDenseV1Config", head_dim=16,
                                                **_LLM), "transformers",
         "llm"),
    # Flux's transformer: double-stream (MMDiT) and single-stream blocks, 3-axis rotary ids (diffusers)
    _row("flux_transformer", _diffusers("FluxTransformer2DModel", _flux_inputs, patch_size=1, in_channels=16,
                                        num_layers=1, num_single_layers=1, attention_head_dim=16,
                                        num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=16,
                                        guidance_embeds=False, axes_dims_rope=(4, 6, 6)), "diffusers", "generative"),
    # Inception-ResNet-v2: inception branches with residual scaling (timm)
    _row("timm_inception_resnet_v2", _timm("inception_resnet_v2", 96), "timm"),
    # ZoeDepth: metric depth from a BEiT backbone with attractor bins (depth estimation)
    _row("zoedepth", _backbone(_zoedepth), "transformers"),
    # Data2Vec text: a RoBERTa-architecture encoder trained by self-distillation
    _row("data2vec_text", _hf("Data2VecTextModel", "Data2VecTextConfig", _masked(False), pad_token_id=1, **_ENC),
         "transformers", "text"),
    # DeepSeek-V3: multi-head latent attention (low-rank KV) and routed + shared experts
    _row("deepseek_v3", _causal_lm("DeepseekV3ForCausalLM", "DeepseekV3Config", **_DEEPSEEK), "transformers",
         "llm"),
    # SmolVLM's vision encoder: a SigLIP-style ViT from a small on-device vision-language model
    _row("smolvlm_vision", _hf("SmolVLMVisionTransformer", "SmolVLMVisionConfig",
                               lambda: {"pixel_values": image(64)[0]}, hidden_size=64, intermediate_size=128,
                               num_hidden_layers=2, num_attention_heads=4, image_size=64, patch_size=16),
         "transformers"),
    # Swin-V2 CR: timm's own Swin V2 (scaled cosine attention, post-norm, log-spaced position bias)
    _row("timm_swinv2_cr_tiny_ns_224", _timm("swinv2_cr_tiny_ns_224", 64, img_size=(64, 64), window_size=4),
         "timm"),
    # SigLIP 2 (NaFlex) vision encoder: patches of a variable grid with a padding mask and the grid's shape
    _row("siglip2_vision", _hf("Siglip2VisionModel", "Siglip2VisionConfig", _siglip2_inputs, hidden_size=64,
                               num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, num_patches=16,
                               patch_size=16), "transformers"),
    # Sana: a DiT with linear attention and a Mix-FFN (diffusers)
    _row("sana_transformer", _diffusers("SanaTransformer2DModel", _sana_inputs, in_channels=4, out_channels=4,
                                        num_attention_heads=2, attention_head_dim=16, num_layers=2,
                                        num_cross_attention_heads=2, cross_attention_head_dim=16,
                                        cross_attention_dim=32, caption_channels=32, sample_size=16, patch_size=1),
         "diffusers", "generative"),
    # GPT-OSS: attention sinks, alternating sliding-window layers, routed experts
    _row("gpt_oss", _causal_lm("GptOssForCausalLM", "GptOssConfig", num_local_experts=4, num_experts_per_tok=2,
                               sliding_window=4, head_dim=16, **_LLM), "transformers", "llm"),
    # DAC: a neural audio codec (strided conv encoder, residual vector quantizer, conv decoder)
    _row("dac", _hf("DacModel", "DacConfig", _tensors(input_values=(1, 1, 1024)), encoder_hidden_size=8,
                    downsampling_ratios=[2, 4], decoder_hidden_size=32, n_codebooks=4, codebook_size=64,
                    codebook_dim=4, hidden_size=32), "transformers", "audio"),
    # MobileNetV4 hybrid: inverted-bottleneck stages with mobile multi-query attention (timm)
    _row("timm_mobilenetv4_hybrid_medium", _timm("mobilenetv4_hybrid_medium", 64), "timm"),
    # MarkupLM: BERT with XPath embeddings, called with words only
    _row("markuplm", _hf("MarkupLMModel", "MarkupLMConfig", _masked(False), **_ENC), "transformers", "text"),
    # VitMatte: a plain ViT (VitDet) backbone with a conv detail stream, on image + trimap (4 channels)
    _row("vitmatte", _backbone(_vitmatte), "transformers"),
    # ControlNet: the UNet encoder copy with zero convolutions and a conditioning-image embedding (diffusers)
    _row("controlnet", _diffusers("ControlNetModel", _controlnet_inputs, block_out_channels=(16, 32),
                                  down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), cross_attention_dim=32,
                                  layers_per_block=1, attention_head_dim=4, norm_num_groups=8,
                                  conditioning_embedding_out_channels=(8, 8, 16, 16)), "diffusers", "generative"),
    # Mamba: a selective state-space language model (no attention)
    _row("mamba", _causal_lm("MambaForCausalLM", "MambaConfig", vocab_size=100, hidden_size=64, num_hidden_layers=2,
                             state_size=8, expand=2, conv_kernel=4), "transformers", "llm"),
    # EfficientLoFTR: detector-free matching of two images (aggregated attention, coarse-to-fine)
    _row("efficientloftr", _backbone(_loftr), "transformers", "matching"),
    # GC-ResNet: ResNet blocks with global-context attention (timm byobnet)
    _row("timm_gcresnet33ts", _timm("gcresnet33ts", 64), "timm"),
    # YOLOv6-N: a RepVGG-style backbone with a decoupled head (ultralytics)
    _row("yolov6n", _yolo("yolov6n.yaml"), "ultralytics", "detection"),
)
HELD_OUT_41F = {m.name: m for m in ROWS}

# the export command's task per Hugging Face row (its model saved with save_pretrained; the command's defaults)
EXPORT: dict[str, str] = {
    "h41f_arcee": "text-generation",
    "h41f_upernet": "semantic-segmentation",
    "h41f_hunyuan_dense": "text-generation",
    "h41f_zoedepth": "depth-estimation",
    "h41f_data2vec_text": "feature-extraction",
    "h41f_deepseek_v3": "text-generation",
    "h41f_gpt_oss": "text-generation",
    "h41f_markuplm": "feature-extraction",
    "h41f_mamba": "text-generation",
}
assert set(EXPORT) <= set(HELD_OUT_41F)

LEFT_OUT: dict[str, str] = {
    "timm mobilenetv5_300m_enc": "Gemma 3n's vision encoder: 300 M parameters at any input size, beyond what a "
                                 "row converts on the shared 2-core machine within its timeout",
    "timm naflexvit_base_patch16_gap": "only a base size is registered (86 M parameters); SigLIP 2's NaFlex "
                                       "encoder stands for the pattern instead",
    "timm vit_medium_patch16_rope_reg1_gap_256": "timm's RoPE ViTs live in its `eva` module, the zoo's EVA-02 row",
    "timm hgnet_tiny": "the `hgnet` module is the zoo's HGNetV2 row",
    "timm efficientvit_l1": "the `efficientvit_mit` module is the zoo's EfficientViT-B0 row",
    "torchvision ssdlite320_mobilenet_v3_large": "torchvision's detectors return boxes after NMS (data-dependent "
                                                 "sizes by design), not a graph a GPU delegate runs",
    "torchvision mvit_v2_s": "its builder fixes a 16 x 224 x 224 clip; at that size a row does not convert within "
                             "its timeout here",
    "transformers NystromformerModel": "its landmark attention raises in torch with a padded attention_mask "
                                       "(transformers 5.24); where it runs, it is BERT's full attention",
    "transformers DFineForObjectDetection": "its default config raises at a 64 x 64 image (more queries than "
                                            "encoder tokens) and a small HGNetV2 config we tried did not build",
    "ultralytics yolov8n-obb": "the zoo's YOLO builder has no oriented-box model class",
}
