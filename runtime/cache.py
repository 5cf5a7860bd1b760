"""The persistent on-disk compilation cache shared by the CPU and CUDA backends.

The CPU backend stores compiled host shared libraries here, the CUDA backend
NVRTC cubins.  Entries live in ``<root>/<kind>/v<FORMAT_VERSION>/``; the root is
``$TESSERA_CACHE_DIR``, else ``$XDG_CACHE_HOME/tessera``, else the platform's
user cache folder (``~/.cache/tessera``, ``~/Library/Caches/tessera`` on macOS,
``%LOCALAPPDATA%\\tessera\\cache`` on Windows).  Keys come from `cache_key` over
everything that determines an artifact, so entries are replaced, never stale.

Byte entries (``get_bytes``/``put_bytes``) are one file ``<key>.tsrc``: a header
(magic, sha256 of the body, body length) then the body.  File entries
(``get_file``/``put_file``: a ``.so`` to dlopen) are ``<key><suffix>`` plus a
sidecar ``<key><suffix>.sha256``.  Every file is written to a temp name in the
same folder and moved into place with `os.replace`: concurrent writers are safe
(the last one wins) and readers never see a partial file.  A corrupt entry is
deleted and read as a miss; a folder that cannot be created or written turns
the cache off.  Each problem warns once per process (`TesseraCacheWarning`).
No pickle or eval; file names come only from hex keys and ``\\.[a-z0-9]{1,8}``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

try:  # POSIX only; without it file entries rely on the reader's re-check alone.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["FORMAT_VERSION", "DiskCache", "TesseraCacheWarning", "cache_key", "default_cache_root"]

FORMAT_VERSION = 1
MAGIC = b"TSRC1\n"
_BYTES_SUFFIX = ".tsrc"
_SIDECAR = ".sha256"
_KEY_RE = re.compile(r"[0-9a-f]{16,128}")
_SUFFIX_RE = re.compile(r"\.[a-z0-9]{1,8}")
_KIND_RE = re.compile(r"[a-z0-9_-]{1,32}")
_HEX64_RE = re.compile(rb"[0-9a-f]{64}")
_LEN_RE = re.compile(rb"[0-9]{1,19}")

_warned: set[str] = set()
_warn_lock = threading.Lock()


class TesseraCacheWarning(UserWarning):
    """A problem with the on-disk cache; compilation goes on without it."""


def _warn_once(topic: str, message: str) -> None:
    with _warn_lock:
        if topic in _warned:
            return
        _warned.add(topic)
    warnings.warn(message, TesseraCacheWarning, stacklevel=4)


def cache_key(*parts: str | bytes) -> str:
    """sha256 hex over the length-prefixed parts, so ``("ab", "c") != ("a", "bc")``."""
    h = hashlib.sha256(b"tessera-cache-key\0")
    for part in parts:
        if isinstance(part, str):
            part = part.encode("utf-8")
        elif not isinstance(part, bytes):
            raise TypeError(f"cache_key parts must be str or bytes, not {type(part).__name__}")
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def default_cache_root() -> Path:
    """The cache root: $TESSERA_CACHE_DIR, $XDG_CACHE_HOME/tessera, or the platform's cache folder."""
    env = os.environ.get("TESSERA_CACHE_DIR")
    if env:
        return Path(env).expanduser()
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


def _name(key: str, suffix: str) -> str:
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise ValueError(f"cache key must be 16-128 lowercase hex digits, got {key!r}")
    if not isinstance(suffix, str) or not _SUFFIX_RE.fullmatch(suffix):
        raise ValueError(f"cache file suffix must match \\.[a-z0-9]{{1,8}}, got {suffix!r}")
    return key + suffix


def _unlink(*paths: Path) -> None:
    for p in paths:
        with contextlib.suppress(OSError):
            p.unlink()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _parse_entry(raw: bytes) -> bytes | None:
    """The body of a byte entry, or None if the header or checksum is wrong."""
    lines = raw[len(MAGIC):].split(b"\n", 2) if raw.startswith(MAGIC) else []
    if len(lines) != 3 or not _HEX64_RE.fullmatch(lines[0]) or not _LEN_RE.fullmatch(lines[1]):
        return None
    body = lines[2]
    if len(body) != int(lines[1]) or hashlib.sha256(body).hexdigest().encode() != lines[0]:
        return None
    return body


