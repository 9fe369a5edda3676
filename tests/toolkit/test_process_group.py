"""kill_group returns only when nothing of the group is left running: grandchildren included."""
import os
import subprocess
import time

from litert_gpu_toolkit.runtime.process_group import kill_group, live_members


def test_kill_group_waits_for_every_member_grandchildren_included():
    # a shell that starts two grandchildren and waits: three live members in one new process group
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True)
    deadline = time.monotonic() + 10
    while len(live_members(proc.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(live_members(proc.pid)) == 3
    assert kill_group(proc.pid) is True
    assert live_members(proc.pid) == []
    proc.wait(timeout=10)


def test_kill_group_of_a_gone_group_is_true():
    proc = subprocess.Popen(["true"], start_new_session=True)
    proc.wait(timeout=10)
    assert kill_group(proc.pid) is True
    assert os.getpgid(0) != proc.pid
