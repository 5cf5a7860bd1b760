"""The compiler's fingerprint: one sha256 over Tessera's own files, part of every cache key.

Any change to the compiler (its Python sources, the grammar, the templates, the host prelude)
changes the fingerprint, so the front-end, CPU-library and CUDA-image caches never serve a result
that an older compiler produced, even when the version number stays the same (an editable
install, a patched file).  The files are found through importlib, so the fingerprint covers
whatever copy of the package this process imports, laid out as a wheel or an editable install.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os

from tessera.base.forksafe import ForkSafeLock

__all__ = ["PACKAGES", "SUFFIXES", "fingerprint", "fingerprint_of"]

# The package and the subpackages pyproject.toml maps to their own folders.
PACKAGES = ("tessera", "tessera.transpile", "tessera.runtime", "tessera.grammar", "tessera.templates")
# Files that shape a compiled result: sources, grammar, templates, the host prelude.
SUFFIXES = (".py", ".lark", ".j2", ".cuh", ".h", ".cpp")

_lock = ForkSafeLock()
_value: str | None = None


def _package_dirs() -> list[tuple[str, str | None]]:
    """(package, its folder or None when it cannot be found) for each of `PACKAGES`."""
    out: list[tuple[str, str | None]] = []
    for name in PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        out.append((name, locations[0] if locations else None))
    return out


def _files(top: str, skip: set[tuple[int, int]], rel: str = "") -> list[str]:
    """Paths relative to `top` of the fingerprinted files under it, not descending into folders
    whose (device, inode) is in `skip` (the other packages' folders, hashed under their own name)."""
    found: list[str] = []
    with os.scandir(os.path.join(top, rel)) as it:
        for e in it:
            if e.name.startswith((".", "__pycache__")):
                continue
            if e.is_dir(follow_symlinks=False):
                st = e.stat(follow_symlinks=False)
                if (st.st_dev, st.st_ino) not in skip:
                    found += _files(top, skip, os.path.join(rel, e.name))
            elif e.name.endswith(SUFFIXES):
                found.append(os.path.join(rel, e.name))
    return found


def _folder_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _read(path: str) -> bytes:
    # os-level reads: a buffered file object per file would cost most of the fingerprint's time.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def fingerprint_of(packages: list[tuple[str, str | None]]) -> str:
    """sha256 hex over every fingerprinted file of `packages` ((name, folder) pairs), in sorted
    order of ``name/relative/path``, each file length-prefixed.  A missing or unreadable package
    or file is hashed as such, which differs from any content."""
    ids = {top: _folder_id(top) for _, top in packages if top is not None}
    entries: list[tuple[str, str | None]] = []
    for name, top in packages:
        try:
            if top is None:
                raise FileNotFoundError(name)
            rels = _files(top, {i for t, i in ids.items() if t != top and i is not None})
        except OSError:
            entries.append((f"{name}/", None))
            continue
        entries += [(f"{name}/{rel.replace(os.sep, '/')}", os.path.join(top, rel)) for rel in rels]
    h = hashlib.sha256(b"tessera-fingerprint\0")
    for label, path in sorted(entries, key=lambda e: e[0]):
        data: bytes = b"\0missing"
        if path is not None:
            try:
                data = _read(path)
            except OSError as e:
                data = f"\0unreadable: {type(e).__name__}".encode()
        encoded = label.encode("utf-8", "surrogateescape")
        h.update(len(encoded).to_bytes(8, "big") + encoded + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def fingerprint() -> str:
    """The fingerprint of the Tessera package this process imports (computed once per process)."""
    global _value
    if _value is None:
        with _lock:
            if _value is None:
                _value = fingerprint_of(_package_dirs())
    return _value
