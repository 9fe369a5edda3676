"""The tasks of `export`: which Hugging Face class loads a model for each, what it takes, what it returns.

`TASKS` is plain data (no torch import), so `export --help` lists the tasks instantly. `build_graphs` loads the
model (never with remote code) and returns one `Graph` per file to write: a module that takes the task's
inputs by keyword at the fixed shapes the flags give, and returns a dict of the outputs a user reads (named, so
the converted file's outputs carry the same names). text-generation returns two graphs, prefill and decode
(`export_generation`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..runtime.buckets import bucket_name

# ModelOutput fields a deployed graph never returns: per-layer stacks and caches (each is huge and unused)
SKIPPED_FIELDS = ("hidden_states", "attentions", "cross_attentions", "encoder_hidden_states",
                  "encoder_attentions", "decoder_hidden_states", "decoder_attentions", "reshaped_hidden_states",
                  "past_key_values", "extract_features")
SAMPLE_TEXT = "A short sentence to trace the graph with."
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "spiece.model", "sentencepiece.bpe.model", "vocab.json")


class ExportError(RuntimeError):
    """A model or flag that cannot make the asked graph; the message is the one line the user reads."""


@dataclass(frozen=True)
class Task:
    name: str
    auto_class: str          # the transformers Auto class that loads the model for this task
    inputs: str              # "text", "image", "audio" or "tokens" (text-generation)
    help: str


TASKS: dict[str, Task] = {t.name: t for t in (
    Task("feature-extraction", "AutoModel", "text", "text encoder -> last_hidden_state (and pooler_output)"),
    Task("sentence-embedding", "AutoModel", "text",
         "text encoder + the pooling (and normalisation) of a sentence-transformers folder -> embedding"),
    Task("fill-mask", "AutoModelForMaskedLM", "text", "masked language model -> logits"),
    Task("text-classification", "AutoModelForSequenceClassification", "text", "sequence classifier -> logits"),
    Task("image-classification", "AutoModelForImageClassification", "image", "image classifier -> logits"),
    Task("image-feature-extraction", "AutoModel", "image", "vision encoder -> last_hidden_state (and pooler)"),
    Task("depth-estimation", "AutoModelForDepthEstimation", "image", "depth model -> predicted_depth"),
    Task("semantic-segmentation", "AutoModelForSemanticSegmentation", "image", "segmenter -> logits"),
    Task("automatic-speech-recognition", "AutoModelForCTC", "audio",
         "speech encoder: CTC logits (wav2vec2 family) or the encoder's last_hidden_state (Whisper family)"),
    Task("audio-classification", "AutoModelForAudioClassification", "audio", "audio classifier -> logits"),
    Task("text-generation", "AutoModelForCausalLM", "tokens",
         "causal LM -> two graphs: prefill (prompt -> logits + KV cache) and decode (one token + KV cache)"),
)}


@dataclass
class Graph:
    """One file to write: `module(**inputs)` returns a dict of named tensors."""
    name: str
    module: Any
    inputs: dict
    notes: list
    signatures: dict | None = None    # shape buckets: signature name -> inputs (one file, weights shared)


@dataclass
class Shapes:
    seq_len: int = 128
    image_size: int | None = None
    audio_seconds: float = 1.0
    cache_len: int = 256
    seed: int = 0
    buckets: tuple = ()               # text: several sequence lengths, one signature each (runtime/buckets.py)
    image_buckets: tuple = ()         # images: several square sides, img_<side>
    audio_buckets: tuple = ()         # audio: several clip lengths in seconds, audio_<ms>ms


def task_table() -> str:
    width = max(map(len, TASKS))
    return "\n".join(f"  {name:<{width}}  {task.help}" for name, task in TASKS.items())


def user_outputs(out) -> dict:
    """The top-level tensors of a model output by name (a ModelOutput's fields, a tuple's items as output_i),
    leaving out SKIPPED_FIELDS."""
    import torch

    if isinstance(out, torch.Tensor):
        return {"output": out}
    items = out.items() if hasattr(out, "items") else ((f"output_{i}", v) for i, v in enumerate(out))
    found = {k: v for k, v in items if k not in SKIPPED_FIELDS and isinstance(v, torch.Tensor)}
    if not found:
        raise ExportError(f"the model's output ({type(out).__name__}) holds no tensor to export")
    return found


def additive_mask(attention_mask):
    """[B, S] of 1 / 0 -> the [B, 1, 1, S] additive mask, built arithmetically: Hugging Face's own construction
    lowers to GATHER_ND / BROADCAST_TO, which the GPU rejects. -MASK_FILL is finite in fp16 and
    exp(-MASK_FILL + score) is 0 in fp32, so padded keys get no weight, as with HF's mask."""
    import torch

    from ..rewrites.fp16_overflow import MASK_FILL

    return ((1.0 - attention_mask.to(torch.float32)) * -MASK_FILL)[:, None, None, :]


