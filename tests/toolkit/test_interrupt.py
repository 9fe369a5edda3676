"""Ctrl-C ends a command within seconds even while the main thread is inside native code (`core.interrupt`).

Before: Python raises KeyboardInterrupt only when the main thread returns to bytecode, so a Ctrl-C during a long
native call (here LAPACK, in the field a torch op or the converter on a loaded machine) was held off for as long
as the call ran; a recipe's verify on the CPU did not end within 60 s."""
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from litert_gpu_toolkit.recipe import WRITE_INTERRUPTED, script_main, verify_main

UTILITIES = Path(__file__).resolve().parents[2] / "utilities"

BUSY = textwrap.dedent("""
    import signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)   # as a terminal starts it (a background shell ignores it)
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    from litert_gpu_toolkit.core.interrupt import prompt_interrupt
    a = np.random.default_rng(0).standard_normal((2500, 2500))
    print("ready", flush=True)
    with prompt_interrupt(grace_s=float(sys.argv[2])):
        for _ in range(50):
            np.linalg.svd(a)        # native: never checks for signals
    print("finished")
""")


def _interrupt(tmp_path, grace_s: float, wait_s: float):
    script = tmp_path / "busy.py"
    script.write_text(BUSY)
    proc = subprocess.Popen([sys.executable, str(script), str(UTILITIES), str(grace_s)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=wait_s)
        return proc.returncode, time.monotonic() - start, out, err
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None, time.monotonic() - start, "", ""


def test_ctrl_c_inside_native_code_ends_the_process_after_the_grace_time(tmp_path):
    code, took, out, err = _interrupt(tmp_path, grace_s=2, wait_s=30)
    assert code == 130 and took < 15, (code, took, err)
    assert "still busy in native code" in err and "finished" not in out


def test_without_the_watcher_the_same_ctrl_c_waits_for_the_native_call(tmp_path):
    """The control: a grace longer than the wait is no watcher at all, and the process is still running."""
    code, took, _, _ = _interrupt(tmp_path, grace_s=1000, wait_s=6)
    assert code is None, f"ended ({code}) {took:.1f} s after Ctrl-C: the busy loop no longer shows the fault"


def test_verify_main_turns_ctrl_c_into_exit_130(capsys):
    def main():
        raise KeyboardInterrupt

    assert verify_main(main) == 130
    assert "interrupted; nothing recorded" in capsys.readouterr().err
    assert script_main(main, interrupted=WRITE_INTERRUPTED) == 130
    assert f"interrupted; {WRITE_INTERRUPTED}" in capsys.readouterr().err


@pytest.mark.parametrize("handler", [signal.SIG_IGN])
def test_an_ignored_sigint_stays_ignored(handler):
    """A background job of a non-interactive shell starts with SIGINT ignored: the watcher must not change it."""
    from litert_gpu_toolkit.core.interrupt import prompt_interrupt

    old = signal.signal(signal.SIGINT, handler)
    try:
        with prompt_interrupt():
            assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, old)
