"""The on-disk compilation cache: hits, misses, corruption, unwritable folders, concurrent writers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from tessera.runtime.cache import disk as cache_mod
from tessera.runtime.cache.disk import DiskCache, cache_key, default_cache_root
from tests.conftest import cache_warnings


@pytest.fixture(autouse=True)
def _fresh(fresh_cache: Path) -> Path:
    return fresh_cache


def test_key_is_length_prefixed_and_stable() -> None:
    assert cache_key("ab", "c") != cache_key("a", "bc")
    assert cache_key("ab", "c") == cache_key(b"ab", b"c")
    assert cache_key("x") != cache_key("x", "")
    k = cache_key("src", "-O2", "sm_90")
    assert len(k) == 64 and int(k, 16) >= 0
    with pytest.raises(TypeError):
        cache_key(3)  # type: ignore[arg-type]


def test_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, _fresh: Path) -> None:
    assert DiskCache("cuda").path == _fresh / "cuda" / f"v{cache_mod.FORMAT_VERSION}"
    monkeypatch.delenv("TESSERA_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_root() == tmp_path / "xdg" / "tessera"
    with pytest.raises(ValueError):
        DiskCache("../cpu")


def test_bytes_hit_miss_and_separation() -> None:
    c = DiskCache("cuda")
    k1, k2 = cache_key("kernel a", "sm_90"), cache_key("kernel a", "sm_80")
    assert c.get_bytes(k1) is None
    c.put_bytes(k1, b"cubin-1")
    c.put_bytes(k2, b"")
    assert c.get_bytes(k1) == b"cubin-1"
    assert c.get_bytes(k2) == b""
    c.put_bytes(k1, b"cubin-1b")
    assert c.get_bytes(k1) == b"cubin-1b"
    assert DiskCache("cpu").get_bytes(k1) is None  # kinds are separate folders
    info = c.info()
    assert info["entries"] == 2 and info["path"] == str(c.path)
    assert c.clear() == 2 and c.get_bytes(k1) is None and c.info()["entries"] == 0


@pytest.mark.parametrize("bad", ["../etc/passwd", "ABCDEF0123456789", "abc", ""])
def test_rejects_bad_keys(bad: str) -> None:
    with pytest.raises(ValueError):
        DiskCache("cpu").get_bytes(bad)


def test_rejects_bad_suffixes(tmp_path: Path) -> None:
    src = tmp_path / "a.so"
    src.write_bytes(b"x")
    for suffix in ("so", ".SO", "./x", ".toolongsuffix", ".sha256", ".tsrc"):
        with pytest.raises(ValueError):
            DiskCache("cpu").put_file(cache_key("k"), suffix, src)


def _flip(p: Path) -> None:
    raw = bytearray(p.read_bytes())
    raw[-1] ^= 0x01
    p.write_bytes(bytes(raw))


CORRUPTIONS = {
    "flip": _flip,
    "truncate": lambda p: p.write_bytes(p.read_bytes()[:-3]),
    "garbage": lambda p: p.write_bytes(os.urandom(200)),
    "empty": lambda p: p.write_bytes(b""),
    "bad-magic": lambda p: p.write_bytes(b"TSRC9\n" + p.read_bytes()[6:]),
}


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_corrupt_byte_entry(how: str) -> None:
    c = DiskCache("cuda")
    k = cache_key(how)
    c.put_bytes(k, b"payload " * 100)
    entry = c.path / f"{k}.tsrc"
    CORRUPTIONS[how](entry)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert c.get_bytes(k) is None
        assert c.get_bytes(k) is None  # deleted: a plain miss now
    msgs = cache_warnings(rec)
    assert len(msgs) == 1 and "corrupt" in msgs[0] and "recompiled" in msgs[0]
    assert not entry.exists()
    c.put_bytes(k, b"fresh")
    assert c.get_bytes(k) == b"fresh"


def test_corrupt_warning_once_per_process() -> None:
    c = DiskCache("cuda")
    keys = [cache_key(str(i)) for i in range(3)]
    for k in keys:
        c.put_bytes(k, b"data")
        (c.path / f"{k}.tsrc").write_bytes(b"junk")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert all(c.get_bytes(k) is None for k in keys)
    assert len(cache_warnings(rec)) == 1


def test_file_hit_miss(tmp_path: Path) -> None:
    c = DiskCache("cpu")
    src = tmp_path / "build" / "lib.so"
    src.parent.mkdir()
    src.write_bytes(b"fake library")
    k = cache_key("kernel", "-O2")
    assert c.get_file(k, ".so") is None
    out = c.put_file(k, ".so", src)
    assert out is not None and out.read_bytes() == src.read_bytes()
    assert (c.path / f"{k}.so").read_bytes() == src.read_bytes()
    hit = c.get_file(k, ".so")
    assert hit is not None and hit.read_bytes() == src.read_bytes()
    assert c.get_file(k, ".dll") is None and c.get_file(cache_key("other"), ".so") is None
    assert c.info()["entries"] == 1
    assert c.clear() == 1 and c.get_file(k, ".so") is None


@pytest.mark.parametrize("how", ["flip", "truncate", "garbage", "no-sidecar", "bad-sidecar"])
def test_corrupt_file_entry(tmp_path: Path, how: str) -> None:
    c = DiskCache("cpu")
    src = tmp_path / "lib.so"
    src.write_bytes(b"library bytes " * 50)
    k = cache_key(how)
    assert c.put_file(k, ".so", src) is not None
    entry = c.path / f"{k}.so"
    sidecar = entry.with_name(entry.name + ".sha256")
    if how == "no-sidecar":
        sidecar.unlink()
    elif how == "bad-sidecar":
        sidecar.write_text("not a hash\n")
    else:
        CORRUPTIONS[how](entry)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert c.get_file(k, ".so") is None
        assert c.get_file(k, ".so") is None
    assert len(cache_warnings(rec)) == 1
    assert not entry.exists() and not sidecar.exists()
    again = c.put_file(k, ".so", src)
    assert again is not None and again.read_bytes() == src.read_bytes() == entry.read_bytes()
    hit = c.get_file(k, ".so")
    assert hit is not None and hit.read_bytes() == src.read_bytes()


def _check_disabled(c: DiskCache, tmp_path: Path, rec: list[warnings.WarningMessage]) -> None:
    src = tmp_path / "lib.so"
    src.write_bytes(b"lib")
    k = cache_key("x")
    c.put_bytes(k, b"data")
    assert c.get_bytes(k) is None
    assert c.put_file(k, ".so", src) is None
    assert c.get_file(k, ".so") is None
    c.put_bytes(cache_key("y"), b"more")
    msgs = cache_warnings(rec)
    assert len(msgs) == 1, msgs
    assert "won't be cached" in msgs[0]


def test_cache_dir_under_a_file_falls_back_to_the_private_cache(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(cache_mod, "private_cache_root", lambda: tmp_path / "private")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        c = DiskCache("cpu")
        DiskCache("cuda")  # a second instance does not warn again
        k = cache_key("x")
        c.put_bytes(k, b"data")
        assert c.get_bytes(k) == b"data"
    msgs = cache_warnings(rec)
    assert len(msgs) == 1, msgs
    assert str(blocker / "cache" / "cpu" / "v1") in msgs[0] and "cannot be created" in msgs[0]
    assert f"using the private cache {str(tmp_path / 'private')!r} instead" in msgs[0]
    assert c.enabled and c.path == tmp_path / "private" / "cpu" / f"v{cache_mod.FORMAT_VERSION}"
    assert (c.path / f"{k}.tsrc").is_file()


def test_no_cache_at_all_when_the_private_cache_is_unusable_too(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(cache_mod, "private_cache_root", lambda: blocker / "private")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        c = DiskCache("cpu")
        DiskCache("cuda")
        _check_disabled(c, tmp_path, rec)
    assert not c.enabled and "the private cache" in cache_warnings(rec)[0]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="chmod does not stop root")
def test_read_only_cache_dir(tmp_path: Path, _fresh: Path) -> None:
    c = DiskCache("cpu")
    c.path.chmod(0o500)
    try:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            _check_disabled(c, tmp_path, rec)
    finally:
        c.path.chmod(0o700)


WORKER = textwrap.dedent(
    """
    import json, os, sys, warnings
    from pathlib import Path
    from tessera.runtime.cache.disk import DiskCache, TesseraCacheWarning, cache_key

    wid, tmp = int(sys.argv[1]), Path(sys.argv[2])
    warnings.simplefilter("always")
    stats = {"errors": [], "hits": 0, "misses": 0, "bad": 0, "warnings": 0}
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        try:
            c = DiskCache("cpu")
            srcs = {}
            for i in range(4):
                srcs[i] = tmp / f"src-{wid}-{i}.so"
                srcs[i].write_bytes(bytes([i]) * (200_000 + i))
            mine = tmp / f"mine-{wid}.so"
            mine.write_bytes(bytes([wid]) * 150_000)
            for rnd in range(15):
                for i in range(4):
                    k = cache_key("bytes", str(i))
                    want = bytes([i]) * (300_000 + i)
                    got = c.get_bytes(k)
                    stats["hits" if got is not None else "misses"] += 1
                    stats["bad"] += got is not None and got != want
                    c.put_bytes(k, want)
                    fk = cache_key("file", str(i))
                    p = c.get_file(fk, ".so")
                    stats["bad"] += p is not None and p.read_bytes() != srcs[i].read_bytes()
                    c.put_file(fk, ".so", srcs[i])
                # One key whose artifact differs per writer (a nondeterministic build).
                nk = cache_key("nondeterministic")
                p = c.get_file(nk, ".so")
                if p is not None:
                    data = p.read_bytes()
                    stats["bad"] += len(data) != 150_000 or len(set(data)) != 1
                c.put_file(nk, ".so", mine)
        except Exception as e:
            stats["errors"].append(repr(e))
    stats["warnings"] = sum(issubclass(w.category, TesseraCacheWarning) for w in rec)
    print(json.dumps(stats))
    """
)


def test_concurrent_writers_and_readers(tmp_path: Path, _fresh: Path) -> None:
    n = 8
    env = dict(os.environ, TESSERA_CACHE_DIR=str(_fresh))
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(w), str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        for w in range(n)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    for r in results:
        assert r["errors"] == [] and r["bad"] == 0 and r["warnings"] == 0, r
    assert sum(r["hits"] for r in results) > 0
    # Afterwards every entry verifies and holds the full content.
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        c = DiskCache("cpu")
        for i in range(4):
            assert c.get_bytes(cache_key("bytes", str(i))) == bytes([i]) * (300_000 + i)
            p = c.get_file(cache_key("file", str(i)), ".so")
            assert p is not None and p.read_bytes() == bytes([i]) * (200_000 + i)
        p = c.get_file(cache_key("nondeterministic"), ".so")
        assert p is not None and len(p.read_bytes()) == 150_000
    assert cache_warnings(rec) == []
    assert c.info()["entries"] == 9
    assert not [q for q in c.path.iterdir() if q.name.startswith(".tmp-")]
