"""`patch_relative_position_bias`: T5-family position-bias bucket ids without all-constant ops.

Exact in torch; ABS / LOG / MINIMUM on constants gone from the converted graph; strict GPU-only compile.
The numbers of the rewritten T5 attention on the software GPU are NOT asserted as matching: there the
constant [1, H, S, S] bias ADDed onto the attention scores is miscomputed (corr ~0.33 in fp16 and fp32,
llvmpipe, ai-edge-litert 2.3.0; the same add at rank 3 is right), so `convert_for_gpu` keeps the plain
(fallback, correct) file for T5 -- the test pins that too."""
import pytest
import torch

from litert_gpu_toolkit.convert import convert_for_gpu
from litert_gpu_toolkit.model_info import read_model_info
from litert_gpu_toolkit.rewrites.identical_inputs import patch_relative_position_bias

transformers = pytest.importorskip("transformers")


def _t5():
    torch.manual_seed(0)
    cfg = transformers.T5Config(vocab_size=50, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4)
    cfg._attn_implementation = "eager"
    model = transformers.T5EncoderModel(cfg).eval()
    with torch.no_grad():
        model.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.normal_(0, 1)

    class Enc(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids):
            return self.m(ids).last_hidden_state
    return Enc().eval()


IDS = torch.randint(0, 50, (1, 12), generator=torch.Generator().manual_seed(1))


def test_exact_in_torch_and_cached_per_length():
    model = _t5()
    ref = model(IDS)
    changes = patch_relative_position_bias(model, ((IDS,), {}))
    assert len(changes) == 1 and changes[0].exact
    attn = model.m.encoder.block[0].layer[0].SelfAttention
    assert (12, 12, 0) in attn.compute_bias.buckets
    assert torch.equal(model(IDS), ref)
    other = torch.randint(0, 50, (1, 7))
    assert torch.equal(model(other), _t5()(other))         # an unseen length: computed, same numbers


@pytest.mark.gpu
def test_constant_ops_gone_and_gpu_only_compile(gpu, tmp_path):
    plain = convert_for_gpu(_t5(), (IDS,), tmp_path / "plain.tflite", patches=False)
    assert "ABS" in read_model_info(plain.path).op_histogram()
    assert plain.verdict == "FALLBACK", plain.summary()
    fixed = convert_for_gpu(_t5(), (IDS,), tmp_path / "fixed.tflite", fallback=False)   # defaults, no fallback
    assert "patch_relative_position_bias" in fixed.kept
    ops = read_model_info(fixed.path).op_histogram()
    assert not {"ABS", "LOG", "MINIMUM"} & set(ops), ops
    assert fixed.report.residency["strict"], fixed.summary()             # GPU-only compile
    full = convert_for_gpu(_t5(), (IDS,), tmp_path / "auto.tflite")
    assert full.verdict in ("PASS", "FALLBACK") and full.report is not None
    if full.verdict == "FALLBACK":                # the GPU miscompute above: never worse than plain
        assert "patch_relative_position_bias" in full.dropped, full.summary()
    print("\n[llvmpipe]", fixed.verdict, fixed.report.summary, "| convert_for_gpu:", full.verdict)
