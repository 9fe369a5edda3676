"""Issue 43's first diagnosis case: ViT-family models at the library's own initialisation, with extra learned
tokens beside the class token, were NUMERICS_FAIL at full residency (two all-zero) and the diagnosis blamed a
LayerNorm already in its safe form. The zoo's library-init table (zoo/library_init/) measures 11 such rows; this
is the CI check, on models built untouched from their configs: DeiT (class + distillation token) and DINOv2 with
registers. GPU: llvmpipe (software Vulkan), ai-edge-litert 2.3.0."""
import pytest
import torch

from litert_gpu_toolkit import convert_for_gpu
from hf_tiny import Outputs  # tests/hf_tiny.py

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
             patch_size=8)


def _model(name: str):
    import transformers

    torch.manual_seed(0)                                  # the library's own init, nothing redrawn
    if name == "deit":
        return transformers.DeiTModel(transformers.DeiTConfig(**SMALL)).eval()
    return transformers.Dinov2WithRegistersModel(transformers.Dinov2WithRegistersConfig(num_register_tokens=4,
                                                                                         **SMALL)).eval()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["deit", "dinov2_registers"])
def test_a_vit_with_extra_tokens_at_library_init_passes(gpu, tmp_path, name):
    model = Outputs(_model(name), ["last_hidden_state", "pooler_output"])
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    res = convert_for_gpu(model, (x,), tmp_path / f"{name}.tflite")
    assert res.ok and res.verdict == "PASS", res.summary()
    assert "strict GPU" in res.report.summary and not res.diagnosis, res.summary()
    print(f"\n[llvmpipe] {name} at library init: {res.report.summary}")
