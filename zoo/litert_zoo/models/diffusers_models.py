"""`diffusers` models at tiny configs, random init: UNets (1-D, 2-D, text-conditioned), VAEs, a diffusion
transformer and Stable Audio's Oobleck decoder (weight-normed convs, Snake activations)."""
from __future__ import annotations

from ..build import built, install_torchvision_placeholders
from ..weights import ZooModel


def _rand(*shape, seed=1):
    import torch

    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _diffusers(cls_name: str, inputs, call=None, **config):
    def build():
        install_torchvision_placeholders()
        import diffusers

        model = getattr(diffusers, cls_name)(**config)
        return built(model, inputs(), call)
    return build


def _sample_and_step(*shape):
    def make():
        import torch

        return {"sample": _rand(*shape), "timestep": torch.tensor([10.0])}
    return make


def _cond_unet_inputs():
    import torch

    return {"sample": _rand(1, 4, 16, 16), "timestep": torch.tensor([10.0]),
            "encoder_hidden_states": _rand(1, 8, 32, seed=2)}


def _dit_inputs():
    import torch

    return {"hidden_states": _rand(1, 4, 16, 16), "timestep": torch.tensor([10]), "class_labels": torch.tensor([1])}


_BLOCK2D = dict(block_out_channels=(16, 32), layers_per_block=1, norm_num_groups=8)
_VAE = dict(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(16, 32), layers_per_block=1,
            norm_num_groups=8, down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2)


def _row(name, build, domain="generative", fast=False):
    return ZooModel(f"diffusers_{name}", domain, build, fast=fast, library="diffusers")


ROWS: tuple[ZooModel, ...] = (
    _row("unet1d", _diffusers(
        "UNet1DModel", _sample_and_step(1, 2, 64), sample_size=64, in_channels=2, out_channels=2,
        block_out_channels=(16, 32, 32), extra_in_channels=32, down_block_types=("DownBlock1DNoSkip", "DownBlock1D",
                                                                                   "AttnDownBlock1D"),
        up_block_types=("AttnUpBlock1D", "UpBlock1D", "UpBlock1DNoSkip"), mid_block_type="UNetMidBlock1D",
        out_block_type=None, act_fn="swish"), "audio"),
    _row("unet2d", _diffusers(
        "UNet2DModel", _sample_and_step(1, 3, 16, 16), sample_size=16, in_channels=3, out_channels=3,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=8, **_BLOCK2D), fast=True),
    _row("unet2d_condition", _diffusers(
        "UNet2DConditionModel", _cond_unet_inputs, sample_size=16, in_channels=4, out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, **_BLOCK2D)),
    _row("vae_decoder", _diffusers("AutoencoderKL", lambda: (_rand(1, 4, 8, 8),), call=lambda m, z: m.decode(z),
                                   **_VAE)),
    _row("vae_encoder", _diffusers("AutoencoderKL", lambda: (_rand(1, 3, 32, 32),),
                                   call=lambda m, x: m.encode(x).latent_dist.mean, **_VAE)),
    _row("vae_tiny_decoder", _diffusers(
        "AutoencoderTiny", lambda: (_rand(1, 4, 8, 8),), call=lambda m, z: m.decode(z),
        encoder_block_out_channels=(16, 16), decoder_block_out_channels=(16, 16), num_encoder_blocks=(1, 1),
        num_decoder_blocks=(1, 1), latent_channels=4)),
    _row("dit", _diffusers(
        "DiTTransformer2DModel", _dit_inputs, num_attention_heads=2, attention_head_dim=16, in_channels=4,
        out_channels=4, num_layers=2, sample_size=16, patch_size=2, num_embeds_ada_norm=10, norm_num_groups=4)),
    _row("oobleck_decoder", _diffusers(
        "AutoencoderOobleck", lambda: (_rand(1, 8, 8),), call=lambda m, z: m.decode(z).sample, encoder_hidden_size=8,
        downsampling_ratios=[2, 2], channel_multiples=[1, 2], decoder_channels=8, decoder_input_channels=8,
        audio_channels=1), "audio"),
)
