"""Write a file so that a reader sees the old contents or the new ones, never half of them.

The text goes to a temporary file beside the target (created with O_EXCL under an unpredictable name, so no
one can plant a link there first), is flushed to disk, and is renamed over the target; the rename is then
made durable by syncing the folder. On failure the old file is untouched, the temporary file is removed, and
the OSError propagates for the caller to word.

The rename never follows a symbolic link: a link at the target is replaced by the new file, and whatever it
pointed to is left alone (in a shared folder, a planted link must not redirect the write). A target that is
a device or a FIFO (/dev/null, /dev/stdout, a named pipe someone reads) cannot be renamed over -- that would
replace the device node -- so it is written in place; a FIFO with no reader is an error (ENXIO), not a hang.
The new file keeps the permission bits of the regular file it replaces (else the usual 0666 less the umask).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
from pathlib import Path


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    try:
        target = os.stat(path)          # follows links: where would a plain open() write?
    except OSError:
        target = None
    if target is not None and not stat.S_ISREG(target.st_mode) and not stat.S_ISDIR(target.st_mode):
        _write_in_place(path, text)
        return
    mode = _mode_for(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _mode_for(path: Path) -> int:
    """Permission bits for the new file: those of the regular file it replaces, else 0666 less the umask."""
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _write_in_place(path: Path, text: str) -> None:
    """Write to a device or FIFO: opened without blocking (a FIFO with no reader fails with ENXIO at once)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OSError(errno.ENXIO, "a FIFO that no process is reading", str(path)) from None
        raise
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    with os.fdopen(fd, "w") as f:
        f.write(text)
