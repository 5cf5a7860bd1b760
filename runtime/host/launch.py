"""Loading and launching CPU-backend kernel libraries (the warm path: ctypes only, so that a
launch from a warm cache imports nothing of the compiler or the build tools).

The calling thread runs the launch (as worker 0) with the GIL released.  A launch from the
main thread while Python's default SIGINT handler is in place is cancelled by Ctrl-C, and
Python then raises KeyboardInterrupt as the call returns; `timeout=` cancels a launch that
runs too long.  Either way the engine abandons every fiber (host/host_signals.h), so no
worker outlives the call.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # CPython's own module, without typeshed stubs
import ctypes
import math
import os
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tessera.base.errors import LaunchError, TesseraError

ERROR_BUF_LEN = 2048
WATCH_SIGINT = 1
INTERRUPTED, TIMED_OUT = 3, 4


def load_library(path: Path | str) -> ctypes.CDLL:
    """Load a kernel library built by `build_shared_library` (privately: RTLD_LOCAL)."""
    try:
        return ctypes.CDLL(str(path), mode=os.RTLD_LOCAL | os.RTLD_NOW)
    except OSError as exc:
        raise TesseraError(f"cannot load the CPU kernel library {path}: {exc}") from exc


class LaunchConfig(ctypes.Structure):
    """Mirror of ``struct tsr_launch_config`` in host/host_abi.h."""

    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("dynamic_smem_bytes", ctypes.c_ulonglong),
        ("num_threads", ctypes.c_int),
        ("fiber_stack_bytes", ctypes.c_ulonglong),
        ("error_buf", ctypes.c_char_p),
        ("error_buf_len", ctypes.c_int),
        ("flags", ctypes.c_int),
        ("timeout_ms", ctypes.c_uint),
        ("sigint_seen", ctypes.c_uint),
    ]


Dims = int | Sequence[int]


def _dim3(value: Dims, what: str) -> tuple[int, int, int]:
    if type(value) is tuple and len(value) == 3:  # what the runtime passes: checked without a generator
        x, y, z = value
        if type(x) is int and type(y) is int and type(z) is int and x >= 0 and y >= 0 and z >= 0:
            return value
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and d >= 0 for d in dims):
        raise LaunchError(f"{what} must be 1 to 3 non-negative integers, got {value!r}")
    return (*dims, *(1,) * (3 - len(dims)))  # type: ignore[return-value]


def check_timeout(timeout: object) -> float | None:
    """`timeout` as seconds (None: no limit); LaunchError unless a positive finite number."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
            or timeout <= 0:
        raise LaunchError(f"timeout must be a positive number of seconds or None, not {timeout!r}")
    if timeout * 1000 >= 2**32:
        raise LaunchError(f"timeout must be less than {2**32 // 1000} seconds, not {timeout!r}")
    return float(timeout)


_MAIN_IDENT = threading.main_thread().ident  # the main thread's, read once (again after a fork)


def _forked() -> None:
    global _MAIN_IDENT
    _MAIN_IDENT = threading.main_thread().ident


os.register_at_fork(after_in_child=_forked)


def _sigint_handler() -> object:
    """signal.getsignal(SIGINT) without its conversion to an enum (6 us a launch)."""
    return _signal.getsignal(signal.SIGINT)


def _entry(lib: ctypes.CDLL, symbol: str) -> Any:
    try:
        fn = getattr(lib, symbol)  # CDLL keeps the function object: its types are set once
    except AttributeError as exc:
        raise LaunchError(f"the kernel library has no symbol {symbol!r}") from exc
    if fn.argtypes is None:
        fn.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.POINTER(ctypes.c_void_p)]
        fn.restype = ctypes.c_int
    return fn


def launch(lib: ctypes.CDLL, symbol: str, grid: Dims, block: Dims, dynamic_smem: int,
           args: Sequence[ctypes._SimpleCData | ctypes.Structure | ctypes.Array], *,
           num_threads: int | None = None, fiber_stack_bytes: int = 0, timeout: float | None = None) -> None:
    """Call the wrapper ``symbol`` of ``lib``; raise `LaunchError` with its message on failure.

    ``args`` are ctypes objects (``c_void_p`` for device pointers, ``c_int`` ...), passed as a
    ``void*[]`` of their addresses.  ``num_threads`` None or 0 means one worker thread per CPU.
    The GIL is released while the kernel runs.  ``timeout`` (seconds) cancels the launch and
    raises `LaunchError` when it has not finished in time; Ctrl-C cancels it and raises
    KeyboardInterrupt.
    """
    limit = check_timeout(timeout)
    fn = _entry(lib, symbol)
    current = _Set(_dim3(block, "block"), args)
    _configure(current.cfg, _dim3(grid, "grid"), dynamic_smem, num_threads, fiber_stack_bytes, limit)
    _call(lib, fn, current, limit)


