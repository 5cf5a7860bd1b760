"""The persistent on-disk compilation cache shared by the CPU and CUDA backends.

The CPU backend stores compiled host shared libraries here, the CUDA backend NVRTC cubins.
Entries live in ``<root>/<kind>/v<FORMAT_VERSION>/``; the root is ``$TESSERA_CACHE_DIR`` (a
relative one is resolved against the working directory once per process, with a warning), else
``$XDG_CACHE_HOME/tessera``, else the platform's user cache folder (``~/.cache/tessera``,
``~/Library/Caches/tessera`` on macOS, ``%LOCALAPPDATA%\\tessera\\cache`` on Windows).  Keys come
from `cache_key` over everything that determines an artifact, the compiler's own fingerprint
included, so entries are replaced, never stale.

The cache is a trust boundary (docs/security.md): a library found here is loaded into the
process.  Every folder and entry must belong to this user and be unwritable by group and others
(`cache_fs`); folders are created 0700.  A root that fails this, or cannot be created, is
refused with one warning and the private fallback ``<tmp>/tessera-<uid>`` is used instead (its
entries are pruned after a week); if that is unusable too, nothing is cached.

Byte entries (``get_bytes``/``put_bytes``) are one file ``<key>.tsrc``: a header (magic, sha256
of the body, body length) then the body.  File entries (``get_file``/``put_file``: a ``.so`` to
dlopen) are ``<key><suffix>`` plus a sidecar ``<key><suffix>.sha256``; `get_file` checks the
bytes through an open descriptor and returns a path that names exactly those bytes (`pinned`).
The checksums are against accidents (a torn or truncated file), not attackers.  Every file is
written to a temp name in the same folder and moved into place with `os.replace`: concurrent
writers are safe (the last one wins) and readers never see a partial file.  A corrupt or
untrusted entry is deleted and read as a miss.  Each kind of problem warns once per process
(`TesseraCacheWarning`).  No pickle or eval; file names come only from hex keys and
``\\.[a-z0-9]{1,8}``.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from tessera.base.forksafe import ForkSafeLock
from tessera.runtime.cache.fs import Folder, UntrustedError, open_folder
from tessera.runtime.cache.pinned import elf_complete, pin
from tessera.runtime.host.recipe import cache_key

__all__ = ["FORMAT_VERSION", "DiskCache", "TesseraCacheWarning", "cache_key", "default_cache_root",
           "private_cache_root"]

FORMAT_VERSION = 1
MAGIC = b"TSRC1\n"
PRIVATE_MAX_AGE = 7 * 24 * 3600  # seconds an entry of the private fallback is kept
_BYTES_SUFFIX = ".tsrc"
_SIDECAR = ".sha256"
_KEY_RE = re.compile(r"[0-9a-f]{16,128}")
_SUFFIX_RE = re.compile(r"\.[a-z0-9]{1,8}")
_KIND_RE = re.compile(r"[a-z0-9_-]{1,32}")
_HEX64_RE = re.compile(rb"[0-9a-f]{64}")
_LEN_RE = re.compile(rb"[0-9]{1,19}")

_warned: set[str] = set()
_warn_lock = ForkSafeLock()
_resolved: dict[str, Path] = {}  # relative $TESSERA_CACHE_DIR -> the absolute path this process uses
_pruned: set[str] = set()  # private fallback folders pruned by this process


class TesseraCacheWarning(UserWarning):
    """A problem with the on-disk cache; compilation goes on without it."""


def _warn_once(topic: str, message: str) -> None:
    with _warn_lock:
        if topic in _warned:
            return
        _warned.add(topic)
    warnings.warn(message, TesseraCacheWarning, stacklevel=4)


def default_cache_root() -> Path:
    """The cache root: $TESSERA_CACHE_DIR, $XDG_CACHE_HOME/tessera, or the platform's cache folder."""
    env = os.environ.get("TESSERA_CACHE_DIR")
    if env:
        path = Path(env).expanduser()
        if path.is_absolute():
            return path
        # Resolved once: a later chdir must not move the cache of a running process.
        with _warn_lock:
            path = _resolved.setdefault(env, Path(os.path.abspath(path)))
        _warn_once("relative", f"TESSERA_CACHE_DIR={env!r} is a relative path; this process uses "
                   f"{str(path)!r} (resolved once, against the working directory when first used)")
        return path
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "tessera"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "tessera"
    if os.name == "nt":
        local = os.environ.get("LOCALAPPDATA")
        base = Path(local) if local else Path.home() / "AppData" / "Local"
        return base / "tessera" / "cache"
    return Path.home() / ".cache" / "tessera"


