"""MobileNetV2 recipe (models/vision/mobilenet_v2): the architecture loads torchvision's weights, the
preprocessing and class names are right, and export -> dump -> verify passes end to end on the GPU.

The end-to-end test runs the recipe's three scripts as subprocesses, as a user would, on three photos
(one GPU compile), writing everything -- results.json included -- under pytest's tmp_path.
"""
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

RECIPE = Path(__file__).resolve().parents[2] / "models" / "vision" / "mobilenet_v2" / "converted"
sys.path.insert(0, str(RECIPE))
torch = pytest.importorskip("torch")
import mobilenet_v2 as mnv2

from native_compare import compare_native_with_python, random_inputs  # tests/native_compare.py
import script_runner  # tests/script_runner.py: the one way the tests run a recipe script

PHOTOS = ["chelsea", "coffee", "astronaut"]


def run_script(name, *args, env=None, timeout=900):
    return script_runner.run_script(RECIPE / name, *args, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def model():
    return mnv2.load_model()


def test_class_names_file():
    names = mnv2.class_names()
    assert len(names) == 1000 and names[0] == "tench" and names[285] == "Egyptian cat" and names[967] == "espresso"


def test_preprocess_is_imagenet_eval_transform():
    x = mnv2.preprocess(mnv2.load_photo("chelsea"))  # 300x451 photo
    assert x.shape == (1, 3, 224, 224) and x.dtype == np.float32
    white = mnv2.preprocess(np.full((300, 400, 3), 255, np.uint8))
    np.testing.assert_allclose(white[0, :, 0, 0], (1 - mnv2.MEAN) / mnv2.STD, rtol=1e-5)
    assert mnv2.load_photo("camera").shape == (512, 512, 3)  # grey photo -> three channels


def test_torchvision_weights_classify_real_photos(model):
    assert sum(p.numel() for p in model.parameters()) == 3_504_872  # torchvision mobilenet_v2's count
    x = torch.from_numpy(np.concatenate([mnv2.preprocess(mnv2.load_photo(p)) for p in ("chelsea", "coffee")]))
    with torch.no_grad():
        prob = model(x).softmax(-1)
    assert prob.argmax(-1).tolist() == [285, 967]  # Egyptian cat, espresso
    assert prob[1, 967] > 0.9


@pytest.mark.slow
def test_recipe_export_dump_verify_on_gpu(gpu, tmp_path):
    tflite, ref = tmp_path / "classifier.tflite", tmp_path / "classifier_ref.npz"
    committed = (RECIPE / "results.json").read_text() if (RECIPE / "results.json").exists() else None
    run_script("export_classifier.py", "--model", str(tflite))
    compare_native_with_python(tflite, random_inputs(tflite))   # the phone's runner built here = the Python path
    run_script("dump_classifier_ref.py", "--ref", str(ref), "--photos", *PHOTOS)
    env = dict(os.environ, LITERT_RESULTS_DIR=str(tmp_path))
    proc = run_script("verify_classifier.py", "--model", str(tflite), "--ref", str(ref), env=env)
    record = json.loads((tmp_path / "results.json").read_text())["classifier@host-gpu"]
    assert record["passed"], proc.stdout
    assert record["residency"] == f"GPU residency: {record['ops']}/{record['ops']} ops, 1 partition (strict GPU)"
    assert record["metrics"]["top1_agreement"] == 1.0 and record["metrics"]["min_logits_corr"] >= 0.999
    assert record["metrics"]["nonfinite"] == 0 and record["metrics"]["photos"] == len(PHOTOS)
    assert record["per_photo"]["chelsea"]["top5_device"][0] == "Egyptian cat"
    assert "Egyptian cat (285)" in proc.stdout  # names printed, not just indices
    assert ((RECIPE / "results.json").read_text() if (RECIPE / "results.json").exists() else None) == committed
