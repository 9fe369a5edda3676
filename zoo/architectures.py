"""The zoo's architectures: tiny seeded configs of `transformers` models, and the weight rule.

Nothing is downloaded: each builder makes a config and a randomly initialised model, then
`redraw_weights` sets the weights by the rule below so activations are O(1) (transformers' default
init leaves some conv models at ~1e-25, which would make any numeric check meaningless):

  * nn.Linear / nn.Conv*d / nn.ConvTranspose*d weight ~ N(0, 1 / fan_in) (variance-preserving),
    bias ~ N(0, 0.02^2);
  * nn.Embedding weight ~ N(0, 1);
  * any other parameter that the default init left all-zero or tiny (|w| < 1e-3 everywhere, e.g. layer
    scales, cls / mask tokens, position tables) ~ U(0.5, 1.0) when its name says scale / gamma / lambda,
    else N(0, 0.02^2) + 0 (tokens, position tables);
  * norms (LayerNorm, GroupNorm, BatchNorm) are set to weight 1, bias 0, running stats (0, 1)
    (some HF inits shrink BatchNorm weights, which left MobileViT at ~1e-7).

Importing this module does not import torch; building a model does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable



@dataclass(frozen=True)
class ZooModel:
    """One architecture: `build()` -> (module returning one tensor, example inputs tuple)."""
    name: str
    domain: str          # vision / audio / text / llm / multimodal
    build: Callable
    fast: bool = False   # in the CI subset



# ------------------------------------------------------------------------------------ weights

def redraw_weights(model, seed: int = 0) -> None:
    """Redraw `model`'s weights in place so activations are O(1) (see the module docstring)."""
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(seed)

    def normal_(t, std, mean=0.0):
        with torch.no_grad():
            t.copy_(torch.randn(t.shape, generator=g) * std + mean)

    done: set[int] = set()
    for _, m in model.named_modules():
        if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d)):
            w = m.weight
            if isinstance(m, (nn.ConvTranspose1d, nn.ConvTranspose2d)):
                fan_in = w.shape[0] * int(torch.tensor(w.shape[2:]).prod()) // max(1, m.stride[0])
            else:
                fan_in = int(w[0].numel())
            normal_(w, 1.0 / max(1, fan_in) ** 0.5)
            done.add(id(w))
            if m.bias is not None:
                normal_(m.bias, 0.02)
                done.add(id(m.bias))
        elif isinstance(m, nn.Embedding):
            normal_(m.weight, 1.0)
            done.add(id(m.weight))
        elif isinstance(m, (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d)):
            with torch.no_grad():
                if getattr(m, "weight", None) is not None:
                    m.weight.fill_(1.0)
                if getattr(m, "bias", None) is not None:
                    m.bias.zero_()
                if getattr(m, "running_mean", None) is not None:
                    m.running_mean.zero_()
                    m.running_var.fill_(1.0)
            for p in m.parameters(recurse=False):
                done.add(id(p))
    for name, p in model.named_parameters():
        if id(p) in done or not p.is_floating_point():
            continue
        if p.numel() and float(p.detach().abs().max()) < 1e-3:
            leaf = name.rsplit(".", 1)[-1].lower()
            if any(k in leaf for k in ("scale", "gamma", "lambda")):
                with torch.no_grad():
                    p.copy_(torch.rand(p.shape, generator=g) * 0.5 + 0.5)
            else:
                normal_(p, 0.02)


# ----------------------------------------------------------------------------------- builders

def _first_tensor(out):
    import torch

    if isinstance(out, torch.Tensor):
        return out
    for key in ("last_hidden_state", "predicted_depth", "logits", "audio_values", "pooler_output"):
        v = getattr(out, key, None) if not isinstance(out, dict) else out.get(key)
        if isinstance(v, torch.Tensor):
            return v
    if isinstance(out, (tuple, list)):
        return _first_tensor(out[0])
    if hasattr(out, "to_tuple"):
        return _first_tensor(out.to_tuple()[0])
    raise TypeError(f"no tensor output in {type(out).__name__}")


