"""Held-out rows: architectures nobody converted while the toolkit's rewrites were written (the issue-22 round).
They are not in `ZOO` and the zoo's score does not count them; `zoo/run.py --held-out` runs them into
`zoo/held_out/` so that the number on models the toolkit was not tuned to is reported on its own. Once a round
develops against one of them, move it into the zoo and name a new one here.

Renewed 2026-12-04: resmlp_12, poolformerv2_s12, nest_tiny, BiT and MobileBERT (developed against in that round)
moved into the zoo; coat_lite_tiny, gcvit_xxtiny, volo_d1, CvT and RoFormer took their places, each run once
before any change was made for it. volo_d1 was then developed against (F.fold, softmax of permuted views) and moved
into the zoo too, and so was RoFormer (reshape_as of a rank-5 view); Falcon and ConvBERT took their places.
First runs of the seven new rows, before any change for them (zoo/held_out/results.json at the commits that
added them): coat_lite_tiny, gcvit_xxtiny, CvT, Falcon, ConvBERT PASS; volo_d1 INVALID_MODEL (F.fold's scatter);
RoFormer FALLBACK (86/207 ops on GPU).

2026-12-04, second stop: Funnel and XLNet were developed against (ad-hoc probes, never held-out rows) and joined
the zoo; efficientformerv2_s0, sequencer2d_s (LSTMs over rows and columns) and CANINE (character hashing,
strided downsampling conv) were named here and run once before any change was made for them (toolkit 6373d0f,
every held-out row re-run with it): efficientformerv2_s0 and sequencer2d_s PASS, CANINE FALLBACK (312/381 ops on
GPU: a runtime BROADCAST_TO); the set 19/20. CANINE was then developed against (a product with a ones
constant that broadcasts) and moved into the zoo; crossvit_tiny_240 took its place: PASS on its first run
(1452/1452 ops, toolkit 5349c43)."""
from __future__ import annotations

from ..build import image
from ..weights import ZooModel
from ._hf import _TEXT, _causal_lm, _hf, _masked
from .timm_models import _timm
from .torchvision_models import _tv


def _hf_image(size=32):
    return lambda: image(size)


def _row(name, build, library, domain="vision"):
    return ZooModel(f"held_{name}", domain, build, library=library)


ROWS: tuple[ZooModel, ...] = (
    _row("timm_gmlp_ti16", _timm("gmlp_ti16_224", 64, img_size=64), "timm"),
    _row("timm_twins_pcpvt_small", _timm("twins_pcpvt_small", 64, img_size=64), "timm"),
    _row("timm_inception_next_tiny", _timm("inception_next_tiny"), "timm"),
    _row("timm_mambaout_femto", _timm("mambaout_femto"), "timm"),
    _row("timm_dla34", _timm("dla34"), "timm"),
    _row("timm_hrnet_w18_small", _timm("hrnet_w18_small"), "timm"),
    _row("timm_cspresnet50", _timm("cspresnet50"), "timm"),
    _row("timm_coat_lite_tiny", _timm("coat_lite_tiny", 64, img_size=64), "timm"),
    _row("timm_gcvit_xxtiny", _timm("gcvit_xxtiny", 64, img_size=64), "timm"),
    _row("timm_efficientformerv2_s0", _timm("efficientformerv2_s0", 64, img_size=64), "timm"),
    _row("timm_sequencer2d_s", _timm("sequencer2d_s", 64, img_size=64), "timm"),
    _row("timm_crossvit_tiny_240", _timm("crossvit_tiny_240", 240), "timm"),
    _row("tv_regnet_y_800mf", _tv("regnet_y_800mf", num_classes=10), "torchvision"),
    _row("tv_mnasnet1_0", _tv("mnasnet1_0", num_classes=10), "torchvision"),
    _row("focalnet", _hf("FocalNetModel", "FocalNetConfig", _hf_image(32), image_size=32, patch_size=4, embed_dim=16,
                         depths=[1, 1], focal_levels=[2, 2]), "transformers"),
    _row("squeezebert", _hf("SqueezeBertModel", "SqueezeBertConfig", _masked(), embedding_size=64, **_TEXT),
         "transformers", "text"),
    # depth grows by stage: CvtStage indexes its per-layer drop-path list by the stage number (transformers 5.24)
    _row("cvt", _hf("CvtModel", "CvtConfig", _hf_image(32), embed_dim=[16, 32, 48], num_heads=[1, 2, 3],
                    depth=[1, 2, 3], mlp_ratio=[2.0, 2.0, 2.0], drop_path_rate=[0.0, 0.0, 0.0]), "transformers"),
    _row("convbert", _hf("ConvBertModel", "ConvBertConfig", _masked(), embedding_size=64, **_TEXT), "transformers",
         "text"),
    _row("falcon", _causal_lm("FalconForCausalLM", "FalconConfig", vocab_size=100, hidden_size=64, num_hidden_layers=2,
                              num_attention_heads=4), "transformers", "llm"),
    _row("codegen", _causal_lm("CodeGenForCausalLM", "CodeGenConfig", vocab_size=100, n_embd=64, n_layer=2, n_head=4,
                               n_positions=64, rotary_dim=8), "transformers", "llm"),
)
HELD_OUT = {m.name: m for m in ROWS}