class DiskCache:
    """One kind's folder of the on-disk cache ("cpu" or "cuda"); see the module docstring."""

    def __init__(self, kind: str, root: Path | str | None = None) -> None:
        if not _KIND_RE.fullmatch(kind):
            raise ValueError(f"cache kind must match [a-z0-9_-]{{1,32}}, got {kind!r}")
        self.kind = kind
        self.enabled = True
        self.path = Path("<unresolved>") / kind
        try:
            self.path = (Path(root) if root is not None else default_cache_root()) / kind / f"v{FORMAT_VERSION}"
            self.path.mkdir(parents=True, exist_ok=True)
        except (OSError, RuntimeError) as e:  # RuntimeError: Path.home() found no home folder
            self._disable(e)

    def __repr__(self) -> str:
        return f"DiskCache({self.kind!r}, path={str(self.path)!r}, enabled={self.enabled})"

    def _disable(self, err: BaseException) -> None:
        self.enabled = False
        _warn_once("unwritable", f"Tessera cache directory {str(self.path)!r} cannot be created or "
                   f"written ({err}); compilation results won't be cached")

    def _corrupt(self, path: Path) -> None:
        _warn_once("corrupt", f"Tessera cache entry {str(path)!r} was corrupt; it has been deleted and "
                   "is being recompiled (later corrupt entries are handled silently)")

    def _write_atomic(self, dest: Path, write: Callable[[BinaryIO], object], mode: int | None = None) -> None:
        """Write through `write(f)` to a temp file next to `dest`, then os.replace it into place."""
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.path)
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
            if mode is not None:
                os.chmod(tmp, mode)
            os.replace(tmp, dest)
        except BaseException:
            _unlink(Path(tmp))
            raise

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """An exclusive lock on the folder, pairing a file entry's two replaces (best effort)."""
        fd = -1
        if fcntl is not None:
            with contextlib.suppress(OSError):
                fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fd >= 0:
                os.close(fd)

    def get_bytes(self, key: str) -> bytes | None:
        """The stored body for `key`, or None on a miss, a corrupt entry or a disabled cache."""
        path = self.path / _name(key, _BYTES_SUFFIX)
        if not self.enabled:
            return None
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        body = _parse_entry(raw)
        if body is None:
            _unlink(path)
            self._corrupt(path)
        return body

    def put_bytes(self, key: str, data: bytes) -> None:
        """Store `data` under `key` atomically; a no-op when the cache is disabled."""
        path = self.path / _name(key, _BYTES_SUFFIX)
        if not self.enabled:
            return
        data = bytes(data)
        header = MAGIC + hashlib.sha256(data).hexdigest().encode() + b"\n" + str(len(data)).encode() + b"\n"
        try:
            self._write_atomic(path, lambda f: f.writelines((header, data)))
        except OSError as e:
            self._disable(e)

    def _file_paths(self, key: str, suffix: str) -> tuple[Path, Path]:
        if suffix in (_BYTES_SUFFIX, _SIDECAR):
            raise ValueError(f"cache file suffix {suffix!r} is reserved")
        path = self.path / _name(key, suffix)
        return path, path.with_name(path.name + _SIDECAR)

    def _verified(self, path: Path, sidecar: Path) -> bool | None:
        """True if `path` matches its sidecar, False if not, None if the file is missing."""
        try:
            want = sidecar.read_bytes().strip()
            got = _file_sha256(path).encode()
        except FileNotFoundError:
            return None if not path.exists() else False
        except OSError:
            return False
        return bool(_HEX64_RE.fullmatch(want)) and want == got

    def get_file(self, key: str, suffix: str) -> Path | None:
        """The path of the verified file ``<key><suffix>``, or None (miss, corrupt, disabled)."""
        path, sidecar = self._file_paths(key, suffix)
        if not self.enabled:
            return None
        ok = self._verified(path, sidecar)
        if ok is False:
            # A writer may be between its two replaces: re-check under the lock.
            if fcntl is None:  # pragma: no cover - no lock to wait on; give the writer a moment
                time.sleep(0.05)
            with self._lock():
                ok = self._verified(path, sidecar)
                if ok is False:
                    _unlink(path, sidecar)
                    self._corrupt(path)
        return path if ok else None

    def put_file(self, key: str, suffix: str, src: Path | str) -> Path | None:
        """Copy `src` into the cache as ``<key><suffix>``; that path, or None when nothing was cached."""
        path, sidecar = self._file_paths(key, suffix)
        src = Path(src)
        if not self.enabled:
            return None
        digest = _file_sha256(src).encode() + b"\n"

        def copy(f: BinaryIO) -> None:
            with open(src, "rb") as s:
                shutil.copyfileobj(s, f)

        try:
            with self._lock():
                self._write_atomic(path, copy, src.stat().st_mode & 0o777)
                self._write_atomic(sidecar, lambda f: f.write(digest))
        except OSError as e:
            if self._verified(path, sidecar):  # e.g. Windows refusing to replace a loaded library
                return path
            self._disable(e)
            return None
        return path

    def _entries(self) -> list[Path]:
        """Every visible file in the folder (entries and sidecars; not temp files or the lock)."""
        with contextlib.suppress(OSError), os.scandir(self.path) as it:
            return [Path(e.path) for e in it if not e.name.startswith(".") and e.is_file(follow_symlinks=False)]
        return []

    def info(self) -> dict[str, object]:
        """``{"path", "kind", "enabled", "entries", "bytes"}`` for this kind's folder."""
        entries = total = 0
        for p in self._entries():
            with contextlib.suppress(OSError):
                total += p.stat().st_size
                entries += not p.name.endswith(_SIDECAR)
        return {"path": str(self.path), "kind": self.kind, "enabled": self.enabled,
                "entries": entries, "bytes": total}

    def clear(self) -> int:
        """Delete every entry (and stale temp files); returns the number of entries removed."""
        removed = 0
        for p in self._entries():
            try:
                p.unlink()
            except OSError:
                continue
            removed += not p.name.endswith(_SIDECAR)
        for p in self.path.glob(".tmp-*"):  # left by killed writers; an hour is far past any live write
            with contextlib.suppress(OSError):
                if time.time() - p.stat().st_mtime > 3600:
                    p.unlink()
        return removed