def _wrap(model, call: Callable | None = None):
    """A module whose forward returns one tensor: `call(model, *inputs)` or model(*inputs)'s main output."""
    from torch import nn

    class ZooWrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *xs):
            out = call(self.model, *xs) if call else self.model(*xs)
            return _first_tensor(out)

    return ZooWrapper().eval()


def _image(size=32, channels=3):
    import torch

    return (torch.randn(1, channels, size, size, generator=torch.Generator().manual_seed(1)),)


def _ids(n=16, vocab=100):
    import torch

    return (torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(1)),)


def _hf(cls_name: str, config_name: str, inputs: Callable, call: Callable | None = None, module: str | None = None,
        **config):
    """A builder: transformers.<cls_name>(<config_name>(**config)), weights redrawn, wrapped."""
    def build():
        import importlib

        import transformers

        src = importlib.import_module(module) if module else transformers
        cfg = getattr(transformers, config_name)(**config)
        for k in ("attn_implementation", "_attn_implementation"):
            try:
                setattr(cfg, k, "eager")
            except Exception:                                 # noqa: BLE001 - older configs
                pass
        model = getattr(src, cls_name)(cfg).eval()
        redraw_weights(model)
        return _wrap(model, call), inputs()
    return build


_VIT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
            patch_size=8)
_TEXT = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             max_position_embeddings=64)
_LLM = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, max_position_embeddings=64, head_dim=16)


def _audio(n=1600):
    import torch

    return (torch.randn(1, n, generator=torch.Generator().manual_seed(1)),)


def _mel(frames, bins, layout="bf"):
    def make():
        import torch

        shape = (1, bins, frames) if layout == "bf" else (1, frames, bins)
        return (torch.randn(*shape, generator=torch.Generator().manual_seed(1)),)
    return make


def _codes(n=16, codebook=64, books=2):
    def make():
        import torch

        return (torch.randint(0, codebook, (1, 1, books, n), generator=torch.Generator().manual_seed(1)),)
    return make


def _spectrogram(frames=16, bins=16):
    def make():
        import torch

        return (torch.randn(1, frames, bins, generator=torch.Generator().manual_seed(1)),)
    return make


_ZOO: tuple[ZooModel, ...] = (
    # vision
    ZooModel("vit", "vision", _hf("ViTModel", "ViTConfig", _image, **_VIT), fast=True),
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
        fast=True,
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
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            conv_dim=[32, 32],
            conv_stride=[5, 4],
            conv_kernel=[10, 4],
            num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=4,
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
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            conv_dim=[32, 32],
            conv_stride=[5, 4],
            conv_kernel=[10, 4],
            num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=4,
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
    ZooModel("bert", "text", _hf("BertModel", "BertConfig", _ids, **_TEXT), fast=True),
    ZooModel("roberta", "text", _hf("RobertaModel", "RobertaConfig", _ids, pad_token_id=1, **_TEXT)),
    ZooModel("albert", "text", _hf("AlbertModel", "AlbertConfig", _ids, embedding_size=32, **_TEXT)),
    ZooModel(
        "distilbert",
        "text",
        _hf(
            "DistilBertModel",
            "DistilBertConfig",
            _ids,
            vocab_size=100,
            dim=64,
            n_layers=2,
            n_heads=4,
            hidden_dim=128,
            max_position_embeddings=64,
        ),
    ),
    ZooModel("electra", "text", _hf("ElectraModel", "ElectraConfig", _ids, embedding_size=32, **_TEXT)),
    ZooModel(
        "t5_encoder",
        "text",
        _hf(
            "T5EncoderModel", "T5Config", _ids, vocab_size=100, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4
        ),
    ),
    # LLM decoders (one forward over a 16-token prompt, no cache)
    ZooModel(
        "gpt2",
        "llm",
        _hf("GPT2Model", "GPT2Config", _ids, vocab_size=100, n_embd=64, n_layer=2, n_head=4, n_positions=64),
        fast=True,
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
            _ids,
            vocab_size=100,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=64,
        ),
    ),
    ZooModel("clip_vision", "multimodal", _hf("CLIPVisionModel", "CLIPVisionConfig", _image, **_VIT)),
    ZooModel("siglip_vision", "multimodal", _hf("SiglipVisionModel", "SiglipVisionConfig", _image, **_VIT)),
)

ZOO = {m.name: m for m in _ZOO}
