"""Load paths for verified libraries that cannot change between verification and dlopen.

The cache checks a library's bytes through an open file descriptor; `pin` then turns that
descriptor into the path the loader opens.  On Linux that path is ``/proc/self/fd/N``: it names
the very inode that was checked, whatever later happens to the cache entry's name.  The
descriptor stays open for the life of the process (a loaded library is never unloaded either),
which also keeps its number, and so the loader's record of the name, from being reused; a file
pinned twice is pinned once.  Elsewhere, and past a budget of half the open-file limit (one
descriptor per distinct library), the entry's own path is returned: the folder is private to
this user and every writer replaces entries atomically, so what can appear there is another
complete, checksummed build of the same key.

`elf_complete` catches what a checksum cannot: a library cut short whose checksum was taken
after the cut.  The dynamic loader maps segments past the end of such a file and the process
dies of SIGBUS on first touch, so it is refused before mapping.
"""

from __future__ import annotations

import atexit
import os
import shutil
import struct
import sys
import tempfile
from pathlib import Path

from tessera.base.forksafe import ForkSafeLock

__all__ = ["elf_complete", "keep_private", "pin"]

_PROC_FD = sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")
_lock = ForkSafeLock()
_pinned: dict[tuple[int, int], Path] = {}
_limit: int | None = None
_private_dir: list[Path] = []


def _read_at(fd: int, size: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # pragma: no cover - Windows
    return os.read(fd, size)


def elf_complete(fd: int, size: int) -> bool:
    """False if the file is an ELF object shorter than its headers say (or with malformed
    headers); True otherwise, non-ELF content included (the loader rejects that cleanly)."""
    head = _read_at(fd, 64, 0)
    if not head.startswith(b"\x7fELF"):
        return True
    wide, order = head[4:5] == b"\x02", {b"\x01": "<", b"\x02": ">"}.get(head[5:6])
    if order is None or head[4:5] not in (b"\x01", b"\x02") or len(head) < (64 if wide else 52):
        return False
    word = order + ("Q" if wide else "I")
    # (e_phoff, e_shoff, e_phentsize..e_shnum) offsets; p_offset and p_filesz in a program header.
    ph_at, sh_at, counts_at, off_at, filesz_at, entsize = (32, 40, 54, 8, 32, 56) if wide else (28, 32, 42, 4, 16, 32)
    (phoff,), (shoff,) = struct.unpack_from(word, head, ph_at), struct.unpack_from(word, head, sh_at)
    phent, phnum, shent, shnum = struct.unpack_from(order + "4H", head, counts_at)
    if (phnum and phent != entsize) or phoff + phnum * phent > size or shoff + shnum * shent > size:
        return False
    table = _read_at(fd, phnum * phent, phoff)
    if len(table) != phnum * phent:
        return False
    for i in range(phnum):
        (offset,) = struct.unpack_from(word, table, i * phent + off_at)
        (filesz,) = struct.unpack_from(word, table, i * phent + filesz_at)
        if offset + filesz > size:
            return False
    return True


def _budget() -> int:
    """How many descriptors pinning may hold: half the soft limit on open files."""
    global _limit
    if _limit is None:
        try:
            soft = os.sysconf("SC_OPEN_MAX")  # the soft RLIMIT_NOFILE, without importing resource
        except (AttributeError, OSError, ValueError):
            soft = 1024
        _limit = (1 << 20) if soft < 0 else soft // 2  # -1: no limit
    return _limit


def pin(fd: int, path: Path) -> Path:
    """The path to load the file open as `fd` from (see the module docstring); takes `fd` over.
    Past the descriptor budget (`_budget`), `path` is returned instead, as on other platforms."""
    st = os.fstat(fd)
    with _lock:
        known = _pinned.get((st.st_dev, st.st_ino))
        if known is None and _PROC_FD and len(_pinned) < _budget():
            known = _pinned[(st.st_dev, st.st_ino)] = Path(f"/proc/self/fd/{fd}")
            return known
    os.close(fd)
    return known or path


def keep_private(src: Path) -> Path:
    """A load path for a library built outside any usable cache, which stays valid after `src`
    is deleted: pinned on Linux, else moved into a folder of this process's removed at exit."""
    if _PROC_FD:
        pinned = pin(os.open(src, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)), src)
        if pinned != src:
            return pinned
    with _lock:
        if not _private_dir:
            _private_dir.append(Path(tempfile.mkdtemp(prefix="tessera-")))
            atexit.register(shutil.rmtree, _private_dir[0], True)
        dest = _private_dir[0] / src.name
    os.replace(src, dest)
    return dest