def _with_additive_mask(model, **inputs):
    return model(**{**inputs, "attention_mask": additive_mask(inputs["attention_mask"])})


def text_call(model, inputs: dict, notes: list) -> Callable | None:
    """`_with_additive_mask` when the model accepts a ready 4-D mask and gives the same outputs with it (checked
    in torch on the example inputs), else None: the model then builds its own mask (the rewrites handle it)."""
    import torch

    try:
        with torch.no_grad():
            own = user_outputs(model(**inputs))
            ready = user_outputs(_with_additive_mask(model, **inputs))
        same = own.keys() == ready.keys() and all(
            torch.allclose(own[k], ready[k], rtol=1e-4, atol=1e-5) for k in own)
    except Exception as exc:                      # noqa: BLE001 - any refusal of a 4-D mask means: not this way
        notes.append(f"attention mask: the model's own (a ready 4-D mask raised {type(exc).__name__})")
        return None
    if not same:
        notes.append("attention mask: the model's own (a ready 4-D mask changed its outputs)")
        return None
    notes.append("attention mask: additive [1, 1, 1, S], built in the graph (same outputs in torch)")
    return _with_additive_mask


def named_outputs(model, call: Callable | None = None):
    """`model` wrapped so that it is called by keyword and returns `user_outputs` of its output."""
    from torch import nn

    class Outputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, **inputs):
            return user_outputs(call(self.model, **inputs) if call else self.model(**inputs))

    return Outputs().eval()


