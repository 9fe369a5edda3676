"""Ctrl-C that ends the process promptly, even while the main thread is inside native code.

Python runs its SIGINT handler (raising KeyboardInterrupt) only when the main thread next executes Python
bytecode. A long native call -- a torch op on a loaded machine, a converter pass, a regular expression that
backtracks -- can hold it off for minutes, and the user's Ctrl-C seems ignored. The C-level handler does run at
once, and writes the signal number to the wakeup file descriptor (`signal.set_wakeup_fd`): a watcher thread
reading that descriptor learns of the Ctrl-C immediately. It gives the main thread `grace_s` seconds to unwind
normally (KeyboardInterrupt, `finally` blocks, child process groups killed); if the process is still alive after
that, it says so and ends it with `os._exit(130)`. The runtime's worker processes need no help from us then:
each watches a pipe to this process and kills itself when the pipe closes (`runtime.compiled._run_worker`).
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading

EXIT_INTERRUPTED = 130


def _watch(reader: socket.socket, grace_s: float, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            data = reader.recv(64)
        except OSError:
            return
        if not data:
            return
        if signal.SIGINT in data and not stop.wait(grace_s):
            try:
                sys.stderr.write(f"interrupted: still busy in native code {grace_s:.0f} s after Ctrl-C; "
                                 "ending now (nothing recorded)\n")
                sys.stderr.flush()
            finally:
                os._exit(EXIT_INTERRUPTED)


@contextlib.contextmanager
def prompt_interrupt(grace_s: float = 5.0):
    """While active, a Ctrl-C ends the process within about `grace_s` seconds whatever the main thread is
    doing (see the module docstring). A no-op outside the main thread, or where SIGINT is ignored (a
    background job of a non-interactive shell) or handled by someone else."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    try:
        previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    except ValueError:                      # not the main thread of the main interpreter
        reader.close()
        writer.close()
        yield
        return
    stop = threading.Event()
    thread = threading.Thread(target=_watch, args=(reader, grace_s, stop), name="prompt-interrupt", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        signal.set_wakeup_fd(previous)
        writer.close()                      # the watcher's recv returns empty and it ends
        thread.join(timeout=1.0)
        reader.close()
