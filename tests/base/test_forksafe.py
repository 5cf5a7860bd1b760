"""Locks after a fork (tessera/base/forksafe.py): for every lock Tessera keeps, a thread holds it,
the process forks, and the child takes it within a timeout. Before, a child forked while another
thread computed the compiler's fingerprint (a first compile) waited forever on its lock, and so on
the locks of the pinned-path and disk caches, the CPU libraries and the autotuner; only the
engine-build and unit locks were renewed (by hand). Then: no module makes a lock of its own."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import tessera
from tessera.base.forksafe import ForkSafeLock
from tests.conftest import ROOT


def _module_lock(module: str, name: str) -> Callable[[], Any]:
    def get() -> Any:  # read when called: in the child, after the fork
        import importlib

        return getattr(importlib.import_module(module), name)
    return get


def _module_object_lock() -> Any:
    return tessera.compile("@kernel tile[(1,)]\ndef k(y: mut f32[1]):\n    y[0] = 1.0\n", backend="cpu")._lock


def _store_lock() -> Any:
    from tessera.autotune.store import TuneStore

    return TuneStore()._lock


LOCKS: dict[str, Callable[[], Any]] = {
    "fingerprint": _module_lock("tessera.runtime.cache.fingerprint", "_lock"),
    "pinned": _module_lock("tessera.runtime.cache.pinned", "_lock"),
    "disk-warnings": _module_lock("tessera.runtime.cache.disk", "_warn_lock"),
    "host-libraries": _module_lock("tessera.runtime.host.library", "_recent_lock"),
    "host-engine": _module_lock("tessera.runtime.host.build", "_ENGINE_LOCK"),
    "host-prefetch": _module_lock("tessera.runtime.host.build", "_PREFETCH_LOCK"),
    "host-linker": _module_lock("tessera.runtime.host.build", "_LINKER_LOCK"),
    "host-unit": _module_lock("tessera.runtime.host.unit", "_LOCK"),
    "autotune-memo": _module_lock("tessera.autotune", "_memo_lock"),
    "autotune-stats": _module_lock("tessera.autotune.search", "_stats_lock"),
}
OBJECT_LOCKS: dict[str, Callable[[], Any]] = {"api-module": _module_object_lock, "autotune-store": _store_lock}


@contextmanager
def _held(lock: Any) -> Iterator[None]:
    """`lock` held by another thread for the duration."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            done.wait(60)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert taken.wait(30)
    try:
        yield
    finally:
        done.set()
        t.join(30)


def _in_child(work: Callable[[], bool], timeout: float = 30.0) -> int:
    """Fork; the child runs `work` (exit 0 when it returns True) and is killed after `timeout`:
    the exit status, or -1 when it had to be killed."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(int(timeout) + 5)  # a hang ends the child even if the parent is gone
            code = 0 if work() else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return -1


CASES = [(name, get, True) for name, get in LOCKS.items()] + [(name, get, False) for name, get in OBJECT_LOCKS.items()]


@pytest.mark.parametrize("get,reread", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_child_forked_while_a_thread_holds_a_lock_takes_it(get: Callable[[], Any], reread: bool) -> None:
    lock = get()
    with _held(lock):
        assert not lock.acquire(timeout=0.05)  # held indeed
        # A module's lock is read again in the child (a module may have replaced it after the fork).
        assert _in_child(lambda: bool((get() if reread else lock).acquire(timeout=5))) == 0


def test_the_first_compile_of_a_child_forked_while_a_thread_fingerprints(monkeypatch, tmp_path) -> None:
    from tessera.runtime.cache import fingerprint as fp

    monkeypatch.setattr(fp, "_value", None)  # no fingerprint yet: the thread is computing it
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    with _held(fp._lock):
        status = _in_child(lambda: len(fp.fingerprint()) == 64 and tessera.compile(
            "@kernel tile[(1,)]\ndef k(y: mut f32[1]):\n    y[0] = 2.0\n", backend="cpu").kernels == ("k",))
    assert status == 0


def test_a_reentrant_lock_stays_reentrant_after_a_fork() -> None:
    lock = ForkSafeLock(reentrant=True)

    def twice() -> bool:
        with lock, lock:
            return True

    with _held(lock):
        assert _in_child(twice) == 0


_RAW_LOCK = re.compile(r"\bthreading\.(R?Lock|Condition|Semaphore|BoundedSemaphore)\(|from threading import")


def test_every_lock_is_fork_safe() -> None:
    """A lock made with threading directly would hang a forked child again: every module uses ForkSafeLock."""
    found = []
    for folder in ("tessera", "transpile", "runtime"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "forksafe.py":
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if _RAW_LOCK.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []
