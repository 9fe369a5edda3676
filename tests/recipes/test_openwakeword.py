"""openWakeWord recipe (models/audio/openwakeword): the hand port against the .tflite files the wheel ships, then
export -> dump -> verify end to end (the graphs are small: full size is CI size).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.runtime.compiled import compile_and_run

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "models" / "audio" / "openwakeword" / "converted"
sys.path.insert(0, str(RECIPE))

import oww

from native_compare import compare_native_with_python  # tests/native_compare.py
import script_runner  # tests/script_runner.py: the one way the tests run a recipe script


def run_script(name: str, *args, env: dict | None = None, timeout: float = 900, ok=(0,)):
    return script_runner.run_script(RECIPE / name, *args, env=env, timeout=timeout, ok=ok)


def shipped_cpu(name: str, x: np.ndarray) -> np.ndarray:
    path = oww.shipped_tflite(name)
    sig = read_model_info(path).signatures[0]
    run = compile_and_run(path, {sig.key: [{next(iter(sig.inputs)): x}]}, accelerator="cpu")
    assert run.ok, run.error
    return next(iter(run.outputs[sig.key].values()))


def test_port_matches_the_shipped_tflite_files():
    """The hand port and the wheel's own .tflite conversions of the same ONNX models agree on LiteRT's CPU
    (bounds: fp32 rounding; the embedding's values reach ~60)."""
    rng = np.random.default_rng(0)
    audio = (0.3 * rng.standard_normal((1, 1760))).astype(np.float32)
    with torch.no_grad():
        mel = oww.load_stage("melspectrogram")(torch.from_numpy(audio)).numpy()
    assert mel.shape == (1, 1, 8, 32)
    assert np.abs(shipped_cpu("melspectrogram", audio).reshape(mel.shape) - mel).max() < 1e-3
    feats = (rng.standard_normal((1, 76, 32, 1)) + 1.0).astype(np.float32)
    with torch.no_grad():
        emb = oww.load_stage("embedding_model")(torch.from_numpy(feats)).numpy()
    assert np.abs(shipped_cpu("embedding_model", feats).reshape(emb.shape) - emb).max() < 1e-3 * np.abs(emb).max()
    embs = rng.standard_normal((1, 16, 96)).astype(np.float32)
    with torch.no_grad():
        score = oww.load_stage("hey_jarvis_v0.1")(torch.from_numpy(embs)).numpy()
    assert np.abs(shipped_cpu("hey_jarvis_v0.1", embs).reshape(score.shape) - score).max() < 1e-5


def test_head_branch_as_arithmetic_is_the_onnx_if():
    """p1 + step * (p2 - p1) with step = floor(p1 + 0.5): the ONNX `If` to fp32 rounding of the blend;
    the step can differ from p1 >= 0.5 only where p1 + 0.5 rounds up to 1 (p1 within 3e-8 of 0.5 in fp32, within
    2.5e-4 in fp16), where p1 and p2 are both near the threshold anyway."""
    head = oww.load_stage("hey_jarvis_v0.1")
    x = torch.randn(64, 16, 96) * 3
    with torch.no_grad():
        flat = x.reshape(64, -1)
        p1, p2 = head.model(flat), head.verifier(flat)
        want = torch.where(p1 >= 0.5, p2, p1)
        assert ((p1 - 0.5).abs() > 1e-6).all()
        assert (p1 >= 0.5).any() and (p1 < 0.5).any(), "both branches taken"
        torch.testing.assert_close(head(x), want, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_recipe_export_dump_verify(gpu, tmp_path):
    run_script("export_oww.py", "--model", tmp_path)
    for graph in ("mel", "embedding", "hey_jarvis"):
        info = read_model_info(tmp_path / f"{graph}.tflite")
        for wall in ("GATHER_ND", "SELECT", "SELECT_V2", "IF", "BROADCAST_TO"):
            assert not info.has_op(wall), (graph, wall)
    ref = tmp_path / "ref.npz"
    run_script("dump_oww_ref.py", "--ref", ref)
    data = np.load(ref)
    assert (data["scores"][data["positive"]].max(axis=1) >= 0.5).all()
    assert (data["scores"][~data["positive"]].max(axis=1) < 0.5).all()

    mel = tmp_path / "mel.tflite"
    sig = read_model_info(mel).signatures[0]
    from dump_oww_ref import mel_chunks
    chunks = mel_chunks(data["clips"][0])[20:24]
    compare_native_with_python(mel, {sig.key: [{next(iter(sig.inputs)): c[None]} for c in chunks]})

    env = dict(os.environ, LITERT_RESULTS_DIR=str(tmp_path))
    records = {}
    for device in ("cpu", "host-gpu", "host-gpu-fp32"):
        # fp16 on the GPU, the whole pipeline: every gate passes since the mel stage computes its power and mel
        # sums in a power-of-two-scaled domain (oww.MelSpectrogram): 0.287 off in score before, 0.0196 after
        proc = run_script("verify_oww.py", "--model", tmp_path, "--ref", ref, "--device", device, env=env)
        records[device] = json.loads((tmp_path / "results.json").read_text())[f"pipeline@{device}"]
        metrics = records[device]["metrics"]
        assert metrics["detected_positives"] == "3/3" and metrics["detected_negatives"] == "0/2", proc.stdout
    assert records["cpu"]["passed"] and records["host-gpu-fp32"]["passed"] and records["host-gpu"]["passed"]
    fp16 = records["host-gpu"]["metrics"]
    assert fp16["score_max_abs_vs_torch"] <= 0.02 and fp16["mel_max_abs_db_vs_torch"] < 10, fp16   # was 35.5 dB
    assert records["host-gpu-fp32"]["metrics"]["score_max_abs_vs_torch"] < 1e-4
    # the mel graph in fp32, the other two fp16: the mel stage exact, the score error the embedding's in fp16
    proc = run_script("verify_oww.py", "--model", tmp_path, "--ref", ref, "--fp32-graphs", "mel", env=env, ok=(0, 1))
    plan = json.loads((tmp_path / "results.json").read_text())["pipeline_mel-fp32@host-gpu"]
    assert plan["metrics"]["mel_max_abs_db_vs_torch"] < 1e-2 and plan["metrics"]["score_max_abs_vs_torch"] < 0.05, \
        proc.stdout
    # 35 ops: convert_for_gpu's functional rewrites, and the scaled domain's divide and log shift
    assert "mel: GPU residency: 35/35 ops, 1 partition (strict GPU) (fp32)" in plan["residency"]
