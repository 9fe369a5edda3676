"""The one table of symptoms: what you see -> why -> which toolkit rewrite removes it.

Everything that diagnoses reads this table: the checker (suggestions after a failed compile or
bad numerics), the mobile lint (phone-only walls) and bisect (diagnosis of a diverging block).
The toolkit reference's symptom table is generated from it (`scripts/gen_docs.py`); the data lives in
`symptom_table`, the lookups here.

Each `Symptom` matches in one of three ways:
  * `ops`: a delegate rejection or lint finding names one of these op types;
  * `log`: a regular expression over the native GPU log / converter error;
  * `numeric`: one of "nonfinite", "all_zero", "degraded", "compounding".
"""
from __future__ import annotations

import re
from dataclasses import replace

from .symptom_table import LONG_REDUCTION, SYMPTOMS, Symptom  # noqa: F401 - re-exported

BY_ID = {s.id: s for s in SYMPTOMS}


def narrowed(symptom: Symptom, op: str | None) -> Symptom:
    """`symptom` with its rewrites cut to those listed for `op` in `by_op` (unchanged when not listed)."""
    rewrites = dict(symptom.by_op).get(op) if op else None
    return replace(symptom, rewrites=tuple(rewrites)) if rewrites else symptom


def for_op(op: str) -> list[Symptom]:
    return [narrowed(s, op) for s in SYMPTOMS if op in s.ops]


_OP_PREFIX = re.compile(r"^\s*([A-Z][A-Z0-9_]+): ")


def for_log(text: str, stage: str | None = None) -> list[Symptom]:
    """Symptoms whose log pattern matches `text`; a delegate line 'OP: reason' narrows the rewrites to OP.
    stage: "convert" or "gpu" keeps only the symptoms seen at that stage (and those marked "any")."""
    m = _OP_PREFIX.match(text)
    op = m.group(1) if m else None
    return [narrowed(s, op) for s in SYMPTOMS if s.log and re.search(s.log, text)
            and (stage is None or s.stage in ("any", stage))]


def for_numeric(signature: str) -> list[Symptom]:
    return [s for s in SYMPTOMS if s.numeric == signature]


# rewrite -> the module types one of which the model must hold for it to apply (a class that replaces a module)
NEEDS_MODULE: dict[str, tuple[str, ...]] = {
    "PolyphaseConvT1d": ("ConvTranspose1d",), "ZeroStuffConvT1d": ("ConvTranspose1d",),
    "PolyphaseConvT2d": ("ConvTranspose2d",), "ZeroStuffConvT2d": ("ConvTranspose2d",),
    "pixelshuffle_to_conv_transpose": ("PixelShuffle",),
    "patch_safe_layernorm": ("LayerNorm",), "patch_instance_norm": ("_InstanceNorm",),
    "patch_group_norm": ("GroupNorm",),
}


# rewrite -> the op types the converted graph must hold for it to change anything: any one of the groups, every
# op of a group (a recurrent cell lowers to LOGISTIC and TANH; a sigmoid head alone is no recurrence). Rewrites
# not listed act on ops too common to tell (ADD, MUL, ...) and are always kept.
NEEDS_OPS: dict[str, tuple[tuple[str, ...], ...]] = {
    "patch_safe_expm1": (("EXP",),),
    "patch_safe_layernorm": (("MEAN",), ("SUM",)), "patch_rmsnorm": (("MEAN",), ("SUM",)),
    "patch_instance_norm": (("MEAN",), ("SUM",)), "patch_group_norm": (("MEAN",), ("SUM",)),
    "hierarchical_mean": (("MEAN",), ("SUM",)), "safe_mean": (("MEAN",),), "safe_sum": (("SUM",),),
    "patch_safe_reductions": (("MEAN",), ("SUM",)), "patch_padded_mean": (("MEAN",),),
    "patch_safe_softmax": (("SOFTMAX",), ("EXP",)), "patch_safe_vector_norm": (("SQRT",), ("RSQRT",)),
    "l2_normalize": (("SQRT",), ("RSQRT",), ("L2_NORMALIZATION",)),
    "patch_split_k": (("FULLY_CONNECTED",), ("BATCH_MATMUL",), ("CONV_2D",)),
    "patch_prescale_attention": (("BATCH_MATMUL",), ("FULLY_CONNECTED",)),
    "patch_recurrent": (("LOGISTIC", "TANH"), ("UNIDIRECTIONAL_SEQUENCE_LSTM",)),
    "patch_avg_pool": (("AVERAGE_POOL_2D",), ("STABLEHLO_REDUCE_WINDOW",)),
    "patch_pad_rank4": (("PAD",), ("PADV2",)),
}


def in_graph(rewrite: str, ops) -> bool:
    """Does a graph holding op types `ops` give `rewrite` something to change (`NEEDS_OPS`)?"""
    groups = NEEDS_OPS.get(rewrite)
    return groups is None or any(all(op in ops for op in group) for group in groups)


def applicable(names, module_types=None) -> list[str]:
    """`names` without the rewrites that replace a module type the model does not hold (module_types: the
    class names of the model's modules and of their base classes; None keeps every name)."""
    if module_types is None:
        return list(names)
    return [n for n in names if n not in NEEDS_MODULE or set(NEEDS_MODULE[n]) & set(module_types)]


def suggestions(symptoms, module_types=None) -> list[str]:
    """Rewrite names from a list of symptoms, first-seen order, no duplicates; with `module_types` only those
    that can apply to a model holding those module types (`applicable`)."""
    seen: list[str] = []
    for s in symptoms:
        for r in s.rewrites:
            if r not in seen:
                seen.append(r)
    return applicable(seen, module_types)