def load_config(model_dir: Path):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(model_dir, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as exc:
        raise ExportError(f"{model_dir} has no usable config.json: {exc}") from None


def load_model(task: Task, model_dir: Path, config):
    import torch
    import transformers

    auto = getattr(transformers, task.auto_class)
    if task.name == "automatic-speech-recognition" and getattr(config, "is_encoder_decoder", False):
        auto = transformers.AutoModelForSpeechSeq2Seq          # Whisper-like: the encoder is exported
    try:
        model = auto.from_pretrained(model_dir, config=config, trust_remote_code=False, dtype=torch.float32,
                                     attn_implementation="eager")
    except ValueError as exc:                       # an architecture the Auto class has no entry for
        raise ExportError(f"{config.model_type!r} cannot be loaded for {task.name} "
                          f"(transformers.{auto.__name__}): {str(exc).splitlines()[0]}") from None
    except OSError as exc:                          # no weights file, unreadable folder
        raise ExportError(f"cannot load the weights in {model_dir}: {str(exc).splitlines()[0]}") from None
    return model.eval()


def text_inputs(model_dir: Path, config, seq_len: int, seed: int) -> tuple[dict, str]:
    """input_ids and attention_mask [1, seq_len] int32: the tokenizer's encoding of SAMPLE_TEXT padded to
    seq_len when the folder has a tokenizer, else seeded ids over 3/4 of the positions (the rest padding)."""
    import torch

    # transformers makes an empty-vocabulary tokenizer from a bare config: only a folder's own files count
    if any((model_dir / f).is_file() for f in TOKENIZER_FILES):
        try:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
            enc = tok([SAMPLE_TEXT], padding="max_length", max_length=seq_len, truncation=True,
                      return_tensors="pt")
            if int(enc["input_ids"].max()) < config.vocab_size:
                return {k: enc[k].to(torch.int32) for k in ("input_ids", "attention_mask")}, "the folder's tokenizer"
        except (OSError, ValueError, TypeError, KeyError):
            pass
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, config.vocab_size, (1, seq_len), generator=g, dtype=torch.int32)
    mask = torch.zeros(1, seq_len, dtype=torch.int32)
    mask[:, : max(1, seq_len * 3 // 4)] = 1
    return {"input_ids": ids * mask, "attention_mask": mask}, "seeded token ids (no tokenizer in the folder)"


def image_inputs(model, config, size: int | None, seed: int) -> dict:
    import torch

    if size is None:
        size = getattr(config, "image_size", None)
        size = size if isinstance(size, int) else (size[0] if isinstance(size, (list, tuple)) else 224)
    channels = getattr(config, "num_channels", 3)
    g = torch.Generator().manual_seed(seed)
    return {model.main_input_name: torch.randn(1, channels, size, size, generator=g)}


def audio_inputs(model_dir: Path, model, config, seconds: float, seed: int) -> tuple[dict, list]:
    """input_values [1, samples] at the feature extractor's rate (16 kHz without one); for a model that reads
    log-mel features, input_features: [1, mel bins, frames] for a Whisper-like encoder (at the length its position
    table fixes), [1, frames, feature size] for a W2V-BERT-like one (frames at 50 per second, two 10 ms mel frames
    stacked per step, as its feature extractor writes them)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    if model.main_input_name == "input_features":
        if getattr(config, "num_mel_bins", None) and getattr(config, "max_source_positions", None):
            frames = 2 * config.max_source_positions                # the conv stem halves the frames
            notes = [f"input_features fixed at {frames} frames by max_source_positions (--audio-seconds not used)"]
            return {"input_features": torch.randn(1, config.num_mel_bins, frames, generator=g)}, notes
        size = getattr(config, "feature_projection_input_dim", None)
        if size:
            frames = max(1, int(round(seconds * 50)))
            notes = [f"input_features [1, {frames}, {size}]: {seconds} s of stacked log-mel frames (50 per second)"]
            return {"input_features": torch.randn(1, frames, size, generator=g)}, notes
        found = _mel_features(model_dir, model, config, seconds, g)
        if found is not None:
            return found
        raise ExportError(f"{type(model).__name__} reads input_features, but its config ({type(config).__name__}) "
                          "names neither num_mel_bins + max_source_positions (Whisper's layout) nor "
                          "feature_projection_input_dim (W2V-BERT's), and no num_mel_bins in it or its sub-configs "
                          "gave a layout the model runs: the feature layout is unknown. Call convert_for_gpu with "
                          "an example input of the shape its feature extractor writes")
    rate = 16000
    try:
        rate = json.loads((model_dir / "preprocessor_config.json").read_text()).get("sampling_rate", rate)
    except (OSError, ValueError):
        pass
    samples = int(round(seconds * rate))
    return {"input_values": 0.1 * torch.randn(1, samples, generator=g)}, [f"{samples} samples at {rate} Hz"]


def _sub_configs(config) -> list:
    """The config and the configs nested in it (a CTC head's encoder_config, a model's audio_config), depth first."""
    out = [config]
    for value in vars(config).values():
        if hasattr(value, "to_dict") and hasattr(value, "model_type") and value is not config:
            out += _sub_configs(value)
    return out


def _mel_features(model_dir: Path, model, config, seconds: float, g) -> tuple[dict, list] | None:
    """input_features for an encoder whose config (or a sub-config) has num_mel_bins but no position table that
    fixes the length (a conformer CTC encoder): frames at the feature extractor's hop (10 ms without one), laid out
    [1, frames, mel] or [1, mel, frames] -- whichever the model runs on (tried in torch, that order); None if it
    runs on neither."""
    import torch

    mel = next((c.num_mel_bins for c in _sub_configs(config) if getattr(c, "num_mel_bins", None)), None)
    if not mel:
        return None
    rate, hop = 16000, 160
    try:
        pre = json.loads((model_dir / "preprocessor_config.json").read_text())
        rate, hop = pre.get("sampling_rate", rate), pre.get("hop_length", hop)
    except (OSError, ValueError):
        pass
    frames = max(1, int(round(seconds * rate / hop)))
    for layout, shape in (("frames, mel", (1, frames, mel)), ("mel, frames", (1, mel, frames))):
        x = torch.randn(*shape, generator=g)
        try:
            with torch.no_grad():
                model(input_features=x)
        except Exception:                   # noqa: BLE001 - the other layout is tried; none: the caller says why
            continue
        return {"input_features": x}, [f"input_features [1, {layout}] = {list(shape)}: {seconds} s at "
                                       f"{rate / hop:g} frames per second (num_mel_bins {mel}; the layout the "
                                       "model runs on)"]
    return None


def _sentence_head(model_dir: Path) -> tuple[str, bool]:
    """(pooling mode, normalise) as a sentence-transformers folder declares them; mean and no normalisation
    when the folder has no such files."""
    mode, normalise = "mean", False
    try:
        modules = json.loads((model_dir / "modules.json").read_text())
    except (OSError, ValueError):
        return mode, normalise
    for m in modules:
        kind = str(m.get("type", ""))
        if kind.endswith("Normalize"):
            normalise = True
        if kind.endswith("Pooling"):
            try:
                pooling = json.loads((model_dir / m.get("path", "") / "config.json").read_text())
            except (OSError, ValueError):
                continue
            modes = [k for k in ("cls_token", "mean_tokens", "max_tokens") if pooling.get(f"pooling_mode_{k}")]
            if len(modes) != 1:
                raise ExportError(f"pooling {modes} in {model_dir}: only one of cls / mean / max is supported")
            mode = modes[0].split("_")[0]
    return mode, normalise


def sentence_embedding(model, mode: str, normalise: bool, ready_mask: bool):
    """The encoder + pooling over the attention mask (+ L2 normalisation): sentence-transformers' Pooling and
    Normalize, with the toolkit's l2_normalize (no MUL(x, x), which phone delegates decline)."""
    import torch

    from ..rewrites.identical_or_constant_inputs import l2_normalize

    class SentenceEmbedding(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            mask = additive_mask(attention_mask) if ready_mask else attention_mask
            hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
            weights = attention_mask.to(hidden.dtype).unsqueeze(-1)
            if mode == "cls":
                pooled = hidden[:, 0]
            elif mode == "max":
                pooled = (hidden + (weights - 1.0) * 1e4).amax(1)
            else:
                pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return {"embedding": l2_normalize(pooled, dim=1) if normalise else pooled}

    return SentenceEmbedding().eval()


def build_graphs(task_name: str, model_dir: Path, shapes: Shapes) -> list[Graph]:
    """Load the model in `model_dir` for `task_name` and wrap it into the graphs to convert."""
    task = TASKS[task_name]
    config = load_config(model_dir)
    model = load_model(task, model_dir, config)
    if shapes.buckets and task.inputs != "text":
        raise ExportError(f"--seq-len with several lengths (shape buckets) is for text tasks; {task_name} takes one"
                          + (" prefill length" if task.inputs == "tokens" else " input shape"))
    for flag, given, kind in (("--image-size", shapes.image_buckets, "image"),
                              ("--audio-seconds", shapes.audio_buckets, "audio")):
        if given and task.inputs != kind:
            raise ExportError(f"{flag} with several sizes (shape buckets) is for {kind} tasks; {task_name} is not one")
    if task.inputs == "tokens":
        from .generation import generation_graphs

        try:
            return [Graph(*g) for g in generation_graphs(model, config, shapes.seq_len, shapes.cache_len, shapes.seed)]
        except ValueError as exc:
            raise ExportError(str(exc)) from None
    notes: list[str] = []
    if task.inputs == "text":
        inputs, source = text_inputs(model_dir, config, shapes.seq_len, shapes.seed)
        notes.append(f"example text: {source}, padded to {shapes.seq_len}")
        signatures = None
        if shapes.buckets:
            signatures = {bucket_name("seq", n): text_inputs(model_dir, config, n, shapes.seed)[0]
                          for n in shapes.buckets}
            notes.append(f"shape buckets: {', '.join(signatures)} (one signature per length, weights shared)")
        call = text_call(model, inputs, notes)
        if task.name == "sentence-embedding":
            mode, normalise = _sentence_head(model_dir)
            notes.append(f"pooling: {mode}{', L2-normalised' if normalise else ''}")
            module = sentence_embedding(model, mode, normalise, call is not None)
        else:
            module = named_outputs(model, call)
        return [Graph("model", module, inputs, notes, signatures)]
    signatures = None
    if task.inputs == "image":
        inputs = image_inputs(model, config, shapes.image_size, shapes.seed)
        if shapes.image_buckets:
            signatures = {bucket_name("img", n): image_inputs(model, config, n, shapes.seed)
                          for n in shapes.image_buckets}
    else:
        inputs, notes = audio_inputs(model_dir, model, config, shapes.audio_seconds, shapes.seed)
        if shapes.audio_buckets:
            if "input_features" in inputs and getattr(config, "max_source_positions", None):
                raise ExportError("--audio-seconds with several lengths: this encoder's input length is fixed by "
                                  "its position table (max_source_positions); it takes one shape")
            signatures = {bucket_name("audio", s): audio_inputs(model_dir, model, config, s, shapes.seed)[0]
                          for s in shapes.audio_buckets}
    if signatures:
        notes.append(f"shape buckets: {', '.join(signatures)} (one signature per size, weights shared; padding "
                     "is not masked -- see runtime/buckets.py)")
    if task.name == "automatic-speech-recognition" and getattr(config, "is_encoder_decoder", False):
        model = model.get_encoder()
        notes.append("encoder only (the decoder runs on the host or as its own graph)")
    return [Graph("model", named_outputs(model), inputs, notes, signatures)]
