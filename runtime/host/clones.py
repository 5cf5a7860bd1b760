"""Which clones of a region-mode kernel the CPU backend compiles (``$TESSERA_CPU_CLONES``).

By default a region-mode kernel with a loop is compiled twice where the host allows, for AVX2 and
for the baseline, and its library picks one when it loads (TSR_VECTOR_CLONES in tessera_host.h).
``TESSERA_CPU_CLONES=host`` compiles such a kernel once instead, for the clone this machine's CPU
would pick (AVX2 where /proc/cpuinfo lists it, else the baseline): the same code runs, the kernel
takes about half the compiler's time, and the library is for CPUs with this one's features only (a
test suite's, say). The choice is part of a library's cache key (`wrapper_prefix` is part of the
code it is built from) and of a variant's (tessera/variant.py).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from tessera.base.errors import TesseraError

ENV = "TESSERA_CPU_CLONES"
MODES = ("all", "host")


def mode() -> str:
    """"all" (the default) or "host"; another value of $TESSERA_CPU_CLONES is an error naming it."""
    value = os.environ.get(ENV, "").strip() or "all"
    if value not in MODES:
        raise TesseraError(f"${ENV} must be one of {', '.join(MODES)}, not {value!r}")
    return value


@functools.cache
def host_has_avx2() -> bool:
    """Whether this machine's CPU has AVX2 (Linux's /proc/cpuinfo; False where there is none: only
    glibc's x86-64 hosts get clones at all)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(line.startswith("flags") and "avx2" in line.split(":", 1)[-1].split() for line in text.splitlines())


def wrapper_prefix() -> str:
    """What a kernel library's wrapper unit starts with, before it includes the kernels: nothing for
    every clone; for "host", the prelude's clone macros redefined (where it defines them) to compile
    a kernel once, with AVX2's target attribute or none, and to hide nothing (no dispatch symbols)."""
    if mode() == "all":
        return ""
    target = '__attribute__((target("avx2")))' if host_has_avx2() else ""
    return ("#if defined(TSR_CLONES_OK)  // TESSERA_CPU_CLONES=host: the clone this CPU picks, only\n"
            "#undef TSR_VECTOR_CLONES\n"
            "#undef TSR_HIDE_CLONES\n"
            f"#define TSR_VECTOR_CLONES {target}\n"
            "#define TSR_HIDE_CLONES(name) static_cast<void>(0)\n"
            "#endif\n")
