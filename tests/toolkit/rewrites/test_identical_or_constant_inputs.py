"""`patch_relative_position_bias`: T5-family position-bias bucket ids without all-constant ops.

Exact in torch; ABS / LOG / MINIMUM on constants gone from the converted graph; strict GPU-only compile
with numerics matching torch (llvmpipe, ai-edge-litert 2.3.0). Alone it is not enough there: the constant
[1, H, S, S] bias ADDed onto the scores is then miscomputed by the GPU (corr 0.71 on this model in fp16
and fp32), which `patch_attention_bias_add` (also a default) fixes; with `only=` this rewrite alone the
numbers are asserted wrong, so the day the GPU gets it right a test says so."""
import pytest
import torch

from litert_gpu_toolkit.convert.pipeline import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.identical_or_constant_inputs import patch_relative_position_bias
from litert_zoo.weights import redraw_weights  # the zoo's weight rule: O(1) activations

transformers = pytest.importorskip("transformers")


def _t5():
    torch.manual_seed(0)
    # the zoo's t5_encoder config; a 1-layer d_model-32 variant on 12 tokens still measured corr 0.95 on
    # llvmpipe with both rewrites (not explained yet; see the zoo notes)
    cfg = transformers.T5Config(vocab_size=50, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)
    cfg._attn_implementation = "eager"
    model = transformers.T5EncoderModel(cfg).eval()
    redraw_weights(model)                               # O(1) activations (the zoo's redraw)

    class Enc(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids):
            return self.m(ids).last_hidden_state
    return Enc().eval()


IDS = torch.randint(0, 50, (1, 16), generator=torch.Generator().manual_seed(1))


def test_exact_in_torch_and_cached_per_length():
    model = _t5()
    ref = model(IDS)
    changes = patch_relative_position_bias(model, ((IDS,), {}))
    assert len(changes) == 1 and changes[0].exact
    attn = model.m.encoder.block[0].layer[0].SelfAttention
    assert (16, 16, 0) in attn.compute_bias.buckets
    assert torch.equal(model(IDS), ref)
    other = torch.randint(0, 50, (1, 7))
    assert torch.equal(model(other), _t5()(other))         # an unseen length: computed, same numbers


@pytest.mark.gpu
def test_constant_ops_gone_and_gpu_only_compile(gpu, tmp_path):
    plain = convert_for_gpu(_t5(), (IDS,), tmp_path / "plain.tflite", patches=False)
    assert "ABS" in read_model_info(plain.path).op_histogram()
    assert plain.verdict == "FALLBACK", plain.summary()
    fixed = convert_for_gpu(_t5(), (IDS,), tmp_path / "fixed.tflite", fallback=False)   # defaults, no fallback
    assert {"patch_relative_position_bias", "patch_attention_bias_add"} <= set(fixed.kept), fixed.summary()
    ops = read_model_info(fixed.path).op_histogram()
    assert not {"ABS", "LOG", "MINIMUM"} & set(ops), ops
    assert fixed.ok, fixed.summary()
    alone = convert_for_gpu(_t5(), (IDS,), tmp_path / "alone.tflite", fallback=False,
                            exclude=["patch_attention_bias_add"])
    assert alone.report.residency["strict"] and alone.verdict == "NUMERICS_FAIL", alone.summary()
    print("\n[llvmpipe]", fixed.report.summary, "| without patch_attention_bias_add:", alone.report.summary)
