"""Loading and launching CPU-backend kernel libraries (the warm path: ctypes only, so that a
launch from a warm cache imports nothing of the compiler or the build tools)."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from pathlib import Path

from tessera.errors import LaunchError, TesseraError

ERROR_BUF_LEN = 2048


def load_library(path: Path | str) -> ctypes.CDLL:
    """Load a kernel library built by `build_shared_library` (privately: RTLD_LOCAL)."""
    try:
        return ctypes.CDLL(str(path), mode=os.RTLD_LOCAL | os.RTLD_NOW)
    except OSError as exc:
        raise TesseraError(f"cannot load the CPU kernel library {path}: {exc}") from exc


class LaunchConfig(ctypes.Structure):
    """Mirror of ``struct tsr_launch_config`` in tessera_host.h."""

    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("dynamic_smem_bytes", ctypes.c_ulonglong),
        ("num_threads", ctypes.c_int),
        ("fiber_stack_bytes", ctypes.c_ulonglong),
        ("error_buf", ctypes.c_char_p),
        ("error_buf_len", ctypes.c_int),
    ]


Dims = int | Sequence[int]


def _dim3(value: Dims, what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and d >= 0 for d in dims):
        raise LaunchError(f"{what} must be 1 to 3 non-negative integers, got {value!r}")
    return (*dims, *(1,) * (3 - len(dims)))  # type: ignore[return-value]


def launch(lib: ctypes.CDLL, symbol: str, grid: Dims, block: Dims, dynamic_smem: int,
           args: Sequence[ctypes._SimpleCData | ctypes.Structure | ctypes.Array], *,
           num_threads: int | None = None, fiber_stack_bytes: int = 0) -> None:
    """Call the wrapper ``symbol`` of ``lib``; raise `LaunchError` with its message on failure.

    ``args`` are ctypes objects (``c_void_p`` for device pointers, ``c_int`` ...), passed
    as a ``void*[]`` of their addresses.  ``num_threads`` None or 0 means one worker
    thread per CPU.  The GIL is released while the kernel runs.
    """
    try:
        fn = getattr(lib, symbol)
    except AttributeError as exc:
        raise LaunchError(f"the kernel library has no symbol {symbol!r}") from exc
    fn.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.POINTER(ctypes.c_void_p)]
    fn.restype = ctypes.c_int
    err = ctypes.create_string_buffer(ERROR_BUF_LEN)
    cfg = LaunchConfig()
    cfg.grid[:] = _dim3(grid, "grid")
    cfg.block[:] = _dim3(block, "block")
    cfg.dynamic_smem_bytes = int(dynamic_smem)
    cfg.num_threads = int(num_threads or 0)
    cfg.fiber_stack_bytes = int(fiber_stack_bytes)
    cfg.error_buf = ctypes.cast(err, ctypes.c_char_p)
    cfg.error_buf_len = ERROR_BUF_LEN
    argv = (ctypes.c_void_p * max(1, len(args)))(*(ctypes.addressof(a) for a in args))
    status = fn(ctypes.byref(cfg), argv)
    if status != 0:
        message = err.value.decode("utf-8", "replace") or f"kernel launch failed with status {status}"
        raise LaunchError(message)
