"""A public zoo of tiny `transformers` architectures, each run plain and through `convert_for_gpu`.

    python -m litert_gpu_toolkit zoo                  # the full zoo (slow: minutes per model)
    python -m litert_gpu_toolkit zoo --fast           # the CI subset
    python -m litert_gpu_toolkit zoo --only vit,bert  # some models; results merge into the file
    python -m litert_gpu_toolkit zoo --list           # the models, no conversion
    python -m litert_gpu_toolkit zoo --table-only     # regenerate README.md from results.json

Each model is built from a small seeded config (hidden ~32..64, 1..2 layers; nothing is downloaded:
HF_HUB_OFFLINE=1) and its weights are redrawn so the activations are O(1) (transformers' default
init leaves some conv models at ~1e-25, which would make any numeric check meaningless):

  * nn.Linear / nn.Conv*d / nn.ConvTranspose*d weight ~ N(0, 1 / fan_in) (variance-preserving),
    bias ~ N(0, 0.02^2);
  * nn.Embedding weight ~ N(0, 1);
  * any other parameter that the default init left all-zero or tiny (|w| < 1e-3 everywhere, e.g. layer
    scales, cls / mask tokens, position tables) ~ U(0.5, 1.0) when its name says scale / gamma / lambda,
    else N(0, 0.02^2) + 0 (tokens, position tables);
  * norms (LayerNorm, GroupNorm, BatchNorm) are set to weight 1, bias 0, running stats (0, 1)
    (some HF inits shrink BatchNorm weights, which left MobileViT at ~1e-7).

Each model runs in its own child process (a crash or a hang is that model's row, not the run's) and
is converted twice: plain (`convert_for_gpu(..., patches=False)`) and with the defaults
(`convert_for_gpu(...)`). Per row: verdict, residency, corr vs torch on the strict GPU at fp16,
rewrites kept, seconds. Results are written to `zoo/results.json` after every model (atomic write),
so an interrupted run resumes where it stopped (`--rerun` to redo finished rows), and `zoo/README.md`
is generated from that file. GPU numbers are from this machine's accelerator: on the project's CI
that is llvmpipe (software Vulkan), ai-edge-litert 2.3.0 -- a proxy, never a phone.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "zoo"
TIMEOUT_S = 1500.0


@dataclass(frozen=True)
class ZooModel:
    """One architecture: `build()` -> (module returning one tensor, example inputs tuple)."""
    name: str
    domain: str          # vision / audio / text / llm / multimodal
    build: Callable
    fast: bool = False   # in the CI subset


@dataclass
class RunSummary:
    """One conversion of one model (plain or with rewrites)."""
    verdict: str
    residency: str = ""
    corr_fp16: float | None = None        # strict GPU fp16 vs torch (None when it did not run GPU-only)
    corr_fp32: float | None = None        # strict GPU fp32 (enforce_f32) vs torch: tells fp16 precision from a GPU bug
    rewrites: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    note: str = ""
    seconds: float = 0.0
    attempts: list[str] = field(default_factory=list)   # convert_for_gpu's conversions tried


@dataclass
class ZooRow:
    name: str
    domain: str
    params: int = 0
    plain: RunSummary | None = None
    gpu: RunSummary | None = None         # convert_for_gpu with defaults
    error: str = ""                       # the row could not be produced (build failure, crash, timeout)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.gpu is not None and self.gpu.verdict == "PASS"


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
    import torch

    def make():
        shape = (1, bins, frames) if layout == "bf" else (1, frames, bins)
        return (torch.randn(*shape, generator=torch.Generator().manual_seed(1)),)
    return make


def _codes(n=16, codebook=64, books=2):
    import torch

    def make():
        return (torch.randint(0, codebook, (1, 1, books, n), generator=torch.Generator().manual_seed(1)),)
    return make


def _spectrogram(frames=16, bins=16):
    import torch

    def make():
        return (torch.randn(1, frames, bins, generator=torch.Generator().manual_seed(1)),)
    return make


_ZOO: tuple[ZooModel, ...] = (
    # vision
    ZooModel("vit", "vision", _hf("ViTModel", "ViTConfig", _image, **_VIT), fast=True),
    ZooModel("deit", "vision", _hf("DeiTModel", "DeiTConfig", _image, **_VIT)),
    ZooModel("beit", "vision", _hf("BeitModel", "BeitConfig", _image, use_mask_token=False, **_VIT)),
    ZooModel("dinov2", "vision", _hf("Dinov2Model", "Dinov2Config", _image, mlp_ratio=2,
                                     **{k: v for k, v in _VIT.items() if k != "intermediate_size"})),
    ZooModel("yolos", "vision", _hf("YolosModel", "YolosConfig", _image, num_detection_tokens=4,
                                    **{**_VIT, "image_size": [32, 32]})),
    ZooModel("swin", "vision", _hf("SwinModel", "SwinConfig", _image, image_size=32, patch_size=2, embed_dim=16,
                                   depths=[1, 1], num_heads=[2, 2], window_size=4)),
    ZooModel("convnext", "vision", _hf("ConvNextModel", "ConvNextConfig", _image, hidden_sizes=[16, 32],
                                       depths=[1, 1], num_stages=2)),
    ZooModel("convnextv2", "vision", _hf("ConvNextV2Model", "ConvNextV2Config", _image, hidden_sizes=[16, 32],
                                         depths=[1, 1], num_stages=2), fast=True),
    ZooModel("resnet", "vision", _hf("ResNetModel", "ResNetConfig", _image, embedding_size=16,
                                     hidden_sizes=[16, 32], depths=[1, 1])),
    ZooModel("regnet", "vision", _hf("RegNetModel", "RegNetConfig", _image, embedding_size=16,
                                     hidden_sizes=[16, 32], depths=[1, 1], groups_width=8)),
    ZooModel("mobilenet_v2", "vision", _hf("MobileNetV2Model", "MobileNetV2Config", _image, depth_multiplier=0.35,
                                           image_size=32)),
    ZooModel("mobilevit", "vision", _hf("MobileViTModel", "MobileViTConfig", lambda: _image(64), image_size=64,
                                        hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 16, 24, 32, 40, 48, 64],
                                        num_attention_heads=2)),
    ZooModel("segformer", "vision", _hf("SegformerModel", "SegformerConfig", _image, num_encoder_blocks=2,
                                        depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                                        patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2])),
    ZooModel("poolformer", "vision", _hf("PoolFormerModel", "PoolFormerConfig", _image, depths=[1, 1],
                                         hidden_sizes=[16, 32], num_encoder_blocks=2, patch_sizes=[7, 3],
                                         strides=[4, 2], padding=[2, 1])),
    ZooModel("dpt", "vision", _hf("DPTForDepthEstimation", "DPTConfig", _image, **{
        **_VIT, "num_hidden_layers": 4, "backbone_out_indices": [0, 1, 2, 3], "neck_hidden_sizes": [16, 16, 32, 32],
        "fusion_hidden_size": 32, "head_hidden_size": 16})),
    ZooModel("depth_anything", "vision", _hf(
        "DepthAnythingForDepthEstimation", "DepthAnythingConfig", lambda: _image(28),
        backbone_config={"model_type": "dinov2", "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 2,
                         "image_size": 28, "patch_size": 14, "out_indices": [1, 2, 3, 4], "mlp_ratio": 2,
                         "reshape_hidden_states": False},
        neck_hidden_sizes=[16, 16, 32, 32], fusion_hidden_size=16, head_hidden_size=16, reassemble_hidden_size=32,
        patch_size=14)),
    # audio
    ZooModel("whisper_encoder", "audio", _hf("WhisperEncoder", "WhisperConfig", _mel(32, 16),
                                             module="transformers.models.whisper.modeling_whisper",
                                             d_model=64, encoder_layers=2, encoder_attention_heads=4,
                                             encoder_ffn_dim=128, num_mel_bins=16, max_source_positions=16,
                                             vocab_size=100, decoder_layers=1, decoder_attention_heads=4)),
    ZooModel("wav2vec2", "audio", _hf("Wav2Vec2Model", "Wav2Vec2Config", _audio, hidden_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                      conv_dim=[32, 32], conv_stride=[5, 4], conv_kernel=[10, 4],
                                      num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                                      do_stable_layer_norm=False, feat_extract_norm="group")),
    ZooModel("hubert", "audio", _hf("HubertModel", "HubertConfig", _audio, hidden_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, intermediate_size=128, conv_dim=[32, 32],
                                    conv_stride=[5, 4], conv_kernel=[10, 4], num_conv_pos_embeddings=16,
                                    num_conv_pos_embedding_groups=4)),
    ZooModel("ast", "audio", _hf("ASTModel", "ASTConfig", _spectrogram(64, 32), max_length=64, num_mel_bins=32,
                                 patch_size=8, frequency_stride=8, time_stride=8, hidden_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=128)),
    ZooModel("encodec_decoder", "audio", _hf(
        "EncodecModel", "EncodecConfig", _codes(), call=lambda m, c: m.decode(c, [None])[0],
        num_filters=8, upsampling_ratios=[4, 2], hidden_size=32, codebook_size=64, codebook_dim=32,
        num_lstm_layers=1, target_bandwidths=[6.0], sampling_rate=2400)),
    ZooModel("speecht5_hifigan", "audio", _hf(
        "SpeechT5HifiGan", "SpeechT5HifiGanConfig", _spectrogram(16, 16), model_in_dim=16,
        upsample_initial_channel=32, upsample_rates=[4, 4], upsample_kernel_sizes=[8, 8],
        resblock_kernel_sizes=[3], resblock_dilation_sizes=[[1, 3]], normalize_before=False)),
    # text encoders
    ZooModel("bert", "text", _hf("BertModel", "BertConfig", _ids, **_TEXT), fast=True),
    ZooModel("roberta", "text", _hf("RobertaModel", "RobertaConfig", _ids, pad_token_id=1, **_TEXT)),
    ZooModel("albert", "text", _hf("AlbertModel", "AlbertConfig", _ids, embedding_size=32, **_TEXT)),
    ZooModel("distilbert", "text", _hf("DistilBertModel", "DistilBertConfig", _ids, vocab_size=100, dim=64,
                                       n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64)),
    ZooModel("electra", "text", _hf("ElectraModel", "ElectraConfig", _ids, embedding_size=32, **_TEXT)),
    ZooModel("t5_encoder", "text", _hf("T5EncoderModel", "T5Config", _ids, vocab_size=100, d_model=64, d_kv=16,
                                       d_ff=128, num_layers=2, num_heads=4)),
    # LLM decoders (one forward over a 16-token prompt, no cache)
    ZooModel("gpt2", "llm", _hf("GPT2Model", "GPT2Config", _ids, vocab_size=100, n_embd=64, n_layer=2, n_head=4,
                                n_positions=64), fast=True),
    ZooModel("llama", "llm", _hf("LlamaModel", "LlamaConfig", _ids, **_LLM)),
    ZooModel("qwen2", "llm", _hf("Qwen2Model", "Qwen2Config", _ids, **_LLM)),
    ZooModel("mistral", "llm", _hf("MistralModel", "MistralConfig", _ids, sliding_window=None, **_LLM)),
    ZooModel("gemma", "llm", _hf("GemmaModel", "GemmaConfig", _ids, **_LLM)),
    ZooModel("gemma2", "llm", _hf("Gemma2Model", "Gemma2Config", _ids, **_LLM)),
    ZooModel("phi3", "llm", _hf("Phi3Model", "Phi3Config", _ids, pad_token_id=0,
                                **{k: v for k, v in _LLM.items() if k != "head_dim"})),
    # multimodal towers
    ZooModel("clip_text", "multimodal", _hf("CLIPTextModel", "CLIPTextConfig", _ids, vocab_size=100, hidden_size=64,
                                            num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                            max_position_embeddings=64)),
    ZooModel("clip_vision", "multimodal", _hf("CLIPVisionModel", "CLIPVisionConfig", _image, **_VIT)),
    ZooModel("siglip_vision", "multimodal", _hf("SiglipVisionModel", "SiglipVisionConfig", _image, **_VIT)),
)

ZOO = {m.name: m for m in _ZOO}


# ------------------------------------------------------------------------------------ one model

def _summarise(result, seconds: float) -> RunSummary:
    report = result.report

    def worst(label):
        found = None
        for outs in (getattr(report, "signatures", None) or {}).values():
            for entry in outs.values():
                c = entry.get("vs_reference", {}).get(label, {}).get("corr")
                if c is not None:
                    found = c if found is None else min(found, c)
        return found
    corr, corr32 = worst("gpu_fp16"), worst("gpu_fp32")
    residency = ""
    if report is not None and getattr(report, "residency", None):
        residency = report.residency.get("line", "")
    note = ""
    if result.error:
        lines = [ln.strip() for ln in result.error.strip().splitlines() if ln.strip()]
        telling = [ln for ln in lines if "data-dependent" in ln or "guard" in ln.lower() or "Lowering not found" in ln]
        note = (telling[0] if telling else lines[0] if lines else "conversion failed")[:300]
    elif report is not None and not report.ok:
        note = report.summary[:300]
    kept = list(dict.fromkeys(c.rewrite for c in result.changes))
    dropped = list(getattr(result, "dropped", {}) or {})
    if report is not None and getattr(report, "unsupported_ops", None):
        reasons = "; ".join(f"{u['op']}: {u['reason']}" for u in report.unsupported_ops)
        note = f"{note} [{reasons}]"[:400]
    return RunSummary(result.verdict, residency, corr, corr32, kept, dropped, note, round(seconds, 1),
                      list(getattr(result, "attempts", []) or []))


def run_one(name: str, workdir: Path) -> ZooRow:
    """Build, convert plain and with rewrites, check; in this process."""
    from .convert import convert_for_gpu

    entry = ZOO[name]
    row = ZooRow(name, entry.domain)
    t0 = time.perf_counter()
    try:
        model, inputs = entry.build()
    except Exception as e:                                    # noqa: BLE001 - a row, not a crash
        row.error = f"build failed: {type(e).__name__}: {e}"[:400]
        return row
    row.params = sum(p.numel() for p in model.parameters())
    for label in ("plain", "gpu"):
        t = time.perf_counter()
        try:
            result = convert_for_gpu(model, inputs, workdir / f"{name}_{label}.tflite", patches=label == "gpu")
            summary = _summarise(result, time.perf_counter() - t)
        except Exception as e:                                # noqa: BLE001 - convert_for_gpu should not raise
            summary = RunSummary("RAISED", note=f"{type(e).__name__}: {e}"[:300],
                                 seconds=round(time.perf_counter() - t, 1))
        setattr(row, label, summary)
    row.seconds = round(time.perf_counter() - t0, 1)
    return row


def _known(cls, d: dict) -> dict:
    """Only the fields `cls` has (a results file from another version of this module still loads)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def _row_from_dict(d: dict) -> ZooRow:
    row = ZooRow(**_known(ZooRow, {k: v for k, v in d.items() if k not in ("plain", "gpu")}))
    row.plain = RunSummary(**_known(RunSummary, d["plain"])) if d.get("plain") else None
    row.gpu = RunSummary(**_known(RunSummary, d["gpu"])) if d.get("gpu") else None
    return row


