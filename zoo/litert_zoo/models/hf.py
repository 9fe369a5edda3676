"""`transformers` architectures at tiny seeded configs, called the way users call them.

Text encoders take two sequences, one padded (attention_mask), and token type ids; every output a user reads
is returned (last_hidden_state and pooler_output, projected embeddings, logits). Causal LMs run at several head /
GQA / head_dim configs, as a prompt forward without a cache and as one decode step with a KV cache. Importing
this module imports neither torch nor transformers (each builder does, when called).
"""
from __future__ import annotations

from ..build import audio as _audio
from ..build import codes as _codes
from ..build import ids as _ids
from ..build import image as _image
from ..build import mel as _mel
from ..build import spectrogram as _spectrogram
from ._hf import _LLM, _SPEECH, _TEXT, _VIT, _hf, _masked
from ..weights import ZooModel

ROWS: tuple[ZooModel, ...] = (
    # vision
    ZooModel("vit", "vision", _hf("ViTModel", "ViTConfig", _image, **_VIT)),
    ZooModel("deit", "vision", _hf("DeiTModel", "DeiTConfig", _image, **_VIT)),
    ZooModel("beit", "vision", _hf("BeitModel", "BeitConfig", _image, use_mask_token=False, **_VIT)),
    ZooModel(
        "dinov2",
        "vision",
        _hf(
            "Dinov2Model",
            "Dinov2Config",
            _image,
            mlp_ratio=2,
            **{k: v for k, v in _VIT.items() if k != "intermediate_size"},
        ),
    ),
    ZooModel(
        "yolos",
        "vision",
        _hf("YolosModel", "YolosConfig", _image, num_detection_tokens=4, **{**_VIT, "image_size": [32, 32]}),
    ),
    ZooModel(
        "swin",
        "vision",
        _hf(
            "SwinModel",
            "SwinConfig",
            _image,
            image_size=32,
            patch_size=2,
            embed_dim=16,
            depths=[1, 1],
            num_heads=[2, 2],
            window_size=4,
        ),
    ),
    ZooModel(
        "convnext",
        "vision",
        _hf("ConvNextModel", "ConvNextConfig", _image, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2),
    ),
    ZooModel(
        "convnextv2",
        "vision",
        _hf("ConvNextV2Model", "ConvNextV2Config", _image, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2),
    ),
    ZooModel(
        "resnet",
        "vision",
        _hf("ResNetModel", "ResNetConfig", _image, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1]),
    ),
    ZooModel(
        "regnet",
        "vision",
        _hf(
            "RegNetModel",
            "RegNetConfig",
            _image,
            embedding_size=16,
            hidden_sizes=[16, 32],
            depths=[1, 1],
            groups_width=8,
        ),
    ),
    ZooModel(
        "mobilenet_v2",
        "vision",
        _hf("MobileNetV2Model", "MobileNetV2Config", _image, depth_multiplier=0.35, image_size=32),
    ),
    ZooModel(
        "mobilevit",
        "vision",
        _hf(
            "MobileViTModel",
            "MobileViTConfig",
            lambda: _image(64),
            image_size=64,
            hidden_sizes=[32, 48, 64],
            neck_hidden_sizes=[8, 16, 24, 32, 40, 48, 64],
            num_attention_heads=2,
        ),
    ),
    ZooModel(
        "segformer",
        "vision",
        _hf(
            "SegformerModel",
            "SegformerConfig",
            _image,
            num_encoder_blocks=2,
            depths=[1, 1],
            sr_ratios=[2, 1],
            hidden_sizes=[16, 32],
            num_attention_heads=[1, 2],
            patch_sizes=[7, 3],
            strides=[4, 2],
            mlp_ratios=[2, 2],
        ),
    ),
    ZooModel(
        "poolformer",
        "vision",
        _hf(
            "PoolFormerModel",
            "PoolFormerConfig",
            _image,
            depths=[1, 1],
            hidden_sizes=[16, 32],
            num_encoder_blocks=2,
            patch_sizes=[7, 3],
            strides=[4, 2],
            padding=[2, 1],
        ),
    ),
    ZooModel(
        "dpt",
        "vision",
        _hf(
            "DPTForDepthEstimation",
            "DPTConfig",
            _image,
            **{
                **_VIT,
                "num_hidden_layers": 4,
                "backbone_out_indices": [0, 1, 2, 3],
                "neck_hidden_sizes": [16, 16, 32, 32],
                "fusion_hidden_size": 32,
                "head_hidden_size": 16,
            },
        ),
    ),
    ZooModel(
        "depth_anything",
        "vision",
        _hf(
            "DepthAnythingForDepthEstimation",
            "DepthAnythingConfig",
            lambda: _image(28),
            backbone_config={
                "model_type": "dinov2",
                "hidden_size": 32,
                "num_hidden_layers": 4,
                "num_attention_heads": 2,
                "image_size": 28,
                "patch_size": 14,
                "out_indices": [1, 2, 3, 4],
                "mlp_ratio": 2,
                "reshape_hidden_states": False,
            },
            neck_hidden_sizes=[16, 16, 32, 32],
            fusion_hidden_size=16,
            head_hidden_size=16,
            reassemble_hidden_size=32,
            patch_size=14,
        ),
    ),
    # audio
    ZooModel(
        "whisper_encoder",
        "audio",
        _hf(
            "WhisperEncoder",
            "WhisperConfig",
            _mel(32, 16),
            module="transformers.models.whisper.modeling_whisper",
            d_model=64,
            encoder_layers=2,
            encoder_attention_heads=4,
            encoder_ffn_dim=128,
            num_mel_bins=16,
            max_source_positions=16,
            vocab_size=100,
            decoder_layers=1,
            decoder_attention_heads=4,
        ),
    ),
    ZooModel(
        "wav2vec2",
        "audio",
        _hf(
            "Wav2Vec2Model",
            "Wav2Vec2Config",
            _audio,
            **_SPEECH,
            do_stable_layer_norm=False,
            feat_extract_norm="group",
        ),
    ),
    ZooModel(
        "hubert",
        "audio",
        _hf(
            "HubertModel",
            "HubertConfig",
            _audio,
            **_SPEECH,
        ),
    ),
    ZooModel(
        "ast",
        "audio",
        _hf(
            "ASTModel",
            "ASTConfig",
            _spectrogram(64, 32),
            max_length=64,
            num_mel_bins=32,
            patch_size=8,
            frequency_stride=8,
            time_stride=8,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
        ),
    ),
    ZooModel(
        "encodec_decoder",
        "audio",
        _hf(
            "EncodecModel",
            "EncodecConfig",
            _codes(),
            call=lambda m, c: m.decode(c, [None])[0],
            num_filters=8,
            upsampling_ratios=[4, 2],
            hidden_size=32,
            codebook_size=64,
            codebook_dim=32,
            num_lstm_layers=1,
            target_bandwidths=[6.0],
            sampling_rate=2400,
        ),
    ),
    ZooModel(
        "speecht5_hifigan",
        "audio",
        _hf(
            "SpeechT5HifiGan",
            "SpeechT5HifiGanConfig",
            _spectrogram(16, 16),
            model_in_dim=16,
            upsample_initial_channel=32,
            upsample_rates=[4, 4],
            upsample_kernel_sizes=[8, 8],
            resblock_kernel_sizes=[3],
            resblock_dilation_sizes=[[1, 3]],
            normalize_before=False,
        ),
    ),
    # text encoders
    ZooModel("bert", "text", _hf("BertModel", "BertConfig", _masked(), **_TEXT), fast=True),
    ZooModel("roberta", "text", _hf("RobertaModel", "RobertaConfig", _masked(False), pad_token_id=1, **_TEXT)),
    ZooModel("albert", "text", _hf("AlbertModel", "AlbertConfig", _masked(), embedding_size=32, **_TEXT)),
    ZooModel(
        "distilbert",
        "text",
        _hf(
            "DistilBertModel",
            "DistilBertConfig",
            _masked(False),
            vocab_size=100,
            dim=64,
            n_layers=2,
            n_heads=4,
            hidden_dim=128,
            max_position_embeddings=64,
        ),
    ),
    ZooModel("electra", "text", _hf("ElectraModel", "ElectraConfig", _masked(), embedding_size=32, **_TEXT)),
    ZooModel(
        "t5_encoder",
        "text",
        _hf(
            "T5EncoderModel", "T5Config", _masked(False), vocab_size=100, d_model=64, d_kv=16, d_ff=128, num_layers=2,
            num_heads=4,
        ),
    ),
    # LLM decoders (one forward over a 16-token prompt, no cache)
    ZooModel(
        "gpt2",
        "llm",
        _hf("GPT2Model", "GPT2Config", _ids, vocab_size=100, n_embd=64, n_layer=2, n_head=4, n_positions=64),
    ),
    ZooModel("llama", "llm", _hf("LlamaModel", "LlamaConfig", _ids, **_LLM)),
    ZooModel("qwen2", "llm", _hf("Qwen2Model", "Qwen2Config", _ids, **_LLM)),
    ZooModel("mistral", "llm", _hf("MistralModel", "MistralConfig", _ids, sliding_window=None, **_LLM)),
    ZooModel("gemma", "llm", _hf("GemmaModel", "GemmaConfig", _ids, **_LLM)),
    ZooModel("gemma2", "llm", _hf("Gemma2Model", "Gemma2Config", _ids, **_LLM)),
    ZooModel(
        "phi3",
        "llm",
        _hf("Phi3Model", "Phi3Config", _ids, pad_token_id=0, **{k: v for k, v in _LLM.items() if k != "head_dim"}),
    ),
    # multimodal towers
    ZooModel(
        "clip_text",
        "multimodal",
        _hf(
            "CLIPTextModel",
            "CLIPTextConfig",
            _masked(False),
            vocab_size=100,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=64,
            eos_token_id=2,
        ),
    ),
    ZooModel("clip_vision", "multimodal", _hf("CLIPVisionModel", "CLIPVisionConfig", _image, **_VIT)),
    ZooModel("siglip_vision", "multimodal", _hf("SiglipVisionModel", "SiglipVisionConfig", _image, **_VIT)),
)


