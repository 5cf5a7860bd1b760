"""The cache as a trust boundary: who owns and can write its folders and entries, symbolic links,
loading only verified bytes, truncated libraries, the private fallback, a relative root."""

from __future__ import annotations

import ctypes
import os
import stat
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from tessera.runtime.cache import disk as cache_mod
from tessera.runtime.cache import pinned
from tessera.runtime.cache.disk import FORMAT_VERSION, DiskCache, cache_key
from tests.conftest import cache_warnings

OTHER_UID = 65534  # nobody
needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="giving a file to another user needs root")
needs_proc = pytest.mark.skipif(not pinned._PROC_FD, reason="pinning by /proc/self/fd is Linux only")
V = f"v{FORMAT_VERSION}"


@pytest.fixture(autouse=True)
def _fresh(fresh_cache: Path) -> Path:
    return fresh_cache


def _open(kind: str = "cpu") -> tuple[DiskCache, list[str]]:
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        c = DiskCache(kind)
    return c, cache_warnings(rec)


def test_created_private_whatever_the_umask(_fresh: Path) -> None:
    old = os.umask(0)
    try:
        c, msgs = _open()
    finally:
        os.umask(old)
    assert msgs == [] and c.path == _fresh / "cpu" / V
    for p in (_fresh, _fresh / "cpu", c.path):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p
    c.put_bytes(cache_key("k"), b"x")
    assert stat.S_IMODE((c.path / f"{cache_key('k')}.tsrc").stat().st_mode) == 0o600


def _expect_refused(root: Path, tmp_path: Path, reason: str) -> None:
    c, msgs = _open()
    _, again = _open("cuda")
    assert again == []  # one warning per process
    assert len(msgs) == 1, msgs
    assert reason in msgs[0] and "could run code in this process" in msgs[0], msgs[0]
    assert f"using the private cache {str(tmp_path / 'private')!r}" in msgs[0]
    assert c.enabled and c.path == tmp_path / "private" / "cpu" / V
    assert stat.S_IMODE((tmp_path / "private").stat().st_mode) == 0o700
    k = cache_key("refused")
    c.put_bytes(k, b"body")
    assert c.get_bytes(k) == b"body" and (c.path / f"{k}.tsrc").exists()
    assert not list(root.rglob("*.tsrc"))


@pytest.mark.parametrize("level", ["root", "kind", "version"])
@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_folders_writable_by_others_are_refused(_fresh: Path, tmp_path: Path, level: str, mode: int) -> None:
    target = {"root": _fresh, "kind": _fresh / "cpu", "version": _fresh / "cpu" / V}[level]
    target.mkdir(parents=True, mode=0o700)
    target.chmod(mode)
    _expect_refused(_fresh, tmp_path, f"{str(target)!r} is writable by")


@needs_root
@pytest.mark.parametrize("level", ["root", "kind", "version"])
def test_folders_of_another_user_are_refused(_fresh: Path, tmp_path: Path, level: str) -> None:
    """The reported attack: a cache folder that another user made (here mode 0755, so only the
    owner check can catch it)."""
    target = {"root": _fresh, "kind": _fresh / "cpu", "version": _fresh / "cpu" / V}[level]
    target.mkdir(parents=True, mode=0o755)
    os.chown(target, OTHER_UID, -1)
    _expect_refused(_fresh, tmp_path, f"is owned by uid {OTHER_UID}, not by this user")


