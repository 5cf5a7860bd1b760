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
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tessera.base.errors import LaunchError, TesseraError

ERROR_BUF_LEN = 2048
WATCH_SIGINT = 1
INTERRUPTED, TIMED_OUT, NOT_WATCHED = 3, 4, 5


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


# Python's pending signals, handled now (a KeyboardInterrupt raised here): a SIGINT that came
# after Python last looked and before the launch read the count would otherwise wait for the end
# of the launch (host/host_signals.h: a SIGINT after the read cancels the launch itself).
_check_signals = ctypes.pythonapi.PyErr_CheckSignals
_check_signals.argtypes = []
_check_signals.restype = ctypes.c_int


def _entry(lib: ctypes.CDLL, symbol: str) -> Any:
    try:
        fn = getattr(lib, symbol)  # CDLL keeps the function object: its types are set once
    except AttributeError as exc:
        raise LaunchError(f"the kernel library has no symbol {symbol!r}") from exc
    # No argtypes: the two arguments are always a byref of a LaunchConfig and a c_void_p array,
    # which ctypes passes as pointers as they are (their argtypes' checks cost 1 us a launch).
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
    _call(lib, fn, _Set(_dim3(block, "block"), args), limit, _dim3(grid, "grid"), dynamic_smem, num_threads,
          fiber_stack_bytes)


class _Set:
    """What a launch hands the library: the configuration (and a pointer to it), the error buffer,
    the arguments (ctypes holders, or one buffer that a `struct` layout packs) and the ``void*[]``
    of their addresses, and the configuration last written (a PreparedLaunch's launch like the one
    before writes only the arguments)."""

    __slots__ = ("cfg", "ref", "err", "holders", "argv", "last", "buffer")

    def __init__(self, block: tuple[int, int, int],
                 holders: Sequence[ctypes._SimpleCData | ctypes.Structure | ctypes.Array],
                 layout: struct.Struct | None = None) -> None:
        self.err = ctypes.create_string_buffer(ERROR_BUF_LEN)
        self.cfg = LaunchConfig()
        self.cfg.block[:] = block
        self.cfg.error_buf = ctypes.cast(self.err, ctypes.c_char_p)
        self.cfg.error_buf_len = ERROR_BUF_LEN
        self.ref = ctypes.byref(self.cfg)
        self.holders = holders
        self.buffer = bytearray()
        if layout is None:
            self.argv = (ctypes.c_void_p * max(1, len(holders)))(*(ctypes.addressof(h) for h in holders))
        else:
            # A bytearray (`pack_into` takes it without the format string a ctypes buffer builds at
            # each export); the ctypes view of it, kept with the `void*[]`, gives its address and
            # forbids resizing it.
            codes = layout.format[1:]
            self.buffer = bytearray(max(1, layout.size))
            view = (ctypes.c_char * len(self.buffer)).from_buffer(self.buffer)
            offsets = [struct.calcsize("@" + codes[:i + 1]) - struct.calcsize(codes[i]) for i in range(len(codes))]
            self.argv = (ctypes.c_void_p * max(1, len(codes)))(*(ctypes.addressof(view) + o for o in offsets))
            self.argv._keep = view  # type: ignore[attr-defined]
        self.last: tuple = ()


class PreparedLaunch:
    """One entry point of a kernel library with what does not change between its launches made
    once: the function's ctypes types, the block, the `struct` layout of the parameters' C types
    (each at its C alignment in one buffer, as the wrapper reads them through the ``void*[]``),
    the launch configuration and the error buffer. A launch takes a set from the free list (a
    launch made meanwhile, on another thread or from a signal handler, makes its own), fills in
    the values with one `pack_into` and gives it back."""

    def __init__(self, lib: ctypes.CDLL, symbol: str, block: Dims,
                 arg_types: Sequence[type[ctypes._SimpleCData]]) -> None:
        self.lib = lib
        self.fn = _entry(lib, symbol)
        self.block = _dim3(block, "block")
        self.arg_types = tuple(arg_types)
        self.layout = struct.Struct("@" + "".join(t._type_ for t in self.arg_types))  # type: ignore[attr-defined]
        self.kinds: tuple[tuple[str, str], ...] = ()  # the launcher's own record of the parameters
        self.free: list[_Set] = []  # list.pop and list.append are atomic

    def __call__(self, values: Sequence[Any], grid: tuple[int, int, int], dynamic_smem: int, *,
                 num_threads: int | None = None, timeout: float | None = None) -> None:
        """Launch with ``values`` in parameter order (addresses for the pointers) and a checked
        ``grid`` (three non-negative integers); as `launch`."""
        limit = None if timeout is None else check_timeout(timeout)
        self.run(values, grid, dynamic_smem, num_threads, limit)

    def run(self, values: Sequence[Any], grid: tuple[int, int, int], dynamic_smem: int, num_threads: int | None,
            limit: float | None) -> None:
        """`__call__` with a checked `limit` (seconds or None)."""
        try:
            current = self.free.pop()
        except IndexError:
            current = _Set(self.block, (), self.layout)
        try:
            try:
                self.layout.pack_into(current.buffer, 0, *values)
            except (struct.error, OverflowError):  # an f32 scalar beyond f32's range: ctypes makes it inf
                _call(self.lib, self.fn, _Set(self.block, [t(v) for t, v in zip(self.arg_types, values)]), limit,
                      grid, dynamic_smem, num_threads)
                return
            _call(self.lib, self.fn, current, limit, grid, dynamic_smem, num_threads)
        finally:
            self.free.append(current)


