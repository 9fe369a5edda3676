"""HiFi-GAN vocoder recipe (models/audio/hifigan): real weights, export -> dump -> verify end to end on the GPU.

The end-to-end test runs the recipe's three scripts as subprocesses, as a user would, at a reduced size (16-frame
graph, one chunk of real espeak-ng speech) to fit CI; the full-size command and its numbers are in the README.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.fft.basis import hz_to_mel, mel_to_hz

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "models" / "audio" / "hifigan" / "converted"
sys.path.insert(0, str(RECIPE))

import hifigan

from native_compare import compare_native_with_python, random_inputs  # tests/native_compare.py
import script_runner  # tests/script_runner.py: the one way the tests run a recipe script

FRAMES, CONTEXT = 16, 4


def run_script(name: str, *args: str, env: dict | None = None, timeout: float = 900, ok_codes=(0,)):
    return script_runner.run_script(RECIPE / name, *args, env=env, timeout=timeout, ok=ok_codes)


def test_weight_norm_fold_matches_torch_weight_norm():
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.ConvTranspose1d(6, 4, 8, stride=4))
    with torch.no_grad():
        conv.parametrizations.weight.original0.copy_(torch.rand(6, 1, 1) + 0.5)
    state = {"ups.0.weight_g": conv.parametrizations.weight.original0,
             "ups.0.weight_v": conv.parametrizations.weight.original1, "ups.0.bias": conv.bias}
    folded = hifigan.fold_weight_norm(state)
    assert set(folded) == {"ups.0.weight", "ups.0.bias"}
    torch.testing.assert_close(folded["ups.0.weight"], conv.weight, rtol=1e-6, atol=1e-7)


def test_mel_filterbank_and_log_mel_follow_hifigan_conventions():
    config = hifigan.load_config()
    basis = hifigan.mel_filterbank(22050, 1024, 80, 0, 8000)
    assert basis.shape == (80, 513) and (basis >= 0).all() and (basis.sum(1) > 0).all()
    assert basis[:, np.linspace(0, 11025, 513) > 8000].max() == 0  # nothing above fmax
    t = np.arange(22050 * 1) / 22050
    mel = hifigan.log_mel(0.5 * np.sin(2 * np.pi * 1000 * t), config)
    assert mel.shape == (80, 22050 // 256)
    centres = mel_to_hz(np.linspace(0, hz_to_mel(8000, "slaney"), 82), "slaney")[1:-1]
    assert abs(centres[mel[:, 40].argmax()] - 1000) < 60  # the 1 kHz tone lands in the 1 kHz band
    silence = hifigan.log_mel(np.zeros(4096), config)
    assert np.allclose(silence, hifigan.LOG_FLOOR)


def test_chunks_stitch_back_to_one_run():
    mel = np.random.default_rng(0).standard_normal((3, 50)).astype(np.float32)
    chunks = hifigan.chunk_mel(mel, 16, 4)
    assert chunks.shape == (7, 3, 16)  # ceil(50 / 8) chunks of 16 frames
    # identity 'vocoder' with hop 1: stitching the chunk cores gives the mel back
    assert np.array_equal(hifigan.stitch_chunks(chunks[:, 1], 16, 4, 1, 50), mel[1])
    full = hifigan.padded_for_full_run(mel, 16, 4)
    assert np.array_equal(full[:, 4:54], mel) and np.all(full[:, :4] == hifigan.LOG_FLOOR)


@pytest.mark.slow
def test_recipe_export_dump_verify_on_gpu(gpu, tmp_path):
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is required for the recipe's test speech (apt-get install espeak-ng)")
    model, ref = tmp_path / "vocoder.tflite", tmp_path / "reference.npz"
    run_script("export_vocoder.py", "--frames", str(FRAMES), "--model", str(model))
    info = read_model_info(model)
    assert not info.has_op("TRANSPOSE_CONV") and info.has_op("CONV_2D")  # polyphase by default
    compare_native_with_python(model, random_inputs(model))   # the phone's runner built here = the Python path

    run_script("dump_vocoder_ref.py", "--frames", str(FRAMES), "--context", str(CONTEXT), "--max-chunks", "1",
               "--ref", str(ref))
    data = np.load(ref)
    assert data["chunks"].shape == (1, 80, FRAMES) and data["torch_chunks"].shape == (1, FRAMES * 256)
    assert np.abs(data["torch_wave"]).max() > 0.05  # the vocoder made sound from real speech

    env = dict(os.environ, LITERT_RESULTS_DIR=str(tmp_path))
    common = ["--model", str(model), "--ref", str(ref), "--artifacts", str(tmp_path)]
    # fp16 (the GPU's default): full residency and a faithful waveform, but below the 0.999 correlation gate --
    # fp16 precision compounds through the generator's depth (see the recipe README); verify exits 1 for that gate
    fp16 = run_script("verify_vocoder.py", *common, env=env, ok_codes=(0, 1))
    record = json.loads((tmp_path / "results.json").read_text())["vocoder@host-gpu"]
    assert "llvmpipe" in record["device_label"] or "software" not in record["device_label"]
    assert record["residency"] == f"GPU residency: {info.num_ops}/{info.num_ops} ops, 1 partition (strict GPU)"
    assert record["gates"]["strict GPU residency N/N"], fp16.stdout
    assert record["metrics"]["nonfinite"] == 0 and record["metrics"]["waveform_corr"] >= 0.9, fp16.stdout
    assert record["metrics"]["logmel_l1_vs_torch"] < 0.15, fp16.stdout
    for name in ("vocoder_torch.wav", "vocoder_host-gpu.wav", "spectrograms_host-gpu.png"):
        assert (tmp_path / name).stat().st_size > 1000, name

    # fp32 on the same GPU: every gate passes
    fp32 = run_script("verify_vocoder.py", *common, "--device", "host-gpu-fp32", env=env)
    record = json.loads((tmp_path / "results.json").read_text())["vocoder@host-gpu-fp32"]
    assert record["passed"] and record["metrics"]["waveform_corr"] >= 0.999, fp32.stdout

    # the precision plan the recipe recommends: conv_pre .. ups.1 with fp32 arithmetic, the rest fp16 (host-gpu's
    # own precision), two strict GPU graphs: every gate passes where the one fp16 graph does not
    folder = tmp_path / "plan"
    run_script("export_vocoder.py", "--frames", str(FRAMES), "--fp32-until", "ups.1", "--model", str(folder))
    plan = run_script("verify_vocoder.py", "--plan", str(folder / "plan.json"), "--ref", str(ref), "--artifacts",
                      str(tmp_path), env=env)
    record = json.loads((tmp_path / "results.json").read_text())["plan@host-gpu"]
    assert record["passed"] and record["metrics"]["waveform_corr"] >= 0.999, plan.stdout
    assert record["residency"].count("1 partition (strict GPU)") == 2, record["residency"]
    assert record["residency"].startswith("part0 (fp32): ") and "part1 (fp16): " in record["residency"]
