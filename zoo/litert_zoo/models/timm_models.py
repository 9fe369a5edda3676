"""`timm` architectures, random init (`pretrained=False`), 10 classes, 64x64 inputs (the ViT-style ones at
reduced depth / width so a conversion takes seconds, not minutes)."""
from __future__ import annotations

from ..build import built, image, install_torchvision_placeholders
from ..weights import ZooModel


def _timm(name: str, size: int = 64, **kw):
    def build():
        install_torchvision_placeholders()
        import timm

        model = timm.create_model(name, pretrained=False, num_classes=10, **kw)
        return built(model, image(size))
    return build


_SMALL_SWIN = dict(img_size=64, window_size=4, embed_dim=24, depths=(1, 1, 1, 1), num_heads=(1, 1, 2, 2))

_CNN = ("resnet18", "resnet10t", "resnest14d", "regnety_002",
        "mobilenetv2_050", "mobilenetv3_small_050", "mobilenetv4_conv_small", "efficientnet_b0",
        "tf_efficientnet_lite0", "mixnet_s", "mnasnet_small", "lcnet_050", "ghostnet_050", "rexnet_100",
        "ese_vovnet19b_slim_dw",
        "repvgg_a0", "convnext_atto", "convnextv2_atto",
        "edgenext_xx_small", "fastvit_t8", "repvit_m0_9", "mobilevit_xxs", "mobilevitv2_050", "efficientvit_b0",
        "hgnetv2_b0", "starnet_s1", "fasternet_t0", "shvit_s1", "poolformerv2_s12")
_TRANSFORMER = {
    "vit_tiny_patch16_224": dict(img_size=64, depth=2),
    "deit_tiny_patch16_224": dict(img_size=64, depth=2),
    "eva02_tiny_patch14_224": dict(size=56, img_size=56, depth=2),
    "cait_xxs24_224": dict(img_size=64, depth=2),
    "xcit_nano_12_p16_224": dict(img_size=64, depth=2),
    "swin_tiny_patch4_window7_224": _SMALL_SWIN,
    "swinv2_tiny_window8_256": _SMALL_SWIN,
    "coatnet_nano_rw_224": dict(img_size=64),
    "levit_128s": dict(img_size=64),
    "pit_ti_224": dict(img_size=64),
    "visformer_tiny": dict(img_size=64),
    "sequencer2d_s": dict(img_size=64),
    "resmlp_12_224": dict(img_size=64),
    "nest_tiny": dict(img_size=64),
    "volo_d1_224": dict(img_size=64),
}


def _row(name: str, kw: dict, fast: bool = False) -> ZooModel:
    kw = dict(kw)
    size = kw.pop("size", kw.get("img_size", 64))
    domain = "vision"
    return ZooModel(f"timm_{name}", domain, _timm(name, size, **kw), fast=fast, library="timm")


ROWS: tuple[ZooModel, ...] = tuple(
    [_row(n, {}, fast=n == "mobilenetv3_small_050") for n in _CNN]
    + [_row(n, kw) for n, kw in _TRANSFORMER.items()])
