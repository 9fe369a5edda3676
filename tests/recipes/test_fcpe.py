"""FCPE pitch recipe (models/audio/fcpe): the network and front end against the source's conventions, then
export -> dump -> verify end to end at a reduced size (0.5 s graph: 51 frames; two speech inputs and one tone).

The full-size command (3 s, six inputs) and its numbers are in the recipe README.
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

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "models" / "audio" / "fcpe" / "converted"
sys.path.insert(0, str(RECIPE))

import fcpe

from native_compare import compare_native_with_python  # tests/native_compare.py
import script_runner  # tests/script_runner.py: the one way the tests run a recipe script

SAMPLES = 8000


def run_script(name: str, *args, env: dict | None = None, timeout: float = 900, ok=(0,)):
    return script_runner.run_script(RECIPE / name, *args, env=env, timeout=timeout, ok=ok)


@pytest.fixture(scope="module")
def network():
    return fcpe.load_model()


def tone(hz: float, samples: int = SAMPLES, amplitude: float = 0.5) -> np.ndarray:
    return (amplitude * np.sin(2 * np.pi * hz * np.arange(samples) / 16000)).astype(np.float32)


def test_checkpoint_loads_safely_and_reads_a_tone(network):
    model, config = network
    assert config["model"]["conv_only"] and config["mel"]["sr"] == 16000
    # 10.8 M: the checkpoint less its 6 unused attention LayerNorms and the folded weight-norm gains
    assert sum(p.numel() for p in model.parameters()) == 10_826_088
    f0, voiced = fcpe.decode(fcpe.reference_salience(model, tone(220.0), config["mel"]), model.cent_table.numpy())
    assert voiced.all() and abs(np.median(f0) - 220.0) < 1.0
    f0, voiced = fcpe.decode(fcpe.reference_salience(model, np.zeros(SAMPLES, np.float32), config["mel"]),
                             model.cent_table.numpy())
    assert not voiced.any() and not f0.any()  # silence is unvoiced


def test_conv_mel_matches_the_torch_stft_mel(network):
    """The GPU front end (conv STFT) against the source's torch.stft path: exact but for fp32 rounding of the DFT,
    which the log magnifies only in bins far below the peak (bound: 0.05 in log-mel, on speech-like noise, a tone
    and silence)."""
    _, config = network
    conv = fcpe.ConvMel(config["mel"])
    rng = np.random.default_rng(0)
    cases = {"noise": (0.3 * rng.standard_normal(SAMPLES)).astype(np.float32), "tone": tone(440.0, amplitude=1.0),
             "silence": np.zeros(SAMPLES, np.float32)}
    for name, audio in cases.items():
        x = torch.from_numpy(audio)[None]
        with torch.no_grad():
            got, want = conv(x), fcpe.reference_mel(x, config["mel"])
        assert got.shape == want.shape == (1, SAMPLES // 160 + 1, 128), name
        assert (got - want).abs().max().item() < 0.05, name
    assert torch.equal(got, torch.full_like(got, float(np.log(fcpe.CLIP)))), "silence is the log floor"


def test_decoder_is_the_local_weighted_mean():
    table = np.linspace(0, 3590, 360)
    s = np.full((3, 360), 1e-4)
    s[0, 100] = 0.9
    s[0, 101] = 0.9                       # two equal peaks: the first is the centre, the weighted mean between them
    s[1, 0] = 0.5                         # a peak at the table's edge: the window is clipped, not wrapped
    s[2, 50] = fcpe.THRESHOLD             # at the threshold: unvoiced
    f0, voiced = fcpe.decode(s, table, f0_min=0.0)
    assert voiced.tolist() == [True, True, False] and f0[2] == 0.0
    w = np.array([1e-4] * 4 + [0.9, 0.9] + [1e-4] * 3)
    expect = (table[96:105] * w).sum() / w.sum()
    assert abs(1200 * np.log2(f0[0] / 10) - expect) < 1e-9
    assert fcpe.cents_error(np.array([440.0, 0.0]), np.array([220.0, 5.0]), np.array([True, False])).tolist() == \
        [1200.0]


@pytest.mark.slow
def test_recipe_export_dump_verify(gpu, tmp_path):
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is required for the recipe's test speech (apt-get install espeak-ng)")
    model, ref = tmp_path / "pitch.tflite", tmp_path / "ref.npz"
    export = run_script("export_pitch.py", "--samples", SAMPLES, "--model", model)
    assert "max |d salience| = " in export.stdout
    info = read_model_info(model)
    sig = info.signatures[0]
    assert [tuple(t.shape) for t in sig.inputs.values()] == [(1, SAMPLES)]
    assert [tuple(t.shape) for t in sig.outputs.values()] == [(1, SAMPLES // 160 + 1, 360)]
    for wall in ("GATHER_ND", "SPLIT", "BROADCAST_TO", "RFFT2D"):
        assert not info.has_op(wall), wall
    assert info.has_op("LOG") and info.has_op("DEPTHWISE_CONV_2D")   # the mel front end is in the graph

    run_script("dump_pitch_ref.py", "--samples", SAMPLES, "--tones", "220", "--ref", ref)
    data = np.load(ref)
    assert data["audio"].shape == (3, SAMPLES) and data["salience"].shape == (3, SAMPLES // 160 + 1, 360)
    compare_native_with_python(model, {sig.key: [{next(iter(sig.inputs)): a[None]} for a in data["audio"]]})

    env = dict(os.environ, LITERT_RESULTS_DIR=str(tmp_path))
    common = ["--model", model, "--ref", ref]
    records = {}
    for device in ("cpu", "host-gpu", "host-gpu-fp32"):
        proc = run_script("verify_pitch.py", *common, "--device", device, env=env)
        records[device] = json.loads((tmp_path / "results.json").read_text())[f"pitch@{device}"]
        assert records[device]["passed"], proc.stdout
    gpu16 = records["host-gpu"]
    assert gpu16["residency"] == f"GPU residency: {info.num_ops}/{info.num_ops} ops, 1 partition (strict GPU)"
    assert 0 < gpu16["metrics"]["max_abs"] < 0.2, "bit-identical to torch: did it run on the GPU in fp16?"
    assert records["cpu"]["metrics"]["max_abs"] < 1e-3
    assert records["host-gpu-fp32"]["metrics"]["min_corr"] > 0.99999