def run_isolated(name: str, workdir: Path, timeout: float = TIMEOUT_S) -> ZooRow:
    """`run_one` in a child process: a crash or hang becomes this model's row."""
    out = workdir / f"{name}.row.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "litert_gpu_toolkit.zoo", "--_worker", name, "--_workdir", str(workdir)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ZooRow(name, ZOO[name].domain, error=f"timed out after {timeout:.0f} s",
                      seconds=round(time.perf_counter() - t0, 1))
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
        return ZooRow(name, ZOO[name].domain, error=f"worker exited {proc.returncode}: {tail[0][:300]}",
                      seconds=round(time.perf_counter() - t0, 1))
    return _row_from_dict(json.loads(out.read_text()))


# -------------------------------------------------------------------------------- results file

def load_results(path: Path) -> dict[str, ZooRow]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {d["name"]: _row_from_dict(d) for d in data.get("rows", [])}


def save_results(path: Path, rows: dict[str, ZooRow], environment: dict) -> None:
    """Atomic write (temp file + rename) so an interrupted run never leaves a half file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    order = [n for n in ZOO if n in rows] + [n for n in rows if n not in ZOO]
    data = {"environment": environment, "rows": [asdict(rows[n]) for n in order]}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".results.", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def environment() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    env = {}
    for pkg in ("ai-edge-litert", "litert-torch", "torch", "transformers"):
        try:
            env[pkg] = version(pkg)
        except PackageNotFoundError:
            env[pkg] = None
    try:
        from .runtime import probe_gpu

        probe = probe_gpu()
        env["gpu"] = probe.gpu.adapter
        env["gpu_is_software"] = probe.gpu.is_software
    except Exception as e:                                    # noqa: BLE001 - an environment note only
        env["gpu"] = f"probe failed: {type(e).__name__}"
    return env


def _fmt_corr(c) -> str:
    return "-" if c is None else f"{c:.6f}"


def _why(row: ZooRow) -> str:
    if row.error:
        return row.error
    g = row.gpu
    if g is None:
        return "not run"
    parts = []
    if g.verdict != "PASS" and g.note:
        parts.append(g.note)
    if g.verdict == "NUMERICS_FAIL" and g.corr_fp32 is not None:
        parts.append(f"fp32 GPU corr {g.corr_fp32:.6f} ("
                     + ("fp16 precision" if g.corr_fp32 >= 0.999 else "wrong in fp32 too: a GPU miscompute") + ")")
    if g.dropped:
        parts.append(f"dropped (worse than without): {', '.join(g.dropped)}")
    return "; ".join(parts)


def render_table(rows: dict[str, ZooRow], env: dict) -> str:
    """The README: generated from results.json, never written by hand."""
    done = [r for r in rows.values()]
    passed = [r for r in done if r.passed]
    plain_passed = [r for r in done if r.plain is not None and r.plain.verdict == "PASS"]
    gpu = env.get("gpu") or "unknown GPU"
    label = (f"{str(gpu).split(' (')[0]} (software Vulkan), ai-edge-litert {env.get('ai-edge-litert')}"
             if env.get("gpu_is_software") else f"{gpu}, ai-edge-litert {env.get('ai-edge-litert')}")
    lines = [
        "# Transformers zoo: `convert_for_gpu` on architectures it was not written for",
        "",
        "Generated by `python -m litert_gpu_toolkit zoo --table-only` from `results.json` "
        "(produced by `python -m litert_gpu_toolkit zoo`); do not edit by hand.",
        "",
        f"Device: {label} -- a proxy for a phone GPU, not one. "
        f"litert-torch {env.get('litert-torch')}, torch {env.get('torch')}, transformers {env.get('transformers')}.",
        "",
        f"**convert_for_gpu: {len(passed)}/{len(done)} PASS** (strict GPU-only, fp16 and fp32 GPU outputs "
        f"corr >= 0.999 vs torch); plain conversion: {len(plain_passed)}/{len(done)} PASS.",
        "",
        "Models: tiny seeded configs (hidden 16..64, 1..4 layers) with weights redrawn so activations are O(1) "
        "(see the docstring of `utilities/litert_gpu_toolkit/zoo.py`); text and LLM models take 16 token ids "
        "(no attention mask), vision models one 32x32 image (MobileViT 64x64, Depth-Anything 28x28).",
        "",
        "Columns: *plain* = `convert_for_gpu(..., patches=False)`; *convert_for_gpu* = the defaults (rewrites, "
        "with the never-worse-than-plain fallback); *corr fp16* = Pearson correlation of the strict-GPU fp16 output "
        "with torch (`-` when the file did not run GPU-only); *seconds* = both conversions and checks of the row, "
        "on a shared 2-core machine.",
        "",
        "Reproduce: `python -m litert_gpu_toolkit zoo` (resumes; `--only NAME --rerun` redoes rows; `--fast` is "
        "the CI subset; `--table-only` regenerates this file).",
        "",
        "| model | domain | params | plain | plain corr fp16 | convert_for_gpu | residency | corr fp16 | rewrites kept "
        "| seconds | why not PASS |",
        "|---|---|---:|---|---:|---|---|---:|---|---:|---|",
    ]
    for r in done:
        p, g = r.plain, r.gpu
        res = (g.residency if g else "").replace("GPU residency: ", "").replace("|", "/")
        why = _why(r).replace("|", "/").replace("\n", " ")
        lines.append(
            f"| {r.name} | {r.domain} | {r.params:,} | {p.verdict if p else '-'} | {_fmt_corr(p.corr_fp16 if p else None)} "
            f"| {g.verdict if g else '-'} | {res or '-'} | {_fmt_corr(g.corr_fp16 if g else None)} "
            f"| {', '.join(g.rewrites) if g and g.rewrites else '-'} | {r.seconds:.0f} | {why[:240]} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ CLI

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for results.json and README.md "
                                                                  "(default: the repository's zoo/)")
    p.add_argument("--fast", action="store_true", help="only the CI subset: " + ", ".join(
        m.name for m in _ZOO if m.fast))
    p.add_argument("--only", default="", help="comma-separated model names (see --list)")
    p.add_argument("--rerun", action="store_true", help="redo models already in results.json (default: resume)")
    p.add_argument("--list", action="store_true", help="list the models and exit")
    p.add_argument("--table-only", action="store_true", help="regenerate README.md from results.json and exit")
    p.add_argument("--merge", type=Path, metavar="DIR", help="copy the rows of DIR/results.json (a parallel run, "
                   "e.g. --only X --out DIR) into this results.json, regenerate README.md, and exit")
    p.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per model (default %(default)s)")
    p.add_argument("--_worker", help=argparse.SUPPRESS)
    p.add_argument("--_workdir", type=Path, help=argparse.SUPPRESS)


def _select(args) -> list[str]:
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in ZOO]
        if unknown:
            raise SystemExit(f"unknown zoo model(s): {', '.join(unknown)}; known: {', '.join(ZOO)}")
        return names
    return [m.name for m in _ZOO if m.fast or not args.fast]


def run(args: argparse.Namespace) -> int:
    if args._worker:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        row = run_one(args._worker, args._workdir)
        (args._workdir / f"{args._worker}.row.json").write_text(json.dumps(asdict(row)))
        return 0
    if args.list:
        for m in _ZOO:
            print(f"{m.name:18s} {m.domain:10s}{' (fast)' if m.fast else ''}")
        return 0
    results = args.out / "results.json"
    rows = load_results(results)
    env = json.loads(results.read_text()).get("environment", {}) if results.exists() else {}
    if args.merge:
        other = load_results(args.merge / "results.json")
        if not other:
            print(f"no results in {args.merge / 'results.json'}", file=sys.stderr)
            return 2
        rows.update(other)
        save_results(results, rows, env or json.loads((args.merge / "results.json").read_text())["environment"])
        (args.out / "README.md").write_text(render_table(rows, env))
        print(f"merged {', '.join(other)} into {results}")
        return 0
    if args.table_only:
        if not rows:
            print(f"no results in {results}; run the zoo first", file=sys.stderr)
            return 2
        (args.out / "README.md").write_text(render_table(rows, env))
        print(f"wrote {args.out / 'README.md'}")
        return 0
    names = _select(args)
    env = environment()
    with tempfile.TemporaryDirectory(prefix="zoo_") as tmp:
        for i, name in enumerate(names, 1):
            if name in rows and not args.rerun and not rows[name].error:
                print(f"[{i}/{len(names)}] {name}: done before ({rows[name].gpu.verdict if rows[name].gpu else '-'})")
                continue
            print(f"[{i}/{len(names)}] {name} ...", flush=True)
            row = run_isolated(name, Path(tmp), args.timeout)
            rows[name] = row
            save_results(results, rows, env)
            (args.out / "README.md").write_text(render_table(rows, env))
            g = row.gpu
            print(f"    plain {row.plain.verdict if row.plain else '-'}  convert_for_gpu {g.verdict if g else '-'} "
                  f"corr {_fmt_corr(g.corr_fp16 if g else None)}  {row.seconds:.0f}s  {_why(row)[:200]}", flush=True)
    selected = [rows[n] for n in names if n in rows]
    passed = sum(r.passed for r in selected)
    print(f"zoo: {passed}/{len(selected)} PASS through convert_for_gpu -> {results}")
    return 0 if passed == len(selected) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m litert_gpu_toolkit zoo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
