"""Writing `tesserac`'s output without harming what the path names.

- ``-`` is standard output.
- A regular file, or a path where nothing exists yet, is replaced atomically: the data goes to a
  temporary file in the same folder, renamed over the path at the end, so that a failed or
  interrupted run leaves the old file whole. An existing file keeps its permission bits; a new
  one gets 0666 less the umask, as a plain `open()` would create it.
- A symbolic link is followed: its final target is written as above, and the link stays a link.
- Anything else that exists (a device such as /dev/null, a FIFO, a socket) is opened and written
  through, never replaced: renaming a file over /dev/null would destroy the device node.
- The input file is never an output (as with gcc): `is_input` tells the command line to refuse it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile


def is_input(input_path: str, output_path: str) -> bool:
    """Whether writing `output_path` would overwrite the regular file `input_path` (the same file,
    also through a symbolic or hard link)."""
    try:
        a, b = os.stat(input_path), os.stat(output_path)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(a.st_mode) and (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def write_output(path: str, data: str | bytes) -> None:
    """Write `data` to `path` as the module docstring says; raises OSError."""
    if path == "-":
        if isinstance(data, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
        else:
            sys.stdout.write(data)
        sys.stdout.flush()
        return
    raw = data.encode("utf-8") if isinstance(data, str) else data
    target = os.path.realpath(path)  # through every link; for a dangling link, the file it names
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(target, "wb") as f:
            f.write(raw)
        return
    _replace(target, raw, stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())


def _replace(target: str, raw: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".tesserac-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(mask)
    return mask
