"""Locks that survive a fork: `ForkSafeLock`, the one kind of lock Tessera's modules and objects
keep. A process forked while another of its threads holds a lock gets a copy of the lock, held,
and none of the thread that would release it: the child's first compile (the fingerprint, the
caches, the engine build, the autotuner) would wait forever. After a fork every `ForkSafeLock` of
the child is replaced by a new, unheld one (`os.register_at_fork`). The thread that forked keeps
no lock across a fork: Tessera never forks while holding one.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

__all__ = ["ForkSafeLock"]


class ForkSafeLock:
    """A `threading.Lock` (an `RLock` with `reentrant=True`) that a forked child gets new and unheld;
    used as `with lock:` or through `acquire`/`release`."""

    __slots__ = ("__weakref__", "_lock", "_reentrant")

    def __init__(self, reentrant: bool = False) -> None:
        self._reentrant = reentrant
        self._lock: Any = threading.RLock() if reentrant else threading.Lock()
        _ALL.add(self)

    def __enter__(self) -> bool:
        return bool(self._lock.acquire())

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return bool(self._lock.acquire(blocking, timeout))

    def release(self) -> None:
        self._lock.release()

    def renew(self) -> None:
        """Replace the lock by a new, unheld one (in a forked child: see `_after_fork_in_child`)."""
        self._lock = threading.RLock() if self._reentrant else threading.Lock()


_ALL: weakref.WeakSet[ForkSafeLock] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for lock in list(_ALL):
        lock.renew()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
