"""File-system primitives of the on-disk cache: trusted folders and no-follow file access.

The cache runs code it finds on disk (it dlopens cached libraries), so whoever can write its
folders could run code in every process that uses them.  This module decides what is trusted
(`untrusted_reason`: a folder or file that is ours and not writable by group or others) and keeps
that decision true while the folder is used: `open_folder` walks the root and each subfolder
with ``O_NOFOLLOW | O_DIRECTORY`` and checks what it opened with `fstat`, and `Folder` then
opens, renames and deletes only names inside that open folder (``dir_fd``), never following a
symbolic link, so a folder or entry swapped after the check is never the one used.

Where the platform lacks ``dir_fd`` or owners (Windows), paths are used instead and the owner and
permission checks are skipped; symbolic links are still refused.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path

try:  # POSIX only; without it the cache relies on its readers' re-checks alone.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_AT = {os.open, os.stat, os.unlink, os.rename, os.mkdir} <= os.supports_dir_fd and _O_DIRECTORY != 0
_OWNERS = hasattr(os, "geteuid")
DIR_MODE, FILE_MODE = 0o700, 0o600


class UntrustedError(OSError):
    """A cache folder or entry that someone other than this user could have written."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(errno.EPERM, reason, str(path))
        self.path, self.reason = str(path), reason


def untrusted_reason(st: os.stat_result, *, folder: bool) -> str | None:
    """Why an object with this (l)stat must not be trusted, or None when it may."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not (stat.S_ISDIR if folder else stat.S_ISREG)(st.st_mode):
        return "is not a folder" if folder else "is not a regular file"
    if _OWNERS:
        if st.st_uid != os.geteuid():
            return f"is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
        if st.st_mode & 0o022:
            return f"is writable by {'group and others' if st.st_mode & 0o002 else 'its group'} " \
                   f"(mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _check(st: os.stat_result, path: Path | str, *, folder: bool) -> None:
    reason = untrusted_reason(st, folder=folder)
    if reason is not None:
        raise UntrustedError(path, reason)


def _open_nofollow(name: str, flags: int, path: Path | str, *, dir_fd: int | None = None, mode: int = FILE_MODE) -> int:
    try:
        return os.open(name, flags | O_NOFOLLOW | _O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as e:
        # O_NOFOLLOW refuses a link with ELOOP (EMLINK on FreeBSD), or with ENOTDIR when
        # O_DIRECTORY asks for a folder.
        if e.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR) and _is_link(name, dir_fd):
            raise UntrustedError(path, "is a symbolic link") from None
        raise


def _is_link(name: str, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


class Folder:
    """A verified, open folder; every name is resolved inside it, never through a link."""

    can_lock = fcntl is not None

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path, self.fd = path, fd
        if fd is not None:
            weakref.finalize(self, os.close, fd)

    def _at(self, name: str) -> tuple[str, int | None]:
        return (name, self.fd) if self.fd is not None else (str(self.path / name), None)

    def open(self, name: str, flags: int, mode: int = FILE_MODE) -> int:
        """An fd for `name` (no link followed); UntrustedError if it is a link."""
        at, fd = self._at(name)
        return _open_nofollow(at, flags, self.path / name, dir_fd=fd, mode=mode)

    def open_trusted(self, name: str) -> tuple[int, os.stat_result]:
        """(fd, fstat) of the regular file `name`, read-only; UntrustedError if it is not ours
        or others can write it, FileNotFoundError if it is missing."""
        fd = self.open(name, os.O_RDONLY)
        try:
            st = os.fstat(fd)
            _check(st, self.path / name, folder=False)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def unlink(self, *names: str) -> list[str]:
        """Delete these names (files or links, never what a link points at); those deleted."""
        done = []
        for name in names:
            at, fd = self._at(name)
            with contextlib.suppress(OSError):
                os.unlink(at, dir_fd=fd)
                done.append(name)
        return done

    def replace(self, src: str, dst: str) -> None:
        (a, fd), (b, _) = self._at(src), self._at(dst)
        os.replace(a, b, src_dir_fd=fd, dst_dir_fd=fd)

    def entries(self) -> Iterator[os.DirEntry]:
        """The folder's regular files (links and subfolders left out)."""
        with os.scandir(self.fd if self.fd is not None else self.path) as it:
            yield from (e for e in it if e.is_file(follow_symlinks=False))

    def write_atomic(self, dest: str, chunks: Iterable[bytes], mode: int = FILE_MODE, *, keep: bool = False) -> int | None:
        """Write `chunks` to a new temp file here, then move it to `dest`: readers see the old or
        the new file, never part of one.  With `keep`, return an open fd of the new file."""
        tmp = f".tmp-{os.urandom(8).hex()}"
        fd = self.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
            if _OWNERS:
                os.fchmod(fd, mode)
            self.replace(tmp, dest)
        except BaseException:
            os.close(fd)
            self.unlink(tmp)
            raise
        if keep:
            return fd
        os.close(fd)
        return None

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """An exclusive lock on the folder (best effort: not where flock is missing)."""
        fd = -1
        try:  # acquired inside the try: a KeyboardInterrupt right after flock must not leave it held
            if fcntl is not None:
                with contextlib.suppress(OSError):
                    fd = self.open(".lock", os.O_RDWR | os.O_CREAT)
                    fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            if fd >= 0:
                os.close(fd)


def _open_root(root: Path) -> int:
    """An fd of the root folder, created (0700) if missing.  The root may be a symbolic link
    only if this user owns the link; what it points at is checked like any folder."""
    if not os.path.lexists(root):
        root.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(root, DIR_MODE)
    lst = os.lstat(root)
    own_link = stat.S_ISLNK(lst.st_mode) and (not _OWNERS or lst.st_uid == os.geteuid())
    if stat.S_ISLNK(lst.st_mode) and not own_link:
        raise UntrustedError(root, f"is a symbolic link owned by uid {lst.st_uid}")
    flags = os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC
    if own_link:
        fd = os.open(root, flags)
    else:  # refuses a link that replaced the folder after the lstat
        fd = _open_nofollow(str(root), flags, root)
    try:
        _check(os.fstat(fd), root, folder=True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_folder(root: Path, parts: tuple[str, ...]) -> Folder:
    """The folder ``root/parts...``, each level created 0700 if missing and checked to be a real
    folder of this user's that nobody else can write (UntrustedError otherwise)."""
    path = root
    if not _AT:  # Windows: by path
        for part in ("", *parts):
            path = path / part if part else path
            path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            _check(os.lstat(path), path, folder=True)
        return Folder(path, None)
    fd = _open_root(root)
    try:
        for part in parts:
            path = path / part
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, DIR_MODE, dir_fd=fd)
            child = _open_nofollow(part, os.O_RDONLY | _O_DIRECTORY, path, dir_fd=fd)
            os.close(fd)
            fd = child
            _check(os.fstat(fd), path, folder=True)
    except BaseException:
        os.close(fd)
        raise
    return Folder(path, fd)
