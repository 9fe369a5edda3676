"""`torchvision` architectures, random init (`weights=None`); the big ones at a reduced width / depth through their
constructors, so every row converts in seconds."""
from __future__ import annotations

from ..build import built, image, install_torchvision_placeholders
from ..weights import ZooModel


def _tv(fn: str, size: int = 64, inputs=None, **kw):
    def build():
        install_torchvision_placeholders()
        import torchvision

        src = torchvision.models
        for part in fn.split(".")[:-1]:                         # "segmentation.lraspp_mobilenet_v3_large"
            src = getattr(src, part)
        model = getattr(src, fn.split(".")[-1])(weights=None, **kw)
        return built(model, inputs() if inputs else image(size))
    return build


def _custom(make, size: int = 64, inputs=None, call=None):
    def build():
        install_torchvision_placeholders()
        return built(make(), inputs() if inputs else image(size), call)
    return build


def _small_vit():
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128,
                             num_classes=10)


def _small_swin(v2: bool):
    from torchvision.models import swin_transformer as s

    extra = dict(block=s.SwinTransformerBlockV2, downsample_layer=s.PatchMergingV2) if v2 else {}
    return s.SwinTransformer(patch_size=[4, 4], embed_dim=24, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2],
                             window_size=[4, 4], num_classes=10, **extra)


def _small_convnext():
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    return ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, 64, 1), CNBlockConfig(64, None, 1)],
                    num_classes=10)


def _small_maxvit():
    from torchvision.models.maxvit import MaxVit

    return MaxVit(input_size=(64, 64), stem_channels=16, partition_size=2, block_channels=[16, 32],
                  block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=10)


def _video():
    import torch

    return (torch.randn(1, 3, 4, 32, 32, generator=torch.Generator().manual_seed(1)),)


def _s3d_clip():
    import torch

    # S3D's last pool is a fixed (2, 7, 7) window: the smallest clip that reaches it is 16 frames of 224 x 224
    return (torch.randn(1, 3, 16, 224, 224, generator=torch.Generator().manual_seed(1)),)


def _flow_pair():
    import torch

    g = torch.Generator().manual_seed(1)
    return (torch.randn(1, 3, 128, 128, generator=g), torch.randn(1, 3, 128, 128, generator=g))


def _row(name, build, domain="vision", fast=False):
    return ZooModel(f"tv_{name}", domain, build, fast=fast, library="torchvision")


ROWS: tuple[ZooModel, ...] = (
    _row("resnet18", _tv("resnet18", num_classes=10), fast=True),
    _row("mobilenet_v2", _tv("mobilenet_v2", num_classes=10, width_mult=0.5)),
    _row("mobilenet_v3_small", _tv("mobilenet_v3_small", num_classes=10)),
    _row("mobilenet_v3_large", _tv("mobilenet_v3_large", num_classes=10)),
    _row("efficientnet_b0", _tv("efficientnet_b0", num_classes=10)),
    _row("regnet_y_400mf", _tv("regnet_y_400mf", num_classes=10)),
    _row("regnet_x_400mf", _tv("regnet_x_400mf", num_classes=10)),
    _row("shufflenet_v2_x0_5", _tv("shufflenet_v2_x0_5", num_classes=10)),
    _row("squeezenet1_1", _tv("squeezenet1_1", num_classes=10)),
    _row("mnasnet0_5", _tv("mnasnet0_5", num_classes=10)),
    _row("densenet121", _tv("densenet121", num_classes=10)),
    _row("googlenet", _tv("googlenet", num_classes=10, aux_logits=False, init_weights=False)),
    _row("inception_v3", _tv("inception_v3", size=96, num_classes=10, aux_logits=False, init_weights=False)),
    _row("vit_small", _custom(_small_vit)),
    _row("swin_small", _custom(lambda: _small_swin(False))),
    _row("swin_v2_small", _custom(lambda: _small_swin(True))),
    _row("convnext_small", _custom(_small_convnext)),
    _row("maxvit_small", _custom(_small_maxvit)),
    _row("lraspp_mobilenet_v3", _tv("segmentation.lraspp_mobilenet_v3_large", num_classes=4,
                                    weights_backbone=None), "segmentation"),
    _row("deeplabv3_mobilenet_v3", _tv("segmentation.deeplabv3_mobilenet_v3_large", num_classes=4,
                                       weights_backbone=None, aux_loss=False), "segmentation"),
    _row("r3d_18", _custom(lambda: __import__("torchvision").models.video.r3d_18(weights=None, num_classes=10),
                           inputs=_video), "video"),
    _row("r2plus1d_18", _custom(lambda: __import__("torchvision").models.video.r2plus1d_18(weights=None,
                                                                                            num_classes=10),
                                inputs=_video), "video"),
    _row("mc3_18", _custom(lambda: __import__("torchvision").models.video.mc3_18(weights=None, num_classes=10),
                           inputs=_video), "video"),
    _row("s3d", _custom(lambda: __import__("torchvision").models.video.s3d(weights=None, num_classes=10),
                        inputs=_s3d_clip), "video"),
    _row("raft_small", _custom(lambda: __import__("torchvision").models.optical_flow.raft_small(weights=None),
                               inputs=_flow_pair, call=lambda m, a, b: m(a, b, num_flow_updates=1)[-1]), "flow"),
)