def private_cache_root() -> Path:
    """The fallback root: one folder per user in the temporary directory."""
    import tempfile

    uid = f"-{os.geteuid()}" if hasattr(os, "geteuid") else ""
    return Path(tempfile.gettempdir()) / f"tessera{uid}"


def _name(key: str, suffix: str) -> str:
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise ValueError(f"cache key must be 16-128 lowercase hex digits, got {key!r}")
    if not isinstance(suffix, str) or not _SUFFIX_RE.fullmatch(suffix):
        raise ValueError(f"cache file suffix must match \\.[a-z0-9]{{1,8}}, got {suffix!r}")
    return key + suffix


def _read_fd(fd: int, limit: int = 1 << 62) -> Iterator[bytes]:
    while limit > 0:
        chunk = os.read(fd, min(limit, 1 << 20))
        if not chunk:
            return
        limit -= len(chunk)
        yield chunk


def _parse_entry(raw: bytes) -> bytes | None:
    """The body of a byte entry, or None if the header or checksum is wrong."""
    lines = raw[len(MAGIC):].split(b"\n", 2) if raw.startswith(MAGIC) else []
    if len(lines) != 3 or not _HEX64_RE.fullmatch(lines[0]) or not _LEN_RE.fullmatch(lines[1]):
        return None
    body = lines[2]
    if len(body) != int(lines[1]) or hashlib.sha256(body).hexdigest().encode() != lines[0]:
        return None
    return body


def _why(err: BaseException) -> str:
    return err.reason if isinstance(err, UntrustedError) else f"{type(err).__name__}: {err}"


