"""Opening the files a command reads: a regular file or a clear refusal, never a hang.

`open(path)` on a FIFO that no process writes to blocks forever, and /dev/zero or a terminal read as a model
or an .npz never ends either. `open_regular` therefore opens with O_NONBLOCK (which never blocks, whatever
the path is by then: a stat() before the open could be raced), checks what it opened with fstat(), and
only then hands back an ordinary blocking file object. Anything but a regular file raises
`SpecialFileError` naming what it is; a folder raises IsADirectoryError, so callers word it as before.

`same_file` tells whether two spellings (./, .., a symbolic or a hard link) name one file: an output path
must never be one of the command's inputs.
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat

# st_mode file type -> what to call it in a message
_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


class SpecialFileError(ValueError):
    """The path is a FIFO, a device or a socket, not a regular file (the message says which)."""


def kind(mode: int) -> str:
    """What a file of this st_mode is, in words ("a FIFO (named pipe)", "a regular file", ...)."""
    return _KINDS.get(stat.S_IFMT(mode), "a regular file" if stat.S_ISREG(mode) else "not a regular file")


def open_regular(path: str | os.PathLike):
    """`open(path, "rb")` for a regular file (links followed); SpecialFileError for a FIFO, device or socket,
    IsADirectoryError for a folder, the usual OSError for the rest. Never blocks on a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise SpecialFileError(f"{path}: {kind(mode)}, not a regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def special_file_problem(path: str | os.PathLike) -> str | None:
    """Why `path` is no file to read (by stat alone, nothing opened): a FIFO, a device, a socket; else None
    (a regular file, a folder, or a path that does not exist: the caller's open says what is wrong)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return f"{path}: {kind(mode)}, not a regular file"


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Do `a` and `b` name the same existing file (links followed, hard links included)?"""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False
