"""Real-ESRGAN animevideov3 recipe end to end on the software GPU: export -> dump -> verify (reduced size).

CI runs 64x64 tiles on a 96x96 crop of one photo (4 tiles) for x4 and x3; the README gives the
full-size commands. The x3 graph exercises the bicubic-resize rewrite (plain conversion hits GATHER_ND).
"""
import json
import os
from pathlib import Path

import pytest

from native_compare import compare_native_with_python, random_inputs  # tests/native_compare.py
import script_runner  # tests/script_runner.py: the one way the tests run a recipe script

RECIPE = Path(__file__).resolve().parents[2] / "models" / "vision" / "realesrgan_animevideov3" / "converted"


def _run(args, env):
    return script_runner.run_script(RECIPE / args[0], *args[1:], env=env, timeout=1200).stdout


@pytest.mark.slow
@pytest.mark.parametrize("scale", [4, 3])
def test_recipe_end_to_end(gpu, tmp_path, scale):
    env = {**os.environ, "LITERT_RESULTS_DIR": str(tmp_path)}
    tile = ["--scale", str(scale), "--tile", "64"]
    exported = _run(["export_sr.py", *tile], env)
    graph = RECIPE / "artifacts" / f"realesrgan_x{scale}_t64.tflite"
    if scale == 3:   # the phone's runner built here = the Python path (one scale: CI's budget)
        compare_native_with_python(graph, random_inputs(graph))
        assert "patch_interpolate" in exported or "rewrites" in exported
    _run(["dump_sr_ref.py", *tile, "--crop", "96", "--photos", "astronaut"], env)
    verified = _run(["verify_sr.py", *tile], env)
    assert "(strict GPU)" in verified
    record = json.loads((tmp_path / "results.json").read_text())[f"x{scale}_t64@host-gpu"]
    assert record["passed"], record
    assert record["metrics"]["psnr_db_astronaut"] >= 45.0
    assert (RECIPE / "artifacts" / "compare_astronaut.png").exists()
