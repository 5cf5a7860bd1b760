"""A kernel unit's compiler started before its source exists (the first build of a process).

A first `tessera.load` spends 0.1 s in Python (importing the compiler, parsing, transpiling) before
the kernel unit's source exists, then waits for the C++ compiler, whose first 8-10 ms (starting,
loading the precompiled prelude) depend on nothing of that source. So `prefetch_engine` starts the
compiler then, on a unit that includes ``/dev/stdin``: it loads the prelude and waits on the pipe,
and the first `build_shared_library` of the process writes the wrapper (which includes
``kernel.cu``, written into the unit's folder first) to it.

Nothing here is needed for correctness: a unit that cannot be started, is asked for with other
flags, or fails for any reason is put aside and the kernel unit is compiled as before (a compiler
that cannot read a pipe as an include fails on the unit's ``#error``, and does not compile an empty
unit). A unit nobody takes is killed (`discard`: when the first library of the process came from
the cache; after IDLE_SECONDS; at exit), and one that a killed process leaves reads end of file
and exits (a forked child closes its copies of the pipes: `forget_after_fork`). No unit is started
for a compiler behind a cache or a distributor (ccache, sccache, distcc), whose first pass would
read the pipe.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from tessera.base.forksafe import ForkSafeLock

IDLE_SECONDS = 30.0  # a unit not taken by then is killed: a waiting compiler holds ~20 MB
MAIN = "unit.cpp"
# The unit: the wrapper arrives on the compiler's stdin; it ends with the define, so a compiler that
# read nothing from the pipe stops at the #error instead of compiling an empty unit.
MAIN_TEXT = '#include "/dev/stdin"\n#ifndef TSR_UNIT_READ\n#error "the kernel unit was not read from the pipe"\n#endif\n'
TAIL = "\n#define TSR_UNIT_READ 1\n"


class StartedUnit:
    """A compiler running on `MAIN` in its own temporary folder, waiting for the wrapper."""

    def __init__(self, cxx: Sequence[str], command: Callable[[Path, Path], list[str]]) -> None:
        """`command(folder, main)`: the compile command of the unit `main` (in `folder`, where it
        writes ``kernel.o``)."""
        self.cxx = tuple(cxx)
        self.timer: threading.Timer | None = None  # the idle expiry, while it waits
        self.folder = Path(tempfile.mkdtemp(prefix="tessera-host-"))
        try:
            (self.folder / MAIN).write_text(MAIN_TEXT)
            self.proc = subprocess.Popen(command(self.folder, self.folder / MAIN), cwd=self.folder,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        _LIVE.add(self)

    def finish(self, wrapper_source: str) -> subprocess.CompletedProcess[str] | None:
        """The compile's outcome once `wrapper_source` is fed to it (``kernel.cu`` must be in the
        folder by then), or None where the pipe failed (the caller compiles the unit as before;
        its `discard` ends the compiler)."""
        try:
            out, err = self.proc.communicate(f'#line 1 "wrapper.cpp"\n{wrapper_source}{TAIL}')
        except OSError:
            return None
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)

    def stop_timer(self) -> None:
        """End the idle expiry's thread (unless this is it)."""
        if self.timer is not None:
            self.timer.cancel()
            if self.timer is not threading.current_thread():
                self.timer.join()

    def discard(self) -> None:
        """Kill the compiler (if it still runs) and remove the folder."""
        self.stop_timer()
        if self.proc.poll() is None:
            self.proc.kill()  # the driver; cc1plus reads end of file when communicate closes the pipe
        self.proc.communicate()
        shutil.rmtree(self.folder, ignore_errors=True)
        _LIVE.discard(self)

    def close_in_child(self) -> None:
        """In a forked child: close the child's copies of the pipes, so that the compiler still
        reads end of file when the parent closes its end (and its output reaches the parent)."""
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


_LOCK = ForkSafeLock()
_LIVE: set[StartedUnit] = set()  # every unit not discarded yet, waiting or taken (see forget_after_fork)
_UNIT: list[StartedUnit] = []  # at most one: the unit started for this process's first build
_closed = [False]  # after the first build or a first library from the cache, no unit is started


def start(cxx: Sequence[str], command: Callable[[Path, Path], list[str]]) -> None:
    """Start a unit for `cxx` unless one is waiting (silently none where it cannot start)."""
    with _LOCK:
        if _UNIT or _closed[0]:
            return
        with contextlib.suppress(OSError):
            unit = StartedUnit(cxx, command)
            _UNIT.append(unit)
            unit.timer = threading.Timer(IDLE_SECONDS, _expire, (unit,))
            unit.timer.name = "tessera-unit-expiry"
            unit.timer.daemon = True
            unit.timer.start()


def _expire(unit: StartedUnit) -> None:
    with _LOCK:
        if unit not in _UNIT:
            return  # taken or discarded meanwhile
        _UNIT.remove(unit)
    unit.discard()


def take(cxx: Sequence[str]) -> StartedUnit | None:
    """The waiting unit if it is for `cxx` and still runs (then it is the caller's), else None; no
    unit is started after this (the prefetch may not have started it yet)."""
    with _LOCK:
        _closed[0] = True
        if not _UNIT or _UNIT[0].cxx != tuple(cxx):
            return None
        unit = _UNIT.pop()
    unit.stop_timer()
    if unit.proc.poll() is not None:  # it failed before its source was there: the caller compiles anew
        unit.discard()
        return None
    return unit


def discard() -> None:
    """Kill the started unit nobody took (a no-op when there is none), and start none after this
    (the prefetch may not have started it yet)."""
    with _LOCK:
        _closed[0] = True
        unit = _UNIT.pop() if _UNIT else None
    if unit is not None:
        unit.discard()


def forget_after_fork() -> None:
    """In a forked child: the parent's units are the parent's. The child closes its copies of their
    pipes: holding the write end of a unit's stdin, it would keep the compiler waiting (and the
    parent's build, or its discard, waiting for the compiler) for as long as the child lives. (The
    lock is new in the child: ForkSafeLock.)"""
    for unit in _LIVE:
        unit.close_in_child()
    _LIVE.clear()
    _UNIT.clear()
    _closed[0] = False


atexit.register(discard)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=forget_after_fork)
