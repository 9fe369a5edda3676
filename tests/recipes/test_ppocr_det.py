"""PP-OCRv4 text-detection recipe (models/vision/ppocr_det): the ONNX -> torch loader, the host
post-processing, and export -> dump -> verify on the GPU at a reduced size.

The end-to-end test runs the recipe's three scripts as subprocesses at 160x256 on the rendered text image
(the README gives the 480x640 commands), writing everything -- results.json included -- under tmp_path.
"""
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

RECIPE = Path(__file__).resolve().parents[2] / "models" / "vision" / "ppocr_det" / "converted"
sys.path.insert(0, str(RECIPE))
torch = pytest.importorskip("torch")
import ppocr_det

from native_compare import compare_native_with_python, random_inputs  # tests/native_compare.py
import script_runner  # tests/script_runner.py: the one way the tests run a recipe script


def run_script(name, *args, env=None, timeout=900, ok=(0,)):
    return script_runner.run_script(RECIPE / name, *args, env=env, timeout=timeout, ok=ok)


def test_boxes_from_map_finds_components_and_grows_them():
    prob = np.zeros((1, 1, 64, 96), np.float32)
    prob[0, 0, 10:20, 10:50] = 0.9      # a text line
    prob[0, 0, 40:44, 60:62] = 0.9      # thinner than MIN_SIDE: noise
    prob[0, 0, 40:50, 70:90] = 0.4      # above THRESH but its mean is under BOX_THRESH
    found = ppocr_det.boxes_from_map(prob)
    assert len(found.boxes) == 1 and found.scores[0] == pytest.approx(0.9)
    grow = 10 * 40 * ppocr_det.UNCLIP_RATIO / (2 * 50)
    np.testing.assert_allclose(found.boxes[0], [10 - grow, 10 - grow, 50 + grow, 20 + grow], rtol=1e-6)
    assert ppocr_det.box_iou(np.array([0, 0, 10, 10]), np.array([5, 0, 15, 10])) == pytest.approx(1 / 3)
    assert ppocr_det.match(found.boxes, np.zeros((0, 4))) == [0.0]


def test_preprocess_matches_rapidocr_normalisation():
    img = np.zeros((32, 64, 3), np.uint8)
    img[..., 0] = 255                    # pure red, RGB
    x = ppocr_det.preprocess(img)
    assert x.shape == (1, 3, 32, 64) and x.dtype == np.float32
    np.testing.assert_array_equal(x[0, :, 0, 0], [-1, -1, 1])   # BGR order, (x / 255 - 0.5) / 0.5
    with pytest.raises(ValueError, match="multiples of 32"):
        ppocr_det.preprocess(np.zeros((30, 64, 3), np.uint8))


def test_torch_detector_finds_each_rendered_text_line():
    model = ppocr_det.load()
    assert sum(p.numel() for p in model.parameters()) > 1_000_000
    with torch.no_grad():
        prob = model(torch.from_numpy(ppocr_det.preprocess(ppocr_det.image("rendered", 160, 256)))).numpy()
    found = ppocr_det.boxes_from_map(prob)
    assert len(found.boxes) == len(ppocr_det.TEXT_LINES)
    tops = found.boxes[:, 1]
    assert np.all(np.diff(tops) > 20)                  # one box per line, top to bottom
    blank = np.full((160, 256, 3), 235, np.uint8)
    with torch.no_grad():
        empty = model(torch.from_numpy(ppocr_det.preprocess(blank))).numpy()
    assert len(ppocr_det.boxes_from_map(empty).boxes) == 0


@pytest.mark.slow
def test_recipe_export_dump_verify_on_gpu(gpu, tmp_path):
    committed = (RECIPE / "results.json").read_text() if (RECIPE / "results.json").exists() else None
    size = ["--height", "160", "--width", "256"]
    tflite, ref = tmp_path / "det.tflite", tmp_path / "det_ref.npz"
    exported = run_script("export_det.py", *size, "--model", str(tflite)).stdout
    assert "patch_hardsigmoid" in exported and "patch_conv_transpose" in exported
    compare_native_with_python(tflite, random_inputs(tflite))   # the phone's runner built here = the Python path
    run_script("dump_det_ref.py", *size, "--ref", str(ref), "--images", "rendered")
    env = dict(os.environ, LITERT_RESULTS_DIR=str(tmp_path))
    proc = run_script("verify_det.py", *size, "--model", str(tflite), "--ref", str(ref), env=env)
    record = json.loads((tmp_path / "results.json").read_text())["det@host-gpu"]
    assert record["passed"], proc.stdout
    assert "(strict GPU)" in record["residency"]
    m = record["metrics"]
    assert m["boxes_torch"] == m["boxes_device"] == len(ppocr_det.TEXT_LINES)
    assert m["min_box_iou"] >= 0.9 and m["min_map_corr"] >= 0.999
    assert ((RECIPE / "results.json").read_text() if (RECIPE / "results.json").exists() else None) == committed


def test_verify_plan_needs_a_gpu_device_and_the_plan_file(tmp_path):
    """--plan runs part0 in fp32 on the GPU: the CPU is refused, and so is a plan.json that is not there."""
    cpu = run_script("verify_det.py", "--plan", str(tmp_path / "plan.json"), "--device", "cpu", ok=(2,))
    assert "--plan runs on a GPU device" in cpu.stderr
    missing = run_script("verify_det.py", "--plan", str(tmp_path / "plan.json"), ok=(2,))
    assert "no such file" in missing.stderr


@pytest.mark.slow
def test_precision_plan_export_and_verify_on_gpu(gpu, tmp_path):
    """export_det.py --fp32-until writes two strict-GPU graphs and plan.json; verify_det.py --plan runs the chain
    (part0 fp32, part1 fp16) and records one row named after the plan's folder."""
    committed = (RECIPE / "results.json").read_text() if (RECIPE / "results.json").exists() else None
    size = ["--height", "160", "--width", "256"]
    folder, ref = tmp_path / "det_plan", tmp_path / "det_ref.npz"
    out = run_script("export_det.py", *size, "--fp32-until", "p2o/Relu/10", "--model", str(folder)).stdout
    assert "part0.tflite" in out and "part1.tflite" in out
    plan = json.loads((folder / "plan.json").read_text())
    assert [g["fp32"] for g in plan["graphs"]] == [True, False]
    assert [g["path"] for g in plan["graphs"]] == ["part0.tflite", "part1.tflite"]   # relative: the plan moves
    run_script("dump_det_ref.py", *size, "--ref", str(ref), "--images", "rendered")
    env = dict(os.environ, LITERT_RESULTS_DIR=str(tmp_path))
    proc = run_script("verify_det.py", *size, "--plan", str(folder / "plan.json"), "--ref", str(ref), env=env)
    record = json.loads((tmp_path / "results.json").read_text())["det_plan@host-gpu"]
    assert record["passed"], proc.stdout
    assert record["residency"].count("(strict GPU)") == 2 and "part0 (fp32)" in record["residency"]
    assert record["metrics"]["boxes_device"] == len(ppocr_det.TEXT_LINES)
    assert ((RECIPE / "results.json").read_text() if (RECIPE / "results.json").exists() else None) == committed


def test_export_refuses_a_cut_that_is_not_a_module(tmp_path):
    proc = run_script("export_det.py", "--height", "64", "--width", "64", "--fp32-until", "p2o/NoSuch/0",
                      "--model", str(tmp_path / "x"), ok=(2,))
    assert "p2o/NoSuch/0" in proc.stderr
