"""EXPERT_DISPATCH: Hugging Face mixture-of-experts layers as dense experts (fp32 rounding, converts, GPU-only)."""

import pytest
import torch
import transformers as T

from litert_gpu_toolkit.rewrites.expert_dispatch import dense_experts, patch_dense_experts

from wall_checks import _convert, _gpu_clean

_BASE = dict(vocab_size=100, hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128,
             num_key_value_heads=2, max_position_embeddings=512)
# four layouts of transformers' expert modules: gate+up concatenated (OLMoE, Mixtral), a shared expert beside
# the routed ones (Qwen2-MoE), biases with transposed weights and its own gate (GPT-OSS)
FAMILIES = {
    "Olmoe": dict(num_experts=4, num_experts_per_tok=2),
    "Mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "Qwen2Moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                     shared_expert_intermediate_size=64),
    "GptOss": dict(num_local_experts=4, num_experts_per_tok=2, head_dim=16, layer_types=["full_attention"]),
}


def _moe(family: str):
    torch.manual_seed(0)
    model = getattr(T, f"{family}ForCausalLM")(getattr(T, f"{family}Config")(**_BASE, **FAMILIES[family])).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 3:                       # the expert weights start empty / zero in some families
                p.normal_(std=0.05)
    return model


def _block(family: str = "Olmoe") -> torch.nn.Module:
    """The model's one MoE block (router + experts), called on [B, S, C] hidden states."""
    return _moe(family).model.layers[0].mlp


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_dense_experts_match_every_dispatch_form_to_fp32_rounding(family):
    model = _moe(family)
    ids = torch.randint(0, 100, (2, 9), generator=torch.Generator().manual_seed(1))
    refs = []
    for impl in ("eager", "batched_mm", "grouped_mm"):   # the three sparse forms transformers dispatches to
        model.config._experts_implementation = impl
        with torch.no_grad():
            refs.append(model(input_ids=ids).logits)
    changes = patch_dense_experts(model)
    assert [c.rewrite for c in changes] == ["patch_dense_experts"] and changes[0].exact
    with torch.no_grad():
        dense = model(input_ids=ids).logits
    for ref in refs:
        assert float((dense - ref).abs().max() / ref.abs().max()) <= 2e-6
    # the experts matter to the output (so the comparison above is not vacuous)
    with torch.no_grad():
        model.model.layers[0].mlp.experts.down_proj.zero_()
        assert float((model(input_ids=ids).logits - dense).abs().max() / dense.abs().max()) > 0.05


def test_dense_experts_keeps_the_module_and_refuses_others():
    block = _block()
    experts = block.experts
    cls = type(experts)
    assert dense_experts(experts) is experts and isinstance(experts, cls) and type(experts) is not cls
    assert patch_dense_experts(block) == []                 # already dense: nothing to change twice
    with pytest.raises(TypeError):
        dense_experts(torch.nn.Linear(2, 2))


def test_sparse_dispatch_does_not_convert_and_the_dense_one_has_no_gather(tmp_path):
    x = (torch.randn(1, 8, 64),)
    with pytest.raises(Exception, match="histc"):
        _convert(_block(), x, tmp_path / "plain.tflite")
    block = _block()
    patch_dense_experts(block)
    hist = _convert(block, x, tmp_path / "dense.tflite").op_histogram()
    assert not {"GATHER", "GATHER_ND"} & set(hist) and hist.get("FULLY_CONNECTED", 0) >= 8, hist


def test_dense_experts_run_gpu_only_and_match_torch(tmp_path, gpu):
    block = _block()
    patch_dense_experts(block)
    x = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(2))
    res = _gpu_clean(block, (x,), tmp_path / "dense.tflite")
    assert min(c.corr for c in res.comparisons) >= 0.9999, res.summary()
