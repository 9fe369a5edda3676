"""Silero VAD recipe: export -> dump -> verify end to end (as subprocesses), plus the pieces it is built from.

One export and one dump per session (module fixture, ~1 min on 2 cores); verify runs on the CPU and, with the
`gpu` fixture, on the GPU (strict residency, fp16), each writing its results into the test's own folder.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from litert_gpu_toolkit.core.model_info import read_model_info
from litert_gpu_toolkit.rewrites.output_aliasing import find_aliased_outputs, outputs_guarded_by_runtime_one

RECIPE = Path(__file__).resolve().parents[2] / "models" / "audio" / "silero_vad" / "converted"
sys.path.insert(0, str(RECIPE))

import vad_net
from vad_signal import steps_of

import script_runner  # tests/script_runner.py: the one way the tests run a recipe script
from native_compare import compare_native_with_python  # tests/native_compare.py


def run_script(name: str, *args, timeout: float = 600):
    return script_runner.run_script(RECIPE / name, *args, timeout=timeout)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is needed for the test speech: apt-get install -y espeak-ng (scripts/setup.sh does)")
    work = tmp_path_factory.mktemp("silero_vad")
    export = run_script("export_vad.py", "--model", work / "step.tflite")
    dump = run_script("dump_vad_ref.py", "--ref", work / "ref.npz", "--wav", work / "speech.wav")
    return {"dir": work, "model": work / "step.tflite", "ref": work / "ref.npz", "export_log": export.stdout,
            "dump_log": dump.stdout}


def verify(pipeline, device: str) -> dict:
    work = pipeline["dir"]
    proc = run_script("verify_vad.py", "--model", pipeline["model"], "--ref", pipeline["ref"], "--device", device,
                      "--results-dir", work, "--plot", work / f"probs_{device}.png")
    assert (work / f"probs_{device}.png").stat().st_size > 10_000
    record = json.loads((work / "results.json").read_text())[f"step@{device}"]
    return {"log": proc.stdout, **record}


def test_exported_step_is_gpu_clean_by_construction(pipeline):
    info = read_model_info(pipeline["model"])
    sig = info.signatures[0]
    assert {n: tuple(t.shape) for n, t in sig.inputs.items()} == {"audio": (1, 576), "h": (1, 128), "c": (1, 128),
                                                                   "one": (1,)}
    assert {n: tuple(t.shape) for n, t in sig.outputs.items()} == {"prob": (1, 1), "h_next": (1, 128),
                                                                    "c_next": (1, 128)}
    for wall in ("GATHER_ND", "SPLIT", "SELECT", "SELECT_V2", "ABS"):
        assert not info.has_op(wall), wall
    assert find_aliased_outputs(info) == []
    guarded = {name.split("_output")[0].removeprefix(sig.key + "_"): ok
               for name, ok in outputs_guarded_by_runtime_one(info).items()}
    assert guarded == {"prob": False, "h_next": True, "c_next": True}
    assert info.num_ops < 80, "the reflect pad should be 3 ops, not 65 (dispatch count)"
    assert "max |dprob| = " in pipeline["export_log"]


def test_reference_dump_is_real_speech_and_the_definition_matches(pipeline):
    ref = np.load(pipeline["ref"])
    assert len(ref["audio"]) >= 10 * vad_net.SAMPLE_RATE and len(ref["audio"]) % vad_net.CHUNK == 0
    assert np.abs(ref["net_prob"] - ref["ref_prob"]).max() <= 1e-5
    speech = ref["ref_prob"] >= 0.5
    assert 0.3 < speech.mean() < 0.9, "the recording should hold both speech and silence/noise"
    assert ref["ref_prob"][:25].max() < 0.1, "the leading second of silence is not speech"
    assert ref["h_in"].shape == (len(ref["ref_prob"]), 128) and not ref["h_in"][0].any()


def test_verify_streams_on_cpu(pipeline):
    record = verify(pipeline, "cpu")
    assert record["passed"], record["log"]
    assert record["metrics"]["max_abs_prob_error"] <= 1e-4          # fp32: rounding only
    assert record["segments_s"]["reference"] == record["segments_s"]["tflite"]
    assert len(record["segments_s"]["reference"]) >= 3


def test_verify_streams_on_gpu_fp16(pipeline, gpu):
    record = verify(pipeline, "host-gpu")
    assert record["passed"], record["log"]
    assert record["residency"].startswith("GPU residency: ") and "(strict GPU)" in record["residency"]
    assert record["metrics"]["max_abs_prob_error"] <= 0.01
    assert record["metrics"]["max_abs_prob_error"] > 0, "bit-identical to fp32: did it really run on the GPU?"
    assert record["metrics"]["max_boundary_shift_chunks"] <= 1
    assert record["judged_run"] == "streaming, own state"


def test_verify_on_host_native(pipeline, gpu):
    """The phone's runner (LiteRT C API) built for this machine runs the recipe's verify end to end through the
    phone's job folder: every chunk in one job, teacher-forced (the runner takes fixed inputs)."""
    record = verify(pipeline, "host-native")
    assert record["passed"], record["log"]
    assert record["residency"].startswith("GPU residency: ") and "(strict GPU)" in record["residency"]
    assert "native runner (LiteRT C API)" in record["device_label"] and "fp16" in record["device_label"]
    assert record["judged_run"] == "teacher-forced (runner job: fixed inputs)"
    assert 0 < record["metrics"]["max_abs_prob_error"] <= 0.01   # fp16 on the GPU, not an fp32 copy


