"""Wall `expert_dispatch`: a mixture-of-experts layer that sends each token only to its top-k experts.

What the converter makes of it: Hugging Face's expert modules (every class decorated with transformers'
`use_experts_implementation`: OLMoE, Mixtral, Qwen-MoE, DeepSeek, GPT-OSS, ...) dispatch tokens with
data-dependent ops. The grouped form counts tokens per expert with `torch.histc` (litert-torch has no lowering:
CONVERT_FAIL), sorts them and indexes by the permutation (GATHER_ND); the eager form loops over the experts that
were hit (`nonzero`: a data-dependent loop export cannot trace); the batched form gathers a [k, out, in] weight
per token (GATHER of a 3-D weight table). None of them is a graph the GPU runs.

`patch_dense_experts` gives each such module a dense forward: every expert runs on every token as two
FULLY_CONNECTED layers with the expert's own weights, and its output is scaled by the token's routing weight
for that expert -- the top-k weight where the expert was chosen, 0 elsewhere (the routing ids compared with the
expert number, as float arithmetic). The sum over experts is the layer's output.

Exactness: fp32 rounding. An expert that was not chosen adds y * 0 = 0 exactly while its output y is finite
(an expert output of +/-inf or NaN would make the dense sum NaN where the sparse one ignored it); the chosen
ones are added in expert order rather than top-k order (measured on OLMoE: max |err| 1.5e-7 of logits of 0.47).
Cost: E / k times the expert compute of the sparse layer (E experts, k chosen per token) and E pairs of
FULLY_CONNECTED per layer in the file -- the price of a static graph; fine for few experts, heavy for 64.
Left alone: a module in expert-parallel mode, and expert modules not built by that decorator (an
`nn.ModuleList` of experts with a Python loop in the block is not recognised).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import Change, register

_DENSE: dict[type, type] = {}          # original expert class -> its dense subclass


def _is_hf_experts(m: nn.Module) -> bool:
    """Built by transformers' `use_experts_implementation` (its flags and 3-D expert weights), not parallel."""
    flags = ("has_gate", "has_bias", "is_transposed", "has_post_expert_norm", "_apply_gate")
    down = getattr(m, "down_proj", None)
    return (all(hasattr(m, f) for f in flags) and isinstance(down, torch.Tensor) and down.dim() == 3
            and hasattr(m, "num_experts") and not getattr(m, "_is_expert_parallel", False))


def _linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, transposed: bool) -> torch.Tensor:
    """One expert's projection: w is [out, in], or [in, out] when the module stores its weights transposed."""
    return F.linear(x, w.t() if transposed else w, b)


def _dense_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                   top_k_weights: torch.Tensor) -> torch.Tensor:
    """Every expert on every token, weighted by the routing (0 for an expert the token did not choose)."""
    experts = torch.arange(self.num_experts, device=top_k_index.device)
    chosen = (top_k_index.unsqueeze(-1) == experts).to(top_k_weights.dtype)        # [..., k, E]
    route = (top_k_weights.unsqueeze(-1) * chosen).sum(-2).to(hidden_states.dtype)  # [..., E]
    up = self.gate_up_proj if self.has_gate else self.up_proj
    up_bias = (self.gate_up_proj_bias if self.has_gate else self.up_proj_bias) if self.has_bias else None
    out = None
    for e in range(self.num_experts):
        h = _linear(hidden_states, up[e], None if up_bias is None else up_bias[e], self.is_transposed)
        h = self._apply_gate(h) if self.has_gate else self.act_fn(h)
        y = _linear(h, self.down_proj[e], self.down_proj_bias[e] if self.has_bias else None, self.is_transposed)
        if self.has_post_expert_norm:
            y = self.post_expert_norm(y)
        y = y * route[..., e:e + 1]
        out = y if out is None else out + y
    return out.to(hidden_states.dtype)


def dense_experts(module: nn.Module) -> nn.Module:
    """Swap a transformers expert module to its dense-forward subclass, in place (same object and weights).

    isinstance(module, its original class) still holds. Raises TypeError for a module that is not one.
    """
    if not _is_hf_experts(module):
        raise TypeError(f"dense_experts() takes a transformers expert module, not {type(module).__name__}")
    cls = type(module)
    if cls not in _DENSE.values():
        if cls not in _DENSE:
            _DENSE[cls] = type(f"Dense{cls.__name__}", (cls,), {"forward": _dense_forward})
        module.__class__ = _DENSE[cls]
    return module


@register("patch_dense_experts", wall="expert_dispatch")
def patch_dense_experts(model: nn.Module) -> list[Change]:
    """Mixture-of-experts layers -> every expert on every token, weighted by the routing (wall `expert_dispatch`).

    Exact to fp32 rounding while expert outputs are finite (module docstring); costs E / k times the sparse
    layer's expert compute.
    """
    changes = []
    for path, m in list(model.named_modules()):
        if _is_hf_experts(m) and type(m) not in _DENSE.values():
            dense_experts(m)
            changes.append(Change(path, f"{type(m).__mro__[1].__name__}: top-k dispatch -> {m.num_experts} "
                                        "dense experts weighted by the routing", "patch_dense_experts", True))
    return changes
