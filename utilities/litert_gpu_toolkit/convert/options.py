"""`ConvertOptions`: everything `convert_for_gpu` can be told, as one value that is checked once and passed whole.

    from litert_gpu_toolkit import ConvertOptions, convert_for_gpu
    opts = ConvertOptions(exclude=("patch_safe_layernorm",), diagnose_budget_s=0)
    result = convert_for_gpu(model, (x,), "model.tflite", opts)

A recipe builds one from its command line and hands the same value to every graph it exports; the keyword
spelling (`convert_for_gpu(..., exclude=[...])`) builds the same value, so both are one code path.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..legalize import NAME as _LEGALIZE  # noqa: F401 - declares the graph pass's name among the rewrites
from ..rewrites.registry import check_names

DEFAULT_BUDGET_S = 300.0          # seconds a wrong-numbers file may spend in bisect + repair


@dataclass(frozen=True)
class ConvertOptions:
    """How `convert_for_gpu` rewrites, converts, checks and repairs.

    patches: apply the toolkit's rewrites (module patches and, while litert-torch traces, functional ones).
    include: opt-in rewrites added to the defaults; only: nothing but these; exclude: never these.
        Unknown names raise ValueError when the value is made, naming the known ones.
    approximate: allow rewrites labelled as approximations (off: every rewrite applied is exact).
    check: run the strict GPU-only check against the torch outputs; check_kwargs go to the checker.
    inplace: rewrite the caller's model itself instead of a deep copy (saves memory; turns off `fallback`).
    fallback: never return a result worse than plain conversion (drops rewrites that made it worse).
    max_tries: conversions the fallback may spend dropping rewrites one at a time.
    diagnose_budget_s: seconds to bisect and repair a file with wrong numbers (0 or None: off).
    verbose: show the converter's own output live (None: the LITERT_GPU_VERBOSE environment variable).
    signature_name: the name of the single signature (multi-signature files name theirs in `signatures`).
    convert_kwargs: passed to litert_torch's convert (e.g. dynamic_shapes).
    weights: "fp32" (default), "fp16", "int8" or "int4": after the float file PASSes, its weights are quantized
        (`quantize.quantize_for_gpu`: LiteRT's quantizer, each try checked strictly GPU-only against the torch
        outputs; a type or layer that fails stays float). weights_min_corr: the corr floor vs torch for that
        (None: the mode's default, `quantize.DEFAULT_MIN_CORR`).
    """
    patches: bool = True
    include: tuple[str, ...] | None = None
    only: tuple[str, ...] | None = None
    exclude: tuple[str, ...] | None = None
    approximate: bool = False
    check: bool = True
    check_kwargs: Mapping[str, Any] = field(default_factory=dict)
    inplace: bool = False
    fallback: bool = True
    max_tries: int = 6
    diagnose_budget_s: float | None = DEFAULT_BUDGET_S
    verbose: bool | None = None
    signature_name: str = "serving_default"
    convert_kwargs: Mapping[str, Any] = field(default_factory=dict)
    weights: str = "fp32"
    weights_min_corr: float | None = None

    def __post_init__(self):
        for what in ("include", "only", "exclude"):
            names = getattr(self, what)
            check_names(names, what)           # also refuses a bare string where a list belongs
            object.__setattr__(self, what, None if names is None else tuple(names))
        if not isinstance(self.max_tries, int) or isinstance(self.max_tries, bool) or self.max_tries < 1:
            raise ValueError(f"max_tries must be a positive integer, not {self.max_tries!r}")
        if self.diagnose_budget_s is not None and float(self.diagnose_budget_s) < 0:
            raise ValueError(f"diagnose_budget_s must be >= 0 seconds, not {self.diagnose_budget_s!r}")
        from ..quantize.plan import check_mode

        check_mode(self.weights)                  # ValueError naming the modes
        if self.weights_min_corr is not None and not 0 < float(self.weights_min_corr) <= 1:
            raise ValueError(f"weights_min_corr must be in (0, 1], not {self.weights_min_corr!r}")
        object.__setattr__(self, "check_kwargs", dict(self.check_kwargs or {}))
        object.__setattr__(self, "convert_kwargs", dict(self.convert_kwargs or {}))

    @property
    def falls_back(self) -> bool:
        """Whether a failing rewritten file is weighed against plain conversion (needs the check, and a copy)."""
        return self.fallback and self.check and not self.inplace

    def with_overrides(self, **overrides) -> "ConvertOptions":
        """A copy with these fields changed; a key that is no field is a litert-torch keyword (convert_kwargs)."""
        fields = {f.name for f in dataclasses.fields(self)}
        extra = {k: overrides.pop(k) for k in list(overrides) if k not in fields}
        if extra:
            overrides["convert_kwargs"] = {**self.convert_kwargs, **overrides.get("convert_kwargs", {}), **extra}
        return dataclasses.replace(self, **overrides) if overrides else self