class DiskCache:
    """One kind's folder of the on-disk cache ("cpu" or "cuda"); see the module docstring.

    ``path`` is the folder in use (the private fallback's when the configured one was refused),
    ``note`` says why the configured folder is not in use, ``enabled`` whether anything is cached."""

    def __init__(self, kind: str, root: Path | str | None = None) -> None:
        if not _KIND_RE.fullmatch(kind):
            raise ValueError(f"cache kind must match [a-z0-9_-]{{1,32}}, got {kind!r}")
        self.kind = kind
        self.note: str | None = None
        self._folder: Folder | None = None
        parts = (kind, f"v{FORMAT_VERSION}")
        self.path = Path("<unresolved>", *parts)
        try:
            configured = Path(root) if root is not None else default_cache_root()
            self.path = configured.joinpath(*parts)
            self._folder = open_folder(configured, parts)
        except (OSError, RuntimeError) as e:  # RuntimeError: Path.home() found no home folder
            self._fall_back(parts, e)

    @property
    def enabled(self) -> bool:
        return self._folder is not None

    @property
    def folder(self) -> Folder | None:
        """The open, verified folder (None when nothing is cached), for a kind that keeps its own
        named files (the autotuner's per-architecture records)."""
        return self._folder

    def __repr__(self) -> str:
        return f"DiskCache({self.kind!r}, path={str(self.path)!r}, enabled={self.enabled})"

    def _fall_back(self, parts: tuple[str, ...], err: BaseException) -> None:
        """Use the private root instead of the configured one; warn once either way."""
        topic = "untrusted" if isinstance(err, UntrustedError) else "unwritable"
        if isinstance(err, UntrustedError):
            fix = f" (`chmod go-w {err.path}` makes it usable)" if "writable" in err.reason else ""
            problem = (f"Tessera cache directory {err.path!r} {err.reason}; it is not used, because whoever "
                       f"can write it could run code in this process{fix}")
        else:
            problem = f"Tessera cache directory {str(self.path)!r} cannot be created or used ({_why(err)})"
        private = private_cache_root()
        self._folder = None
        if private.joinpath(*parts) != self.path:
            try:
                self._folder = open_folder(private, parts)
            except OSError as e:
                problem += f"; the private cache {str(private)!r} is unusable too ({_why(e)})"
        if self._folder is None:
            self.note = problem
            _warn_once(topic, f"{problem}; compilation results won't be cached")
            return
        self.note = problem + "; using the private cache instead"
        self.path = self._folder.path
        _warn_once(topic, f"{problem}; using the private cache {str(private)!r} instead")
        if str(self.path) not in _pruned:
            _pruned.add(str(self.path))
            self._remove_old(lambda name: not name.startswith("."), PRIVATE_MAX_AGE)

    def _disable(self, err: BaseException) -> None:
        self._folder = None
        _warn_once("unwritable", f"Tessera cache directory {str(self.path)!r} cannot be written "
                   f"({_why(err)}); compilation results won't be cached")

    def _corrupt(self, name: str) -> None:
        _warn_once("corrupt", f"Tessera cache entry {str(self.path / name)!r} was corrupt; it has been deleted "
                   "and is being recompiled (later corrupt entries are handled silently)")

    def _untrusted(self, err: UntrustedError, *names: str) -> None:
        assert self._folder is not None
        self._folder.unlink(*names)
        _warn_once("untrusted-entry", f"Tessera cache entry {err.path!r} {err.reason}; it has been deleted and "
                   "is being recompiled, because whoever can write it could run code in this process")

    def get_bytes(self, key: str) -> bytes | None:
        """The stored body for `key`, or None on a miss, a corrupt entry or a disabled cache."""
        name = _name(key, _BYTES_SUFFIX)
        if self._folder is None:
            return None
        try:
            fd, _ = self._folder.open_trusted(name)
        except UntrustedError as e:
            self._untrusted(e, name)
            return None
        except OSError:
            return None
        try:
            body = _parse_entry(b"".join(_read_fd(fd)))
        except OSError:
            body = None
        finally:
            os.close(fd)
        if body is None:
            self._folder.unlink(name)
            self._corrupt(name)
        return body

    def put_bytes(self, key: str, data: bytes) -> None:
        """Store `data` under `key` atomically; a no-op when the cache is disabled."""
        name = _name(key, _BYTES_SUFFIX)
        if self._folder is None:
            return
        data = bytes(data)
        header = MAGIC + hashlib.sha256(data).hexdigest().encode() + b"\n" + str(len(data)).encode() + b"\n"
        try:
            self._folder.write_atomic(name, (header, data))
        except OSError as e:
            self._disable(e)

    def _file_names(self, key: str, suffix: str) -> tuple[str, str]:
        if suffix in (_BYTES_SUFFIX, _SIDECAR):
            raise ValueError(f"cache file suffix {suffix!r} is reserved")
        name = _name(key, suffix)
        return name, name + _SIDECAR

    def _open_verified(self, name: str, sidecar: str) -> tuple[int | None, bool]:
        """(read-only fd of `name`, False) if its bytes match the sidecar and are a complete
        library; (None, True) if they do not; (None, False) if it is missing or was untrusted."""
        assert self._folder is not None
        try:
            fd, st = self._folder.open_trusted(name)
        except FileNotFoundError:
            return None, False
        except UntrustedError as e:
            self._untrusted(e, name, sidecar)
            return None, False
        except OSError as e:  # out of descriptors is no fault of the entry's
            return None, e.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOMEM)
        try:
            sfd, _ = self._folder.open_trusted(sidecar)
            try:
                want = b"".join(_read_fd(sfd, 128)).strip()
            finally:
                os.close(sfd)
            h = hashlib.sha256()
            for chunk in _read_fd(fd):
                h.update(chunk)
            if _HEX64_RE.fullmatch(want) and h.hexdigest().encode() == want and elf_complete(fd, st.st_size):
                return fd, False
        except UntrustedError as e:
            os.close(fd)
            self._untrusted(e, name, sidecar)
            return None, False
        except OSError:
            pass
        os.close(fd)
        return None, True

    def get_file(self, key: str, suffix: str) -> Path | None:
        """A path holding the verified bytes of ``<key><suffix>`` for as long as the process runs
        (on Linux not the entry's own path, see `pinned`), or None (miss, corrupt, disabled)."""
        name, sidecar = self._file_names(key, suffix)
        if self._folder is None:
            return None
        fd, corrupt = self._open_verified(name, sidecar)
        if corrupt:
            # A writer may be between its two replaces: re-check under the lock.
            if not self._folder.can_lock:  # give the writer a moment instead
                time.sleep(0.05)
            with self._folder.lock():
                fd, corrupt = self._open_verified(name, sidecar)
                if corrupt:
                    self._folder.unlink(name, sidecar)
                    self._corrupt(name)
        return None if fd is None else pin(fd, self.path / name)

    def put_file(self, key: str, suffix: str, src: Path | str) -> Path | None:
        """Copy `src` into the cache as ``<key><suffix>``; a load path for the stored bytes (as
        `get_file`), or None when nothing was cached."""
        name, sidecar = self._file_names(key, suffix)
        if self._folder is None:
            return None
        h = hashlib.sha256()

        def chunks() -> Iterator[bytes]:
            with open(src, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
                    yield chunk

        try:
            with self._folder.lock():
                fd = self._folder.write_atomic(name, chunks(), 0o700, keep=True)
                assert fd is not None
                try:
                    self._folder.write_atomic(sidecar, (h.hexdigest().encode() + b"\n",))
                except BaseException:
                    os.close(fd)
                    raise
        except OSError as e:
            hit = self.get_file(key, suffix)  # e.g. Windows refusing to replace a loaded library
            if hit is None:
                self._disable(e)
            return hit
        return pin(fd, self.path / name)

    def _entries(self) -> list[os.DirEntry]:
        """Every visible file in the folder (entries and sidecars; not temp files or the lock)."""
        if self._folder is None:
            return []
        try:
            return [e for e in self._folder.entries() if not e.name.startswith(".")]
        except OSError:
            return []

    def _remove_old(self, select: Callable[[str], bool], max_age: float) -> None:
        """Delete the files whose names `select` accepts, last modified over `max_age` seconds ago."""
        if self._folder is None:
            return
        now = time.time()
        try:
            old = [e.name for e in self._folder.entries()
                   if select(e.name) and now - e.stat(follow_symlinks=False).st_mtime > max_age]
        except OSError:
            return
        self._folder.unlink(*old)

    def info(self) -> dict[str, object]:
        """``{"path", "kind", "enabled", "note", "entries", "bytes"}`` for this kind's folder."""
        entries = total = 0
        for e in self._entries():
            try:
                total += e.stat(follow_symlinks=False).st_size
            except OSError:
                continue
            entries += not e.name.endswith(_SIDECAR)
        return {"path": str(self.path), "kind": self.kind, "enabled": self.enabled, "note": self.note,
                "entries": entries, "bytes": total}

    def clear(self) -> int:
        """Delete every entry (and stale temp files); returns the number of entries removed."""
        removed = self._folder.unlink(*(e.name for e in self._entries())) if self._folder is not None else []
        # Temp files left by killed writers; an hour is far past any live write.
        self._remove_old(lambda name: name.startswith(".tmp-"), 3600)
        return sum(not n.endswith(_SIDECAR) for n in removed)
