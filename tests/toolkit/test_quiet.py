"""Quiet conversions: the converter's chatter goes to a log file, the toolkit prints one line a stage."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import sys, torch
from litert_gpu_toolkit import convert_for_gpu
m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())
r = convert_for_gpu(m, (torch.randn(1, 3, 16, 16),), sys.argv[1], check=False)
print("VERDICT", r.verdict)
"""


def _convert(tmp_path, **env):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "m.tflite")], capture_output=True, text=True,
                         timeout=600, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout + out.stderr


@pytest.mark.slow
def test_a_conversion_prints_only_the_toolkits_lines_and_keeps_the_log(tmp_path):
    text = _convert(tmp_path, LITERT_GPU_VERBOSE="0")
    assert "VERDICT UNCHECKED" in text and "[litert-gpu] converting" in text
    assert "LiteRT-Torch Convert" not in text and "FutureWarning" not in text, text[-2000:]
    log = tmp_path / "m.tflite.convert.log"
    assert log.exists() and "Convert" in log.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tflite", "m.tflite.convert.log"]


@pytest.mark.slow
def test_verbose_shows_the_converter_live(tmp_path):
    text = _convert(tmp_path, LITERT_GPU_VERBOSE="1")
    assert "LiteRT-Torch Convert" in text


def test_a_failure_inside_the_block_names_the_log(tmp_path, capfd):
    from litert_gpu_toolkit.core.quiet import converter_output

    log = tmp_path / "x.log"
    with pytest.raises(RuntimeError), converter_output(log, verbose=False):
        os.write(1, b"native chatter\n")
        os.write(2, b"native warning\n")
        raise RuntimeError("boom")
    err = capfd.readouterr()
    assert "native chatter" not in err.out and "native warning" not in err.err
    assert f"output is in {log}" in err.err
    assert "native chatter" in log.read_text() and "native warning" in log.read_text()


def test_verbose_flag_turns_the_converter_output_on(monkeypatch):
    """`--verbose` on an export / dump script or `bisect` is the same switch as LITERT_GPU_VERBOSE=1."""
    import argparse

    from litert_gpu_toolkit.core.arguments import add_verbose_argument
    from litert_gpu_toolkit.core.quiet import VERBOSE_ENV, verbose_from_env

    monkeypatch.setenv(VERBOSE_ENV, "0")
    parser = argparse.ArgumentParser()
    add_verbose_argument(parser)
    assert parser.parse_args([]).verbose is False and not verbose_from_env()
    assert parser.parse_args(["--verbose"]).verbose is True and verbose_from_env()


def test_python_prints_are_captured_when_sys_stdout_is_not_fd_1(tmp_path, capsys):
    """Under pytest's capture or in a notebook sys.stdout is its own stream, not fd 1: it is redirected too."""
    import warnings

    from litert_gpu_toolkit.core.quiet import converter_output

    log = tmp_path / "x.log"
    before = len(os.listdir("/proc/self/fd"))
    with converter_output(log, verbose=False):
        print("python chatter")
        print("python warning line", file=sys.stderr)
        warnings.warn("a FutureWarning of the converter", FutureWarning)
    seen = capsys.readouterr()
    assert "chatter" not in seen.out and "warning line" not in seen.err and "FutureWarning" not in seen.err
    text = log.read_text()
    assert "python chatter" in text and "python warning line" in text and "FutureWarning" in text
    assert len(os.listdir("/proc/self/fd")) == before          # the saved descriptors are closed again
    print("after")
    assert capsys.readouterr().out == "after\n"
