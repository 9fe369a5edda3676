"""runtime.Session: one in-process compile for stateful loops (SmolLM2 decode, Silero VAD stream)."""
from __future__ import annotations

import numpy as np
import pytest

from litert_gpu_toolkit import recipe
from litert_gpu_toolkit.runtime.compiled import Session
from litert_gpu_toolkit.runtime.tiny_models import PROBE_SHAPE, add_model_bytes


@pytest.fixture
def add_model(tmp_path):
    path = tmp_path / "add.tflite"
    path.write_bytes(add_model_bytes())
    return path


def _loop(session: Session) -> list[float]:
    """Feed each output back in as the next `x`, with `y` written once: out_k = x_0 + k * y."""
    x, y = np.full(PROBE_SHAPE, 0.5, np.float32), np.full(PROBE_SHAPE, 0.25, np.float32)
    seen = []
    for k in range(4):
        out = session.run({"x": x, **({"y": y} if k == 0 else {})})["out"]
        seen.append(float(out.reshape(-1)[0]))
        x = out
    return seen


def test_cpu_session_carries_state_and_keeps_unwritten_inputs(add_model):
    with Session(add_model, accelerator="cpu") as s:
        assert s.input_names == ["x", "y"] and s.output_names == ["out"]
        assert _loop(s) == [0.75, 1.0, 1.25, 1.5]
        with pytest.raises(KeyError, match="has no inputs"):
            s.run({"z": np.zeros(PROBE_SHAPE, np.float32)})
    assert len(s.seconds) == 4 and all(t > 0 for t in s.seconds)
    with pytest.raises(RuntimeError, match="outside its `with` block"):
        s.run({"x": np.zeros(PROBE_SHAPE, np.float32)})


def test_gpu_session_is_strict_and_matches(gpu, add_model):
    with recipe.open_session(add_model, "host-gpu") as s:
        assert s.accelerator == "gpu" and not s.enforce_f32
        assert _loop(s) == [0.75, 1.0, 1.25, 1.5]   # exact in fp16 too (multiples of 1/4)


def test_open_session_maps_devices_and_refuses_phones(add_model):
    assert recipe.open_session(add_model, "host-gpu-fp32").enforce_f32
    assert recipe.open_session(add_model, "cpu").accelerator == "cpu"
    with pytest.raises(recipe.DeviceError, match="pixel8 is a phone"):
        recipe.open_session(add_model, "pixel8")
    with pytest.raises(recipe.DeviceError, match="host-native is the native runner.*fixed inputs"):
        recipe.open_session(add_model, "host-native")
    with pytest.raises(recipe.DeviceError, match="unknown device"):
        recipe.open_session(add_model, "toaster")
    with pytest.raises(ValueError, match="accelerator"):
        Session(add_model, accelerator="gpu+cpu")