class _Set:
    """What a launch hands the library: the configuration (and a pointer to it), the error buffer,
    the arguments' holders and the ``void*[]`` of their addresses, and the configuration last
    written (a PreparedLaunch's launch like the one before writes only the arguments)."""

    __slots__ = ("cfg", "ref", "err", "holders", "argv", "last")

    def __init__(self, block: tuple[int, int, int],
                 holders: Sequence[ctypes._SimpleCData | ctypes.Structure | ctypes.Array]) -> None:
        self.err = ctypes.create_string_buffer(ERROR_BUF_LEN)
        self.cfg = LaunchConfig()
        self.cfg.block[:] = block
        self.cfg.error_buf = ctypes.cast(self.err, ctypes.c_char_p)
        self.cfg.error_buf_len = ERROR_BUF_LEN
        self.ref = ctypes.byref(self.cfg)
        self.holders = holders
        self.argv = (ctypes.c_void_p * max(1, len(holders)))(*(ctypes.addressof(h) for h in holders))
        self.last: tuple = ()


class PreparedLaunch:
    """One entry point of a kernel library with what does not change between its launches made
    once: the function's ctypes types, the block, the argument holders of the parameters' C types
    and the ``void*[]`` of their addresses, the launch configuration and the error buffer. A launch
    takes a set from this thread's free list (a launch made meanwhile on the same thread, from a
    signal handler, makes its own set), fills in the values and gives it back."""

    def __init__(self, lib: ctypes.CDLL, symbol: str, block: Dims,
                 arg_types: Sequence[type[ctypes._SimpleCData]]) -> None:
        self.lib = lib
        self.fn = _entry(lib, symbol)
        self.block = _dim3(block, "block")
        self.arg_types = tuple(arg_types)
        self.kinds: tuple[tuple[str, str], ...] = ()  # the launcher's own record of the parameters
        self._free = threading.local()

    def __call__(self, values: Sequence[Any], grid: tuple[int, int, int], dynamic_smem: int, *,
                 num_threads: int | None = None, timeout: float | None = None) -> None:
        """Launch with ``values`` in parameter order (addresses for the pointers) and a checked
        ``grid`` (three non-negative integers); as `launch`."""
        limit = None if timeout is None else check_timeout(timeout)
        free = getattr(self._free, "sets", None)
        if free is None:
            free = self._free.sets = []
        current = free.pop() if free else _Set(self.block, [t() for t in self.arg_types])
        for h, v in zip(current.holders, values):
            h.value = v
        config = (grid, dynamic_smem, num_threads, limit)
        if config != current.last:
            _configure(current.cfg, grid, dynamic_smem, num_threads, 0, limit)
            current.last = config
        try:
            _call(self.lib, self.fn, current, limit)
        finally:
            free.append(current)


def _configure(cfg: LaunchConfig, grid: tuple[int, int, int], dynamic_smem: int, num_threads: int | None,
               fiber_stack_bytes: int, limit: float | None) -> None:
    cfg.grid[:] = grid
    cfg.dynamic_smem_bytes = int(dynamic_smem)
    cfg.num_threads = int(num_threads or 0)
    cfg.fiber_stack_bytes = int(fiber_stack_bytes)
    cfg.timeout_ms = 0 if limit is None else max(1, math.ceil(limit * 1000))


def _call(lib: ctypes.CDLL, fn: Any, current: _Set, limit: float | None) -> None:
    """The launch proper: the SIGINT watch around the call, the status."""
    cfg, ref, argv = current.cfg, current.ref, current.argv
    # Ctrl-C stops the launch only where Python would raise KeyboardInterrupt for it. The
    # library's handler is put in front of Python's before the call, and the launch takes it away
    # as it returns (host/host_signals.h); when SIGINT cancelled the launch, Python raises
    # KeyboardInterrupt as the call returns.
    watch_fn = getattr(lib, "tsr_sigint_watch_v1", None) if threading.get_ident() == _MAIN_IDENT and \
        _sigint_handler() is signal.default_int_handler else None
    if watch_fn is not None:
        if watch_fn.restype is not ctypes.c_uint:
            watch_fn.restype = ctypes.c_uint
        cfg.sigint_seen = watch_fn()
        cfg.flags = WATCH_SIGINT
        try:
            status = fn(ref, argv)  # puts Python's handler back as it returns
        except BaseException:
            lib.tsr_sigint_unwatch_v1()  # the call did not run
            raise
    else:
        cfg.flags = 0
        status = fn(ref, argv)
    if status == INTERRUPTED:
        raise KeyboardInterrupt  # only if Python's own handler has not raised it already
    if status == TIMED_OUT:
        raise LaunchError(f"the launch did not finish within the timeout of {limit:g} s and was cancelled")
    if status != 0:
        message = current.err.value.decode("utf-8", "replace") or f"kernel launch failed with status {status}"
        raise LaunchError(message)