def test_recipe_graph_native_matches_python(pipeline, gpu):
    """The recipe's graph through the native runner and through the Python path, on real speech chunks: CPU
    outputs bit-identical, GPU (fp16 and fp32) within fp16 tolerance, the same residency line."""
    from litert_gpu_toolkit.rewrites.output_aliasing import feed_one

    ref = np.load(pipeline["ref"])
    steps = steps_of(ref["audio"])
    chunks = range(20, len(steps), max(1, len(steps) // 6))   # speech and silence
    samples = [feed_one({"audio": steps[k:k + 1], "h": ref["h_in"][k:k + 1], "c": ref["c_in"][k:k + 1]})
               for k in chunks]
    key = read_model_info(pipeline["model"]).signatures[0].key
    report = compare_native_with_python(pipeline["model"], {key: samples},
                                        settings=(("cpu", False), ("gpu", False), ("gpu", True)))
    assert report["gpu"]["residency"] == report["gpu-fp32"]["residency"]
    assert "(strict GPU)" in report["gpu"]["residency"]
    print("native vs python, max |diff|:", {k: v["max_abs_diff"] for k, v in report.items()})


def test_segments_threshold_bridging_and_minimum_length():
    p = np.zeros(40, np.float32)
    p[2:12] = 0.9            # 10 chunks of speech
    p[14:24] = 0.8           # a 2-chunk gap before it: bridged when min_silence > 2
    p[30:33] = 0.7           # 3 chunks: dropped when min_speech > 3
    assert vad_net.segments(p, 0.5, min_speech=4, min_silence=3) == [(2, 24)]
    assert vad_net.segments(p, 0.5, min_speech=3, min_silence=2) == [(2, 12), (14, 24), (30, 33)]
    assert vad_net.segments(p, 0.85, min_speech=1, min_silence=1) == [(2, 12)]
    assert vad_net.segments(np.zeros(5), 0.5, 1, 1) == []


def test_rewrites_are_exact_in_torch():
    torch.manual_seed(0)
    x = torch.randn(2, 1, 576)
    assert torch.equal(vad_net.ReflectPadRight(64)(x), F.pad(x, (0, 64), mode="reflect"))
    net = vad_net.load_net()
    features = vad_net.SilenceReferencedFeatures(net)
    with torch.no_grad():
        for scale in (0.0, 1e-3, 1.0, 30.0):
            mag = scale * torch.rand(1, 129, 4)
            y = mag
            for conv in (net.conv1, net.conv2, net.conv3, net.conv4):
                y = F.relu(conv(y))
            got = features(mag) + features.feature_sil
            assert torch.allclose(got, y[:, :, 0], rtol=1e-5, atol=1e-4), scale


def test_wheel_safetensors_is_not_the_reference_weight_set():
    """Recorded in the README: silero-vad 6.2.3's safetensors differs from its TorchScript/ONNX weights.
    If this starts failing, a new release fixed it and the recipe could read the safetensors file instead."""
    ours, theirs = vad_net.reference_state_dict(), vad_net.safetensors_state_dict()
    assert set(ours) == set(theirs)
    assert torch.equal(ours["stft_conv.weight"], theirs["stft_conv.weight"])
    assert (ours["conv1.weight"] - theirs["conv1.weight"]).abs().max() > 1.0
