"""Kill a child's whole process group, and return only once none of it is left running.

`os.killpg(..., SIGKILL)` only queues the signal: a process in the middle of a page fault or a driver call
dies a moment later, and a worker's own children are not ours to `wait()` for. `kill_group` therefore
polls /proc until no live (non-zombie) member of the group remains, for at most `timeout` seconds, so a
caller that returns after it can promise the worker did not outlive the call. Linux only, like the workers.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def live_members(pgid: int) -> list[int]:
    """Processes of group `pgid` that are still running (zombies, which only wait to be reaped, are not)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()       # after "(comm)": state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def kill_group(pgid: int, timeout: float = 5.0) -> bool:
    """SIGKILL every process in group `pgid`; True once none is left running (False: still there after `timeout`)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return not live_members(pgid)
    deadline = time.monotonic() + timeout
    while live_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
