"""More `transformers` rows: other configs of the same families, the outputs users read, KV-cache decode steps.

Separate from `hf` so that the first 38 rows keep their names and history; each row here differs from a row
there in config (heads, GQA groups, head_dim, sizes), in its head (pooled / projected / classification outputs)
or in how it is called (a decode step with a cache).
"""
from __future__ import annotations

from ..build import audio as _audio
from ..build import image as _image
from ..weights import ZooModel
from ._hf import _LLM, _SPEECH, _TEXT, _VIT, _causal_lm, _decode_step, _hf, _masked


def _llm(**over):
    return {**_LLM, **over}


_GQA_6_3 = dict(hidden_size=96, num_attention_heads=6, num_key_value_heads=3, head_dim=16)
_MQA_8_1 = dict(hidden_size=128, num_attention_heads=8, num_key_value_heads=1, head_dim=16)
_HD32 = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32)
_NO_HEAD_DIM = {k: v for k, v in _LLM.items() if k != "head_dim"}

ROWS: tuple[ZooModel, ...] = (
    # text encoders, more families, all called with a padding mask
    ZooModel("xlm_roberta", "text", _hf("XLMRobertaModel", "XLMRobertaConfig", _masked(False), pad_token_id=1,
                                        **_TEXT)),
    ZooModel("mpnet", "text", _hf("MPNetModel", "MPNetConfig", _masked(False), pad_token_id=1, **_TEXT)),
    ZooModel("deberta_v2", "text", _hf("DebertaV2Model", "DebertaV2Config", _masked(), position_buckets=16,
                                       max_relative_positions=32, **_TEXT)),
    ZooModel("camembert", "text", _hf("CamembertModel", "CamembertConfig", _masked(False), pad_token_id=1,
                                      **_TEXT)),
    ZooModel("ernie", "text", _hf("ErnieModel", "ErnieConfig", _masked(), **_TEXT)),
    ZooModel("modernbert", "text", _hf("ModernBertModel", "ModernBertConfig", _masked(False), vocab_size=100,
                                       hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                       intermediate_size=128, max_position_embeddings=64, local_attention=8,
                                       pad_token_id=0, eos_token_id=1, bos_token_id=2, cls_token_id=2,
                                       sep_token_id=1)),
    ZooModel("mobilebert", "text", _hf("MobileBertModel", "MobileBertConfig", _masked(), embedding_size=32,
                                       true_hidden_size=64, intra_bottleneck_size=64, num_feedforward_networks=2,
                                       **_TEXT)),
    ZooModel("roformer", "text", _hf("RoFormerModel", "RoFormerConfig", _masked(), embedding_size=64, **_TEXT)),
    # relative attention with learned segment / position tables, masks pooled between blocks
    ZooModel("funnel", "text", _hf("FunnelBaseModel", "FunnelConfig", _masked(), vocab_size=100, d_model=64, n_head=4,
                                   d_head=16, d_inner=128, block_sizes=[1, 1], num_decoder_layers=1,
                                   max_position_embeddings=64)),
    # character-level: hashed codepoint embeddings, a strided downsampling conv, an outer-product 3-D mask
    ZooModel("canine", "text", _hf("CanineModel", "CanineConfig", _masked(), hidden_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=128, downsampling_rate=2,
                                   num_hash_buckets=64, num_hash_functions=2)),
    # two-stream-free XLNet encoder: relative shift by index_select, segments one-hot encoded, 1e30 masks
    ZooModel("xlnet", "text", _hf("XLNetModel", "XLNetConfig", _masked(), vocab_size=100, d_model=32, n_layer=2,
                                  n_head=2, d_inner=64)),
    ZooModel("bert_position_ids", "text", _hf("BertModel", "BertConfig", _masked(position_ids=True), **_TEXT)),
    ZooModel("bert_6_heads", "text", _hf("BertModel", "BertConfig", _masked(), **{**_TEXT, "hidden_size": 96,
                                                                                   "num_attention_heads": 6})),
    # heads: the outputs users read
    ZooModel("bert_classifier", "text", _hf("BertForSequenceClassification", "BertConfig", _masked(), num_labels=3,
                                            **_TEXT)),
    ZooModel("roberta_token_classifier", "text", _hf("RobertaForTokenClassification", "RobertaConfig",
                                                     _masked(False), pad_token_id=1, num_labels=5, **_TEXT)),
    ZooModel("distilbert_qa", "text", _hf("DistilBertForQuestionAnswering", "DistilBertConfig", _masked(False),
                                          vocab_size=100, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                          max_position_embeddings=64)),
    ZooModel("clip_text_projection", "multimodal", _hf(
        "CLIPTextModelWithProjection", "CLIPTextConfig", _masked(False), vocab_size=100, hidden_size=64,
        num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, max_position_embeddings=64,
        projection_dim=32, eos_token_id=2)),
    ZooModel("clip_vision_projection", "multimodal", _hf(
        "CLIPVisionModelWithProjection", "CLIPVisionConfig", _image, projection_dim=32, **_VIT)),
    ZooModel("siglip_text", "multimodal", _hf(
        "SiglipTextModel", "SiglipTextConfig", _masked(False), vocab_size=100, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=128, max_position_embeddings=16)),
    ZooModel("gpt2_classifier", "llm", _hf(
        "GPT2ForSequenceClassification", "GPT2Config", _masked(False), vocab_size=100, n_embd=64, n_layer=2,
        n_head=4, n_positions=64, num_labels=2, pad_token_id=0)),
    # causal LMs at other head / GQA / head_dim configs: logits, no cache
    ZooModel("llama_gqa_6x3", "llm", _causal_lm("LlamaForCausalLM", "LlamaConfig", **_llm(**_GQA_6_3))),
    ZooModel("llama_mqa_8x1", "llm", _causal_lm("LlamaForCausalLM", "LlamaConfig", **_llm(**_MQA_8_1))),
    ZooModel("qwen2_gqa_6x3", "llm", _causal_lm("Qwen2ForCausalLM", "Qwen2Config", **_llm(**_GQA_6_3))),
    ZooModel("qwen2_hd32", "llm", _causal_lm("Qwen2ForCausalLM", "Qwen2Config", **_llm(**_HD32))),
    ZooModel("qwen3_gqa_6x3", "llm", _causal_lm("Qwen3ForCausalLM", "Qwen3Config", **_llm(**_GQA_6_3))),
    ZooModel("gemma_mqa_8x1", "llm", _causal_lm("GemmaForCausalLM", "GemmaConfig", **_llm(**_MQA_8_1))),
    ZooModel("gemma3_text", "llm", _causal_lm("Gemma3ForCausalLM", "Gemma3TextConfig", sliding_window=8,
                                              **_llm(**_GQA_6_3))),
    ZooModel("phi3_96", "llm", _causal_lm("Phi3ForCausalLM", "Phi3Config", pad_token_id=0,
                                          **{**_NO_HEAD_DIM, "hidden_size": 96, "num_attention_heads": 6,
                                             "num_key_value_heads": 3})),
    ZooModel("mistral_mqa_8x1", "llm", _causal_lm("MistralForCausalLM", "MistralConfig", sliding_window=None,
                                                  **_llm(**_MQA_8_1))),
    ZooModel("gpt_neox", "llm", _causal_lm("GPTNeoXForCausalLM", "GPTNeoXConfig", rotary_pct=0.5,
                                              **_NO_HEAD_DIM)),
    ZooModel("opt", "llm", _causal_lm("OPTForCausalLM", "OPTConfig", vocab_size=100, hidden_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
                                      max_position_embeddings=64, word_embed_proj_dim=64)),
    ZooModel("bloom", "llm", _causal_lm("BloomForCausalLM", "BloomConfig", vocab_size=100, hidden_size=64,
                                        n_layer=2, n_head=4)),
    ZooModel("stablelm", "llm", _causal_lm("StableLmForCausalLM", "StableLmConfig", **_NO_HEAD_DIM)),
    ZooModel("granite", "llm", _causal_lm("GraniteForCausalLM", "GraniteConfig", **_llm(**_GQA_6_3))),
    ZooModel("olmo2", "llm", _causal_lm("Olmo2ForCausalLM", "Olmo2Config", **_NO_HEAD_DIM)),
    ZooModel("starcoder2", "llm", _causal_lm("Starcoder2ForCausalLM", "Starcoder2Config", sliding_window=None,
                                             **_NO_HEAD_DIM)),
    # one decode step with a KV cache
    ZooModel("llama_decode_kv", "llm", _decode_step("LlamaForCausalLM", "LlamaConfig", **_llm(**_GQA_6_3))),
    ZooModel("qwen2_decode_kv", "llm", _decode_step("Qwen2ForCausalLM", "Qwen2Config", **_llm())),
    ZooModel("gemma_decode_kv", "llm", _decode_step("GemmaForCausalLM", "GemmaConfig", **_llm(**_MQA_8_1))),
    ZooModel("phi3_decode_kv", "llm", _decode_step("Phi3ForCausalLM", "Phi3Config", pad_token_id=0,
                                                   **_NO_HEAD_DIM)),
    # vision and audio at other configs
    ZooModel("swinv2", "vision", _hf("Swinv2Model", "Swinv2Config", _image, image_size=32, patch_size=2,
                                     embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4)),
    ZooModel("vit_6_heads", "vision", _hf("ViTModel", "ViTConfig", _image, **{**_VIT, "hidden_size": 96,
                                                                             "num_attention_heads": 6})),
    ZooModel("levit", "vision", _hf("LevitModel", "LevitConfig", lambda: _image(64), image_size=64,
                                    hidden_sizes=[32, 48, 64], num_attention_heads=[1, 2, 2], depths=[1, 1, 1],
                                    key_dim=[8, 8, 8])),
    ZooModel("pvt_v2", "vision", _hf("PvtV2Model", "PvtV2Config", _image, hidden_sizes=[16, 32, 48, 64],
                                     depths=[1, 1, 1, 1], num_attention_heads=[1, 1, 2, 2])),
    ZooModel("bit", "vision", _hf("BitModel", "BitConfig", lambda: _image(32), embedding_size=32,
                                  hidden_sizes=[128, 256], depths=[1, 1], num_groups=8)),
    ZooModel("wavlm", "audio", _hf("WavLMModel", "WavLMConfig", _audio, num_buckets=16, max_bucket_distance=64,
                                   **_SPEECH)),
)
