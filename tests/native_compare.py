"""The native runner against the Python path on one model: what `--device host-native` must reproduce.

`compare_native_with_python(model, inputs)` runs the same inputs through the native runner (phone/native.py:
the phone's C-API runner built for this machine) and through `runtime.compile_and_run` (the Python binding), on
the CPU and the GPU (fp16; pass `settings` to add the GPU with enforce_f32), and asserts: the same status, the same
residency line, the same runtime fact "fully accelerated" (which must be true after a GPU-only compile; on the CPU it
is false whenever XNNPack leaves an op, e.g. an embedding lookup, to the reference kernels), CPU outputs
bit-identical, GPU outputs within fp16 tolerance. It returns the largest differences it measured.
"""
from __future__ import annotations

import numpy as np

from litert_gpu_toolkit.core.model_info import numpy_dtype, read_model_info
from litert_gpu_toolkit.phone.native import run_native
from litert_gpu_toolkit.runtime.residency import residency_line
from litert_gpu_toolkit.runtime.compiled import compile_and_run

SETTINGS = (("cpu", False), ("gpu", False))
FP16_REL = 1e-2   # GPU tolerance: 1% of the output's largest magnitude (fp16 holds ~3 significant digits)


def random_inputs(model_path, seed: int = 0) -> dict:
    """Inputs for every signature of the model: seeded normal floats, zeros for integer and bool inputs (so that
    an index input stays in range). Both paths get the same arrays; what is compared is the two paths."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for sig in read_model_info(model_path).signatures:
        named = {}
        for name, tensor in sig.inputs.items():
            dtype = numpy_dtype(tensor.dtype)
            named[name] = (rng.standard_normal(tensor.shape).astype(dtype) if dtype.kind == "f"
                           else np.zeros(tensor.shape, dtype))
        inputs[sig.key] = named
    return inputs


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def compare_native_with_python(model_path, inputs: dict, settings=SETTINGS, timeout: float = 600) -> dict:
    info = read_model_info(model_path)
    report = {}
    for accelerator, enforce_f32 in settings:
        label = accelerator + ("-fp32" if enforce_f32 else "")
        native = run_native(model_path, inputs, accelerator=accelerator, enforce_f32=enforce_f32, timeout=timeout)
        python = compile_and_run(model_path, inputs, accelerator=accelerator, enforce_f32=enforce_f32,
                                 timeout=timeout)
        where = f"{label}: native {native.status} ({native.error}), python {python.status} ({python.error})"
        assert native.status == python.status, where + "\n" + native.log_tail(30)
        line = residency_line(info, native)
        assert line == residency_line(info, python), where
        worst = 0.0
        if python.ok:
            assert native.fully_accelerated == python.fully_accelerated, \
                f"{label}: the runtime's own fact 'fully accelerated': native {native.fully_accelerated}, " \
                f"python {python.fully_accelerated}"
            if accelerator == "gpu":
                assert native.fully_accelerated is True, f"{label}: a GPU-only compile that is not fully accelerated"
            assert set(native.outputs) == set(python.outputs), where
            for key, named in python.outputs.items():
                assert list(native.outputs[key]) == list(named), f"{label} {key}: output names / order"
                for name, want in named.items():
                    got = native.outputs[key][name]
                    assert got.shape == want.shape and got.dtype == want.dtype, f"{label} {key}/{name}"
                    if accelerator == "cpu":
                        assert _bits(got) == _bits(want), f"{label} {key}/{name}: CPU outputs must be bit-identical"
                    elif not np.array_equal(got, want, equal_nan=True):
                        # the same non-finite values in the same places, then a tolerance on the finite ones
                        bad = ~np.isfinite(want)
                        assert np.array_equal(got[bad], want[bad], equal_nan=True) and np.isfinite(got[~bad]).all(), \
                            f"{label} {key}/{name}: NaN / inf differ"
                        finite = want[~bad].astype(np.float64)
                        scale = max(1.0, float(np.abs(finite).max()) if finite.size else 1.0)
                        diff = float(np.abs(got[~bad] - finite).max()) if finite.size else 0.0
                        assert diff <= FP16_REL * scale, f"{label} {key}/{name}: |native - python| = {diff}"
                        worst = max(worst, diff)
        report[label] = {"status": native.status, "residency": line, "max_abs_diff": worst}
    return report
