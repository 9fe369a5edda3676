"""The zoo's weights mode (`zoo/run.py --weights MODE`): a row PASSes only when its quantized file does, and the
row keeps the quantize line either way (the conversions themselves run in `zoo/run.py`)."""
from types import SimpleNamespace

import pytest

from litert_zoo.cli import add_arguments
from litert_zoo.rows import RunSummary
from litert_zoo.runner import _weights
from litert_zoo.weights import WEIGHTS_ENV, weights_mode


def _quantized(ok: bool, line: str, fidelity=None):
    return SimpleNamespace(ok=ok, line=lambda: line, fidelity=fidelity or {})


def test_a_float_file_kept_instead_is_no_pass():
    summary = RunSummary("PASS", corr_fp16=1.0, corr_fp32=1.0)
    _weights(summary, SimpleNamespace(quantized=_quantized(False, "int8: not applied, ...: corr 0.5 < 0.99")))
    assert summary.verdict == "QUANT_FAIL" and "corr 0.5" in summary.note and summary.weights.startswith("int8:")


def test_a_quantized_pass_reports_the_quantized_files_corr():
    summary = RunSummary("PASS", corr_fp16=1.0, corr_fp32=1.0)
    _weights(summary, SimpleNamespace(quantized=_quantized(True, "int8: 3 of 3", {"s/out": 0.9991, "s/o2": 0.998})))
    assert summary.verdict == "PASS" and summary.corr_fp16 == 0.998 and summary.weights == "int8: 3 of 3"


def test_the_mode_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(WEIGHTS_ENV, "int4")
    assert weights_mode() == "int4"
    monkeypatch.setenv(WEIGHTS_ENV, "int3")
    with pytest.raises(ValueError, match="expected one of"):
        weights_mode()


def test_the_cli_takes_weights():
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    assert p.parse_args(["--weights", "int8"]).weights == "int8"
    with pytest.raises(SystemExit):
        p.parse_args(["--weights", "int3"])