def _configure(cfg: LaunchConfig, grid: tuple[int, int, int], dynamic_smem: int, num_threads: int | None,
               fiber_stack_bytes: int, limit: float | None) -> None:
    cfg.grid[:] = grid
    cfg.dynamic_smem_bytes = int(dynamic_smem)
    cfg.num_threads = int(num_threads or 0)
    cfg.fiber_stack_bytes = int(fiber_stack_bytes)
    cfg.timeout_ms = 0 if limit is None else max(1, math.ceil(limit * 1000))


class _Watch:
    """A library's SIGINT watch (host/host_signals.h): the calls that put its handler in front and
    back, and where it counts the SIGINTs it has seen."""

    __slots__ = ("watch", "unwatch", "count")

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.watch, self.unwatch = lib.tsr_sigint_watch_v1, lib.tsr_sigint_unwatch_v1
        self.watch.restype = ctypes.c_uint
        self.unwatch.restype = None
        counter = lib.tsr_sigint_counter_v1
        counter.restype = ctypes.c_void_p
        self.count = ctypes.c_uint.from_address(counter())


_WATCHES: dict[ctypes.CDLL, _Watch | None] = {}
# The library whose SIGINT handler is in front (it stays there between its launches); another
# library's launch puts it back first, so that no handler chains to another library's.
_front: list[_Watch | None] = [None]


def _watch_of(lib: ctypes.CDLL) -> _Watch | None:
    if lib not in _WATCHES:
        _WATCHES[lib] = _Watch(lib) if getattr(lib, "tsr_sigint_counter_v1", None) is not None else None
    return _WATCHES[lib]


def _call(lib: ctypes.CDLL, fn: Any, current: _Set, limit: float | None, grid: tuple[int, int, int],
          dynamic_smem: int, num_threads: int | None, fiber_stack_bytes: int = 0) -> None:
    """The launch proper: the configuration where it changed, the SIGINT watch, the call, the
    status."""
    cfg, ref, argv = current.cfg, current.ref, current.argv
    config = (grid, dynamic_smem, num_threads, limit, fiber_stack_bytes)
    if config != current.last:
        _configure(cfg, grid, dynamic_smem, num_threads, fiber_stack_bytes, limit)
        current.last = config
    # Ctrl-C stops the launch only where Python would raise KeyboardInterrupt for it: launched
    # from the main thread with Python's default handler in place. The library's handler is then
    # in front of Python's (host/host_signals.h); when SIGINT cancelled the launch, Python raises
    # KeyboardInterrupt as the call returns.
    w = _WATCHES[lib] if lib in _WATCHES else _watch_of(lib)
    if w is not None and threading.get_ident() == _MAIN_IDENT and _sigint_handler() is signal.default_int_handler:
        cfg.flags = WATCH_SIGINT
        for _ in range(2):
            if _front[0] is w:
                cfg.sigint_seen = w.count.value
            else:
                if _front[0] is not None:
                    _front[0].unwatch()
                _front[0] = None
                cfg.sigint_seen = w.watch()
                _front[0] = w
            _check_signals()
            status = fn(ref, argv)
            if status != NOT_WATCHED:
                break
            _front[0] = None  # replaced (Python's signal.signal): watch again
        else:
            cfg.flags = 0  # no handler to be in front of (SIGINT ignored)
            status = fn(ref, argv)
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
