"""The CPU engine's persistent worker threads (runtime/host/engine.cpp, "Persistent workers"):
launches of several groups reuse one pool of threads per library instead of starting threads,
a trimmed library's pool ends, a forked child (which has none of the threads) still launches,
and launches from several Python threads at once (one of them gets the pool, the others their
own threads) all compute their results. Also the other steps of a first launch with an empty
cache: the engine's prefetch and build (without the engine built at install time:
tests/runtime/host/test_prebuilt_engine.py has those with it), the linker, the end of the process."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import numpy as np
import pytest

import tessera

SRC = """
@kernel tile[(64,)]
def fill(out: mut i32[n], v: i32):
    i = group_id(0) * 64 + tile_id(0)
    if i < n:
        out[i] = v + i
"""

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")


def test_launches_reuse_the_pool_and_trim_ends_it():
    code = textwrap.dedent(f"""
        import os, threading, numpy as np, tessera
        k = tessera.compile({SRC!r}, backend="cpu").fill
        out = np.zeros(64 * 16, np.int32)
        for t in threading.enumerate():
            if t.name == "tessera-engine-build":
                t.join()  # the engine's prefetch (runtime/host/build.py) is not a pool thread
        from tessera.runtime.host import unit
        unit.discard()  # nor the idle expiry of the kernel unit it started (runtime/host/unit.py)
        before = len(os.listdir("/proc/self/task"))
        counts = set()
        for v in range(40):
            lib, info, bound = k.prepare((out, v), {{}}, grid=16)
            lib.launch(info, bound, num_threads=4)
            assert (out == v + np.arange(out.size)).all()
            counts.add(len(os.listdir("/proc/self/task")))
        lib.trim()
        print(before, sorted(counts), len(os.listdir("/proc/self/task")))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    fields = done.stdout.replace("[", "").replace("]", "").replace(",", "").split()
    before, counts, after = int(fields[0]), [int(f) for f in fields[1:-1]], int(fields[-1])
    assert counts == [before + 3]  # three pool threads, the same three for all 40 launches
    assert after == before


def test_a_forked_child_launches_without_the_parents_threads():
    k = tessera.compile(SRC, backend="cpu").fill
    out = np.zeros(64 * 8, np.int32)
    k[8](out, 1)  # the parent's pool exists now
    pid = os.fork()
    if pid == 0:  # the child: its pool must start empty, not wait for threads it does not have
        code = 1
        try:
            child = np.zeros(64 * 8, np.int32)
            k[8](child, 5, timeout=60)
            code = 0 if (child == 5 + np.arange(child.size)).all() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (out == 1 + np.arange(out.size)).all()


def test_launches_from_several_python_threads_at_once():
    k = tessera.compile(SRC, backend="cpu").fill

    def run(v: int) -> bool:
        out = np.zeros(64 * 32, np.int32)
        for _ in range(10):
            k[32](out, v)
        return bool((out == v + np.arange(out.size)).all())

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert all(pool.map(run, range(8)))


@pytest.mark.usefixtures("no_prebuilt_engine")
def test_the_engine_prefetch_and_the_build_share_one_compile(tmp_path, monkeypatch):
    from tessera.runtime.host import build as host_build

    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(host_build, "_ENGINES", {})
    monkeypatch.setattr(host_build, "_prefetched", False)
    builds = []
    real = host_build._build_engine
    monkeypatch.setattr(host_build, "_build_engine", lambda cxx: builds.append(cxx) or real(cxx))
    host_build.prefetch_engine()
    host_build.prefetch_engine()  # once per process
    data = host_build.engine_object(host_build.find_cxx())  # waits for the prefetch, then finds it
    assert len(builds) == 1 and data[:4] == b"\x7fELF"


@pytest.mark.usefixtures("no_prebuilt_engine")
def test_a_second_prefetch_does_not_wait_for_the_engine_build(tmp_path, monkeypatch):
    # The launch path calls prefetch_engine again while the first one builds: it must go on to
    # compile the kernel unit meanwhile, not wait for the engine (that serialised the two).
    from tessera.runtime.host import build as host_build

    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(host_build, "_ENGINES", {})
    monkeypatch.setattr(host_build, "_prefetched", False)
    started, release = threading.Event(), threading.Event()
    real = host_build._build_engine

    def slow_build(cxx):
        started.set()
        release.wait(30)
        return real(cxx)

    monkeypatch.setattr(host_build, "_build_engine", slow_build)
    host_build.prefetch_engine()
    assert started.wait(30)
    t0 = time.perf_counter()
    host_build.prefetch_engine()
    waited = time.perf_counter() - t0
    release.set()
    assert host_build.engine_object(host_build.find_cxx())[:4] == b"\x7fELF"
    assert waited < 5


@pytest.mark.usefixtures("no_prebuilt_engine")
def test_a_prefetch_that_finds_the_engine_in_the_cache_cancels_the_compile_it_started(tmp_path, monkeypatch):
    from tessera.runtime.host import build as host_build
    from tessera.runtime.host import unit as host_unit

    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(host_build, "_ENGINES", {})
    host_build.engine_object(host_build.find_cxx())  # into the disk cache
    monkeypatch.setattr(host_build, "_ENGINES", {})
    monkeypatch.setattr(host_build, "_prefetched", False)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    builds = []
    monkeypatch.setattr(host_build, "_build_engine", lambda cxx: builds.append(cxx) or b"")
    host_build.prefetch_engine()  # starts the compile before the cache is asked
    for t in threading.enumerate():
        if t.name == "tessera-engine-build":
            t.join(60)
    host_unit.discard()  # the kernel unit the prefetch may have started, in the same folder
    assert builds == [] and host_build._STARTED == {}
    assert list((tmp_path / "tmp").iterdir()) == []  # its folder is gone
    assert host_build.engine_object(host_build.find_cxx())[:4] == b"\x7fELF"


@pytest.mark.usefixtures("no_prebuilt_engine")
def test_a_child_forked_while_the_engine_compiles_builds_its_own(tmp_path, monkeypatch):
    from tessera.runtime.host import build as host_build

    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(host_build, "_ENGINES", {})
    monkeypatch.setattr(host_build, "_prefetched", False)
    host_build.prefetch_engine()  # the parent's compile runs (about 0.3 s)
    pid = os.fork()
    if pid == 0:  # the parent's compile is not the child's to wait for
        ok = host_build._STARTED == {} and host_build.engine_object(host_build.find_cxx())[:4] == b"\x7fELF"
        os._exit(0 if ok else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert host_build.engine_object(host_build.find_cxx())[:4] == b"\x7fELF"


def test_the_link_uses_gold_where_the_compiler_accepts_it_else_the_default_linker(tmp_path):
    from tessera.runtime.host import build as host_build

    refuses = tmp_path / "cxx-without-gold"
    refuses.write_text("#!/bin/sh\nexit 1\n")
    refuses.chmod(0o755)
    assert host_build.linker([str(refuses)]) == (host_build.LINK_FLAGS, "")
    flags, version = host_build.linker(host_build.find_cxx())
    assert flags in (host_build.LINK_FLAGS, host_build.LINK_FLAGS + host_build.GOLD)
    assert ("GNU gold" in version) == (flags != host_build.LINK_FLAGS)  # the version goes into the cache key


def test_garbage_left_at_exit_is_still_finalized_after_the_compiler_was_imported():
    # tessera.transpile.driver freezes what is left at exit (a faster teardown) after collecting it once.
    code = ("import tessera.transpile.driver\nclass A:\n    def __del__(self):\n        print('finalized')\n"
            "a = A()\na.me = a\ndel a\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout == "finalized\n"
