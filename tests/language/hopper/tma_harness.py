"""What the tests of the CPU backend's bulk tensor copies (runtime/host/host_tma.h) share: a C++
harness that compiles host_tma.h (or a planted copy of it) on its own, with stand-ins for the engine
it needs, and exports the test's own C functions; and the box of a tensor that a copy lands, as the
PTX ISA defines it (zero outside the tensor).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np

from tests.conftest import ROOT

HOST = ROOT / "runtime" / "host"
CXX = shutil.which("g++") or shutil.which("c++")

# Before the test's functions (inside `extern "C" {`, which the test closes).
PRELUDE = r"""#define TESSERA_HOST 1
#include <cstdlib>
namespace tsr { namespace detail {
struct Worker { unsigned rcount; };
struct Tile { int index; };
struct AsyncCopy { unsigned char data[16]; unsigned char* dst; unsigned group; int line;
                   unsigned short bytes, elem_bytes; };
inline Worker* fiber_worker() { static Worker w{0}; return &w; }
inline Tile* fiber_tile() { static Tile t{0}; return &t; }
inline void yield_current(Worker*) {}
[[noreturn]] inline void deadlock(Worker*, Tile*) { abort(); }
inline void race_async_issue(const AsyncCopy&) {}
inline void race_async_land(const AsyncCopy&) {}
}}
[[noreturn]] inline void tsr_host_fail(const char*, int, const char*) { abort(); }
#define TSR_DYNAMIC_SMEM(name) unsigned char* name = nullptr
#include "host_tma.h"
extern "C" {
int h_size() { return sizeof(tsr_mbarrier); }
"""


def build_harness(folder: Path, header: str, functions: str) -> ctypes.CDLL:
    """The harness with `header` as host_tma.h and `functions` (C, ending with the `}` of `extern "C"`),
    built in `folder` and loaded."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "host_tma.h").write_text(header)
    (folder / "harness.cpp").write_text(PRELUDE + functions)
    lib = folder / "harness.so"
    assert CXX is not None
    subprocess.run([CXX, "-std=c++17", "-O1", "-shared", "-fPIC", "-I", str(folder), "-o", str(lib),
                    str(folder / "harness.cpp")], check=True, capture_output=True)
    return ctypes.CDLL(str(lib))


def box_of(tensor: np.ndarray, coords: list[int], box: list[int]) -> np.ndarray:
    """The box's dense image (shape outermost first; `coords`, `box` innermost first), zero outside
    the tensor."""
    out = np.zeros(tuple(reversed(box)), tensor.dtype)
    for idx in np.ndindex(*out.shape):
        at = tuple(coords[len(box) - 1 - k] + idx[k] for k in range(len(box)))
        if all(0 <= a < d for a, d in zip(at, tensor.shape)):
            out[idx] = tensor[at]
    return out