def test_symlinked_subfolders_are_refused(_fresh: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    _fresh.mkdir(mode=0o700)
    (_fresh / "cpu").symlink_to(elsewhere)
    _expect_refused(_fresh, tmp_path, "is a symbolic link")
    assert list(elsewhere.iterdir()) == []


def test_a_root_that_is_our_own_symlink_is_followed(_fresh: Path, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    _fresh.symlink_to(real)
    c, msgs = _open()
    assert msgs == [] and c.path == _fresh / "cpu" / V
    c.put_bytes(cache_key("k"), b"x")
    assert (real / "cpu" / V / f"{cache_key('k')}.tsrc").exists()


@needs_root
def test_a_root_symlink_of_another_user_is_refused(_fresh: Path, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    _fresh.symlink_to(real)
    os.lchown(_fresh, OTHER_UID, -1)
    _expect_refused(_fresh, tmp_path, "is a symbolic link owned by uid")
    assert list(real.iterdir()) == []


def _fake_lib(tmp_path: Path, data: bytes = b"library bytes " * 40) -> Path:
    src = tmp_path / "src.so"
    src.write_bytes(data)
    return src


def _spoil(kind: str, path: Path, tmp_path: Path) -> None:
    if kind == "other-owner":
        os.chown(path, OTHER_UID, -1)
    elif kind == "writable":
        path.chmod(0o666)
    else:  # a symbolic link to a file with the same, valid content
        target = tmp_path / f"target-{path.name}"
        target.write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(target)


SPOILS = ["writable", "symlink", pytest.param("other-owner", marks=needs_root)]


@pytest.mark.parametrize("how", SPOILS)
def test_untrusted_byte_entries_are_refused_and_removed(tmp_path: Path, how: str) -> None:
    c, _ = _open("cuda")
    k = cache_key(how)
    c.put_bytes(k, b"a cubin")
    entry = c.path / f"{k}.tsrc"
    _spoil(how, entry, tmp_path)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert c.get_bytes(k) is None
        assert c.get_bytes(k) is None
    msgs = cache_warnings(rec)
    assert len(msgs) == 1 and str(entry) in msgs[0] and "deleted" in msgs[0], msgs
    assert not os.path.lexists(entry)
    if how == "symlink":
        assert (tmp_path / f"target-{entry.name}").exists()  # the link went, not what it points at
    c.put_bytes(k, b"fresh")
    assert c.get_bytes(k) == b"fresh"


@pytest.mark.parametrize("which", ["library", "sidecar"])
@pytest.mark.parametrize("how", SPOILS)
def test_untrusted_file_entries_are_refused_and_removed(tmp_path: Path, how: str, which: str) -> None:
    c, _ = _open()
    k = cache_key(how, which)
    src = _fake_lib(tmp_path)
    assert c.put_file(k, ".so", src) is not None
    entry = c.path / f"{k}.so"
    sidecar = c.path / f"{k}.so.sha256"
    _spoil(how, entry if which == "library" else sidecar, tmp_path)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert c.get_file(k, ".so") is None
    msgs = cache_warnings(rec)
    assert len(msgs) == 1 and "could run code in this process" in msgs[0], msgs
    assert not os.path.lexists(entry) and not os.path.lexists(sidecar)
    hit = c.put_file(k, ".so", src)
    assert hit is not None and hit.read_bytes() == src.read_bytes()


def test_the_lock_file_is_not_followed(tmp_path: Path) -> None:
    c, _ = _open()
    target = tmp_path / "victim"
    (c.path / ".lock").symlink_to(target)
    c.put_file(cache_key("k"), ".so", _fake_lib(tmp_path))
    assert not target.exists()


@needs_proc
def test_the_loaded_bytes_are_the_verified_bytes(tmp_path: Path) -> None:
    """Replacing an entry (and its sidecar) after get_file must not change what gets loaded."""
    c, _ = _open()
    k = cache_key("swap")
    c.put_file(k, ".so", _fake_lib(tmp_path, b"verified " * 10))
    path = c.get_file(k, ".so")
    assert path is not None
    other = DiskCache("cpu")
    assert other.put_file(k, ".so", _fake_lib(tmp_path, b"swapped in " * 10)) is not None
    assert (c.path / f"{k}.so").read_bytes() == b"swapped in " * 10
    assert path.read_bytes() == b"verified " * 10


@needs_proc
def test_a_pinned_library_loads(tmp_path: Path) -> None:
    """What get_file returns is a path the dynamic loader accepts (a real shared library)."""
    import _ctypes

    c, _ = _open()
    k = cache_key("real library")
    assert c.put_file(k, ".so", Path(_ctypes.__file__)) is not None
    path = c.get_file(k, ".so")
    assert path is not None and str(path).startswith("/proc/self/fd/")
    ctypes.CDLL(str(path), mode=os.RTLD_LOCAL)


@needs_proc
def test_past_the_descriptor_budget_the_entry_path_is_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    c, _ = _open()
    k = cache_key("budget")
    c.put_file(k, ".so", _fake_lib(tmp_path))
    monkeypatch.setattr(pinned, "_pinned", {})
    monkeypatch.setattr(pinned, "_limit", 0)
    before = len(os.listdir("/proc/self/fd"))
    assert c.get_file(k, ".so") == c.path / f"{k}.so"
    assert len(os.listdir("/proc/self/fd")) == before  # the checked descriptor was closed
    monkeypatch.setattr(pinned, "_limit", 1)
    path = c.get_file(k, ".so")
    assert path is not None and str(path).startswith("/proc/self/fd/")
    assert c.get_file(k, ".so") == path and len(pinned._pinned) == 1  # one descriptor per file


def test_elf_completeness(tmp_path: Path) -> None:
    import _ctypes

    data = Path(_ctypes.__file__).read_bytes()
    if not data.startswith(b"\x7fELF"):
        pytest.skip("not an ELF platform")

    def complete(blob: bytes) -> bool:
        p = tmp_path / "x.so"
        p.write_bytes(blob)
        fd = os.open(p, os.O_RDONLY)
        try:
            return pinned.elf_complete(fd, len(blob))
        finally:
            os.close(fd)

    assert complete(data)
    for cut in (len(data) - 1, len(data) // 2, 4096, 100, 63, 5):
        assert not complete(data[:cut]), cut
    assert complete(b"not a library at all") and complete(b"")


SIGBUS_RUN = textwrap.dedent(
    """
    import sys, warnings
    import numpy as np, tessera
    warnings.simplefilter("always")
    text = "@kernel tile[(32,)]\\ndef k(y: mut f32[n]):\\n    y[tile_linear_id()] = 3.0\\n"
    y = np.zeros(32, np.float32)
    with warnings.catch_warnings(record=True) as rec:
        tessera.compile(text, backend="cpu").k(y, grid=1)
    print("sum", float(y.sum()), "warnings", " | ".join(str(w.message) for w in rec))
    """
)


def test_a_truncated_library_with_a_matching_sidecar_is_rebuilt(_fresh: Path) -> None:
    """Before: every load of such an entry died of SIGBUS.  Now: a corrupt entry, rebuilt."""
    import hashlib

    env = dict(os.environ, TESSERA_CACHE_DIR=str(_fresh))
    first = subprocess.run([sys.executable, "-c", SIGBUS_RUN], env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    (lib,) = _fresh.rglob("*.so")
    data = lib.read_bytes()[: lib.stat().st_size // 2]
    lib.write_bytes(data)
    lib.with_name(lib.name + ".sha256").write_text(hashlib.sha256(data).hexdigest() + "\n")
    for _ in range(2):  # the second run finds the rebuilt library
        run = subprocess.run([sys.executable, "-c", SIGBUS_RUN], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, (run.returncode, run.stderr)
        assert run.stdout.startswith("sum 96.0"), run.stdout
        if _ == 0:
            assert "was corrupt" in run.stdout, run.stdout
    assert len(lib.read_bytes()) > len(data)


FALLBACK_RUN = textwrap.dedent(
    """
    import numpy as np, tessera, warnings
    warnings.simplefilter("ignore")
    text = "@kernel tile[(32,)]\\ndef k(y: mut f32[n]):\\n    y[tile_linear_id()] = 1.5\\n"
    y = np.zeros(32, np.float32)
    tessera.compile(text, backend="cpu").k(y, grid=1)
    assert float(y.sum()) == 48.0, y
    """
)


@pytest.mark.parametrize("private_usable", [True, False])
def test_fallback_libraries_do_not_pile_up_in_the_temp_folder(tmp_path: Path, private_usable: bool) -> None:
    """Before: every process without a usable cache left tessera-<pid>-<key>.so in $TMPDIR."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    blocker = tmp_path / "plain-file"
    blocker.write_text("not a folder")
    uid = f"-{os.geteuid()}" if hasattr(os, "geteuid") else ""
    private = tmp / f"tessera{uid}"
    if not private_usable:
        private.write_text("squatted")
    env = dict(os.environ, TESSERA_CACHE_DIR=str(blocker / "cache"), TMPDIR=str(tmp))
    for _ in range(3):
        run = subprocess.run([sys.executable, "-c", FALLBACK_RUN], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in tmp.iterdir()) == [private.name]
    if private_usable:
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
        assert len(list(private.rglob("*.so"))) == 1  # one library, reused by the later processes


def test_old_entries_of_the_private_fallback_are_pruned(_fresh: Path, tmp_path: Path) -> None:
    folder = tmp_path / "private" / "cpu" / V
    folder.mkdir(parents=True, mode=0o700)
    old, new = folder / f"{cache_key('old')}.tsrc", folder / f"{cache_key('new')}.tsrc"
    old.write_bytes(b"x")
    new.write_bytes(b"y")
    week_ago = time.time() - cache_mod.PRIVATE_MAX_AGE - 60
    os.utime(old, (week_ago, week_ago))
    _fresh.mkdir(mode=0o700)
    _fresh.chmod(0o777)
    c, msgs = _open()
    assert c.path == folder and len(msgs) == 1
    assert not old.exists() and new.exists()


def test_a_relative_cache_dir_is_resolved_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    monkeypatch.setenv("TESSERA_CACHE_DIR", "rel/cache")
    c, msgs = _open()
    want = tmp_path / "a" / "rel" / "cache"
    assert c.path == want / "cpu" / V and c.path.is_dir()
    assert len(msgs) == 1 and "relative" in msgs[0] and repr(str(want)) in msgs[0], msgs
    monkeypatch.chdir(tmp_path / "b")
    c2, msgs2 = _open("cuda")
    assert c2.path == want / "cuda" / V and msgs2 == []
    assert not (tmp_path / "b" / "rel").exists()


def test_cache_info_says_why_a_folder_is_not_used(_fresh: Path, tmp_path: Path) -> None:
    _fresh.mkdir(mode=0o700)
    _fresh.chmod(0o777)
    env = dict(os.environ, TESSERA_CACHE_DIR=str(_fresh), TMPDIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "tessera", "cache", "info"], env=env, capture_output=True, text=True,
                          check=True)
    uid = f"-{os.geteuid()}" if hasattr(os, "geteuid") else ""
    assert proc.stdout.startswith(f"cpu: {tmp_path / f'tessera{uid}' / 'cpu' / V}: 0 entries"), proc.stdout
    assert f"note: Tessera cache directory {str(_fresh)!r} is writable by group and others" in proc.stdout
    assert f"chmod go-w {_fresh}" in proc.stdout and "Warning" not in proc.stderr
