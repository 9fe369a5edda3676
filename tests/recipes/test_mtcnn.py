"""MTCNN recipe (models/vision/mtcnn): the host-side pipeline pieces, the torch pipeline on a real photo, and
export -> dump -> verify end to end on the GPU.

The end-to-end test runs the recipe's three scripts as subprocesses, as a user would, on two of the verify
photos (one face; two faces), writing everything -- results.json included -- under pytest's tmp_path.
"""
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

RECIPE = Path(__file__).resolve().parents[2] / "models" / "vision" / "mtcnn" / "converted"
sys.path.insert(0, str(RECIPE))
torch = pytest.importorskip("torch")
import mtcnn

from native_compare import compare_native_with_python, random_inputs  # tests/native_compare.py
import script_runner  # tests/script_runner.py: the one way the tests run a recipe script

E2E_PHOTOS = ["astronaut", "astronaut_pair"]


def run_script(name, *args, env=None, timeout=900):
    return script_runner.run_script(RECIPE / name, *args, env=env, timeout=timeout)


def test_nms_keeps_best_of_overlapping_boxes():
    boxes = np.array([[0, 0, 9, 9], [1, 1, 10, 10], [50, 50, 59, 59], [0, 0, 4, 4]], np.float32)
    scores = np.array([0.6, 0.9, 0.8, 0.7], np.float32)
    assert mtcnn.nms(boxes, scores, 0.5).tolist() == [1, 2, 3]          # box 0 overlaps box 1 (IoU 0.68)
    assert mtcnn.nms(boxes, scores, 0.5, mode="min").tolist() == [1, 2]  # box 3 lies inside box 1


def test_square_regress_and_pyramid():
    sq = mtcnn.square(np.array([[10, 20, 30, 60, 1.0]], np.float32))
    np.testing.assert_allclose(sq[0, :4], [0, 20, 40, 60])
    moved = mtcnn.regress(np.array([[0, 0, 9, 9, 1.0]], np.float32), np.array([[0.1, 0, -0.1, 0]], np.float32))
    np.testing.assert_allclose(moved[0, :4], [1, 0, 8, 9])
    sizes = mtcnn.pyramid_sizes(512, 512)
    assert sizes[0] == (308, 308) and sizes[-1][0] >= 12 and len(sizes) == 10
    assert mtcnn.box_iou(np.array([0, 0, 10, 10]), np.array([5, 0, 15, 10])) == pytest.approx(1 / 3)


def test_crops_zero_outside_the_image():
    img = np.full((20, 20, 3), 200, np.uint8)
    out = mtcnn.crops(img, np.array([[-9, -9, 10, 10, 1.0]], np.float32), 4)  # half the box is outside
    assert out.shape == (1, 4, 4, 3) and out[0, 0, 0, 0] == 0 and out[0, 3, 3, 0] == 200


def test_torch_pipeline_finds_the_astronaut_face():
    nets = {n: mtcnn.load_net(n) for n in mtcnn.NETS}
    found = mtcnn.detect([mtcnn.load_photo("astronaut"), mtcnn.load_photo("astronaut_flipped")],
                         *mtcnn.torch_runners(nets))
    face, flipped = found
    assert len(face.boxes) == 1 and face.scores[0] > 0.99
    # facenet-pytorch's own MTCNN reports about [181, 62, 268, 172] for this photo
    assert mtcnn.box_iou(face.boxes[0], np.array([181, 62, 268, 172])) > 0.9
    left_eye, right_eye = face.landmarks[0, 0], face.landmarks[0, 1]
    assert left_eye[0] < right_eye[0] and abs(left_eye[1] - right_eye[1]) < 10
    mirrored = np.array([512 - face.boxes[0, 2], face.boxes[0, 1], 512 - face.boxes[0, 0], face.boxes[0, 3]])
    assert len(flipped.boxes) == 1 and mtcnn.box_iou(flipped.boxes[0], mirrored) > 0.9


@pytest.mark.parametrize("kernel,size", [(3, 22), (2, 153)])  # the nets' SAME-padded pools (R-/O-Net, P-Net)
def test_ceil_mode_maxpool_is_exact_on_gpu_for_negative_inputs(gpu, tmp_path, kernel, size):
    """The nets' ceil-mode pools see PReLU outputs, which can be negative: a pool that padded with zeros would
    turn an all-negative edge window into 0. The converter emits MAX_POOL_2D (SAME or VALID); on the GPU the
    padded cells must be ignored."""
    from litert_gpu_toolkit.lowering.export import gpu_vs_torch

    pool = torch.nn.Sequential(torch.nn.MaxPool2d(kernel, 2, ceil_mode=True))
    x = -1 - torch.rand(1, 4, size, size)
    result = gpu_vs_torch(pool, (x,), tmp_path / "pool.tflite")
    assert result.ok, result.summary()
    assert set(result.info.op_histogram()) <= {"MAX_POOL_2D", "TRANSPOSE"}
    got = list(result.run.outputs.values())[0]["output_0"]
    np.testing.assert_allclose(got, pool(x).numpy(), atol=2e-3)  # fp16 rounding of values in [-2, -1]
    assert got.max() < -0.99


@pytest.mark.slow
def test_recipe_export_dump_verify_on_gpu(gpu, tmp_path):
    committed = (RECIPE / "results.json").read_text() if (RECIPE / "results.json").exists() else None
    run_script("export_mtcnn.py", "--model", str(tmp_path))
    smallest = min(tmp_path.glob("*.tflite"), key=lambda p: p.stat().st_size)   # CI's budget: one graph
    compare_native_with_python(smallest, random_inputs(smallest))   # the phone's runner built here = the Python path
    ref = tmp_path / "mtcnn_ref.npz"
    run_script("dump_mtcnn_ref.py", "--ref", str(ref), "--photos", *E2E_PHOTOS)
    env = dict(os.environ, LITERT_RESULTS_DIR=str(tmp_path))
    proc = run_script("verify_mtcnn.py", "--model", str(tmp_path), "--ref", str(ref), env=env)
    record = json.loads((tmp_path / "results.json").read_text())["mtcnn@host-gpu"]
    assert record["passed"], proc.stdout
    for net in ("pnet", "rnet", "onet"):
        assert f"{net}: GPU residency: " in record["residency"]
    assert record["residency"].count("(strict GPU)") == 3
    m = record["metrics"]
    assert m["faces_torch_device"] == [3, 3] and m["min_iou"] >= 0.95 and m["max_landmark_err_px"] < 3
    assert record["per_photo"]["astronaut_pair"]["faces_device"] == 2
    assert ((RECIPE / "results.json").read_text() if (RECIPE / "results.json").exists() else None) == committed
