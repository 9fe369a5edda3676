"""Hugging Face models called the way users call them, through `convert_for_gpu` with its defaults.

Text encoders with a padding attention_mask (batch 2, one row padded) returning every output users read,
CLIP's text pooler (the hidden state at each row's EOS), causal LMs at head / kv-head / head_dim counts
other than one lucky config, and a decode step that builds a DynamicCache from tensors. Each must PASS:
strict GPU-only, every output within tolerance of torch (software GPU: llvmpipe, ai-edge-litert 2.3.0).
Tiny configs (tests/hf_tiny.py), never downloaded. The first case of each family runs in the GPU lane;
the rest are marked slow.
"""
import pytest
import torch

pytest.importorskip("transformers")

import hf_tiny                                                            # tests/hf_tiny.py
from litert_gpu_toolkit import convert_for_gpu
from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.functional import GpuRewriteWrapper
from litert_gpu_toolkit.rewrites.registry import functional_selection

WALL_OPS = {"GATHER", "GATHER_ND", "BROADCAST_TO", "CUMSUM"}
slow = pytest.mark.sweep        # the zoo (zoo/run.py) converts these architectures too; not in CI

ENCODER_CASES = [("bert", "eager")] + [pytest.param(a, "eager", marks=slow) for a in hf_tiny.ENCODERS if a != "bert"] \
    + [pytest.param(a, "sdpa", marks=slow) for a in ("bert", "distilbert", "roberta")]
LM_CASES = [("llama", dict(hidden=96, heads=6, kv_heads=3, head_dim=16))] + [
    pytest.param(arch, dims, marks=slow) for arch, dims in (
        ("llama", dict(hidden=64, heads=4, kv_heads=2, head_dim=16)),
        ("llama", dict(hidden=96, heads=6, kv_heads=1, head_dim=16)),
        ("qwen2", dict(hidden=96, heads=6, kv_heads=3, head_dim=16)),
        ("mistral", dict(hidden=128, heads=4, kv_heads=2, head_dim=32)),
        ("gemma", dict(hidden=96, heads=6, kv_heads=1, head_dim=32)),
        ("phi3", dict(hidden=96, heads=6, kv_heads=3)),
        ("llama", dict(hidden=96, heads=6, kv_heads=3, head_dim=16, impl="sdpa")),
    )]


def _build(kind, *a):
    if kind == "encoder":
        return hf_tiny.text_encoder(*a)
    if kind == "clip":
        return hf_tiny.clip_text(*a)
    if kind == "lm":
        return hf_tiny.lm_logits(a[0], **a[1])
    return hf_tiny.lm_decode_step(a[0], **a[1])


TORCH_CASES = [("encoder", a, "eager") for a in hf_tiny.ENCODERS] + [("clip", False), ("clip", True)] + [
    ("lm", arch, dims) for arch, dims in (("llama", dict()), ("qwen2", dict(kv_heads=1)), ("gemma", dict(head_dim=32)),
                                         ("phi3", dict(kv_heads=2)))] + [("decode", "llama", dict())]


@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: "-".join(str(x) for x in c[:2]))
def test_default_rewrites_are_exact_in_torch(case):
    """What convert_for_gpu traces (the model inside GpuRewriteWrapper, default rewrites) equals the model."""
    model, args = _build(*case)
    wrapped = GpuRewriteWrapper(model, include=functional_selection())
    with torch.no_grad():
        want, got = model(*args), wrapped(*args)
    want, got = (want if isinstance(want, tuple) else (want,)), (got if isinstance(got, tuple) else (got,))
    assert len(want) == len(got) and all(torch.equal(w, g) for w, g in zip(want, got))


def _passes(model, args, path, expect_rewrites=()):
    result = convert_for_gpu(model, args, path)
    print(f"\n[llvmpipe, ai-edge-litert 2.3.0] {path.stem}: {result.verdict}: "
          f"{result.report.summary if result.report is not None else result.error}")
    assert result.ok and result.verdict == "PASS", result.summary()
    with torch.no_grad():
        out = model(*args)
    assert len(result.signatures["serving_default"]["outputs"]) == (len(out) if isinstance(out, tuple) else 1)
    ops = read_model_info(result.path).op_histogram()
    assert not WALL_OPS & set(ops), ops
    assert set(expect_rewrites) <= set(result.kept), result.summary()
    return result


@pytest.mark.gpu
@pytest.mark.parametrize("arch,impl", ENCODER_CASES)
def test_text_encoder_with_padding_mask_passes(gpu, tmp_path, arch, impl):
    model, args = hf_tiny.text_encoder(arch, impl)
    _passes(model, args, tmp_path / f"{arch}_{impl}.tflite",
            ["patch_index_arange"] + (["patch_mask_fill_exact"] if impl == "eager" else []))


@pytest.mark.gpu
@slow
def test_text_encoder_batch_of_one_with_padding_mask(gpu, tmp_path):
    model, (ids, mask, types) = hf_tiny.text_encoder("bert")
    _passes(model, (ids[:1], mask[1:], types[:1]), tmp_path / "bert_b1.tflite")


@pytest.mark.gpu
@pytest.mark.parametrize("with_projection", [False, pytest.param(True, marks=slow)])
def test_clip_text_pooler_passes(gpu, tmp_path, with_projection):
    model, args = hf_tiny.clip_text(with_projection)
    _passes(model, args, tmp_path / f"clip_{with_projection}.tflite", ["patch_index_arange"])


@pytest.mark.gpu
@pytest.mark.parametrize("arch,dims", LM_CASES)
def test_causal_lm_logits_pass(gpu, tmp_path, arch, dims):
    model, args = hf_tiny.lm_logits(arch, **dims)
    _passes(model, args, tmp_path / f"{arch}.tflite", ["patch_fold_index_math"])


@pytest.mark.gpu
@slow
def test_decode_step_with_a_dynamic_cache_passes(gpu, tmp_path):
    model, args = hf_tiny.lm_decode_step("llama")
    _passes(model, args, tmp_path / "decode.tflite")
