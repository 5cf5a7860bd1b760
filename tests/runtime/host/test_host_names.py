"""No user name binds to or clashes with anything outside the generated module on the CPU
backend: C library names (functions, macros, variables), names the host prelude declares, and
names the engine links against.  NVRTC accepts the same programs."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.host import build as host_build
from tessera.runtime.host.build import build_shared_library
from tessera.transpile.driver import compile_source
from tessera.transpile.names import c_ident

pytestmark = pytest.mark.usefixtures("shared_cache")


# Kernels named like C library functions: `step` used to bind to libc's step() and crash,
# `index` to never run, the others to fail in g++; fwrite and calloc are called by the engine.
KERNELS = ["step", "index", "random", "sync", "time", "link", "read", "fwrite", "calloc"]
# Module constants named like C macros and variables, the prelude's namespace, g++'s `std`.
CONSTS = ["M_PI", "EOF", "INT32_MAX", "stdout", "std", "tsr", "errno", "NULL", "INFINITY", "NAN", "RAND_MAX",
          "EXIT_FAILURE", "SIZE_MAX", "BUFSIZ", "environ", "signal", "TESSERA_HOST", "float3", "atomicAdd"]

ITEMS = "".join(f"const {c} = {i + 1}\n" for i, c in enumerate(CONSTS)) + "".join(f"""
@kernel tile[(32,)]
def {k}(out: mut i32[n]):
    out[tile_linear_id()] = tile_linear_id() + {j} * 1000 + {" + ".join(CONSTS)}
""" for j, k in enumerate(KERNELS))

LOCALS = """
@kernel tile[(32,)]
def locals_and_params(out: mut i32[n], errno: i32, stdout: i32, M_PI: f32, environ: i32):
    t = tile_linear_id()
    time = t + errno
    read = stdout * 2
    sync = time + read
    signal = sync
    EOF = i32(M_PI)
    std = EOF
    tsr = std + environ
    INT32_MAX = signal + tsr
    out[t] = INT32_MAX
"""


def test_c_library_names_as_kernels_constants_locals_and_parameters() -> None:
    mod = tessera.compile(ITEMS, backend="cpu")
    total = len(CONSTS) * (len(CONSTS) + 1) // 2
    for j, name in enumerate(KERNELS):
        out = np.zeros(32, np.int32)
        mod[name](out, grid=1)
        assert np.array_equal(out, np.arange(32) + j * 1000 + total), name
    out = np.zeros(32, np.int32)
    tessera.compile(LOCALS, backend="cpu").locals_and_params(out, 5, 7, 3.5, 100, grid=1)
    assert np.array_equal(out, np.arange(32) + 5 + 14 + 3 + 100)


def test_the_same_names_compile_with_nvrtc() -> None:
    from tessera.runtime.cuda import nvrtc

    for text in (ITEMS, LOCALS):
        result = nvrtc.compile_cuda(compile_source(SourceFile("names.tsr", text)).cuda)
        assert not result.warnings, result.log


def _prelude_names(tmp_path: Path) -> tuple[set[str], set[str]]:
    """(every identifier in the preprocessed prelude, every macro it defines)."""
    cxx = host_build.find_cxx()
    (tmp_path / "empty.cpp").write_text("")
    base = [*cxx, *host_build.KERNEL_FLAGS, "-include", str(host_build.host_header_path()), "-E"]
    text = subprocess.run([*base, "-P", "empty.cpp"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    macros = subprocess.run([*base, "-dM", "empty.cpp"], cwd=tmp_path, capture_output=True, text=True,
                            check=True).stdout
    text = re.sub(r'"(\\.|[^"\\])*"', "", text)
    return set(re.findall(r"\b[A-Za-z_]\w*\b", text)), set(re.findall(r"^#define (\w+)", macros, re.M))


def test_no_name_the_compiler_keeps_clashes_with_the_prelude(tmp_path) -> None:
    """Every identifier of the prelude that a user name may keep in C (c_ident leaves it alone)
    is declared as a global, a parameter and a local next to the prelude: it must compile, and
    none of them is a macro."""
    idents, macros = _prelude_names(tmp_path)
    kept = sorted(n for n in idents if c_ident(n) == n)
    assert len(kept) > 50  # the scan found the prelude's own identifiers
    assert not [m for m in macros if c_ident(m) == m]
    cuda = "".join(f"[[maybe_unused]] constexpr int {n} = {i};\n" for i, n in enumerate(kept))
    # the output is named as no user name can be (c_ident renames tsr_ names): the prelude may use `out`
    cuda += 'extern "C" __global__ void user(int* tsr_out, ' + ", ".join(f"int p_{n}" for n in kept) + ") {\n"
    cuda += "".join(f"    {{ int {n} = p_{n}; tsr_out[threadIdx.x] += {n}; }}\n" for n in kept)
    cuda += "    __syncthreads();\n}\n"
    build_shared_library(cuda, '#include "kernel.cu"\n', tmp_path / "names.so")


def test_the_engine_calls_only_reserved_c_library_names(tmp_path) -> None:
    """An extern "C" kernel or a table named like a C library function the engine calls would
    capture those calls at link time: each such name must be one the compiler renames."""
    nm = shutil.which("nm")
    assert nm, "binutils' nm is needed to inspect the engine"
    engine = tmp_path / "engine.o"
    engine.write_bytes(host_build.engine_object(host_build.find_cxx()))
    undefined = subprocess.run([nm, "-u", str(engine)], capture_output=True, text=True, check=True).stdout.split()
    names = {n.split("@")[0] for n in undefined if n != "U"}
    assert "fwrite" in names and "pthread_create" in names
    assert sorted(n for n in names if c_ident(n) == n and not n.startswith("tsr_")) == []


def test_only_the_launch_entry_points_and_the_engine_calls_are_exported(tmp_path) -> None:
    nm = shutil.which("nm")
    assert nm
    mod = tessera.compile(ITEMS, backend="cpu")
    from tessera.runtime.host.library import cached_library

    variant = mod.variant(None, {})
    variant.library()  # built on first use
    path = cached_library(variant.library_key)
    assert path is not None
    lib = tmp_path / "lib.so"  # the cache hands out a path valid in this process only (/proc/self/fd)
    lib.write_bytes(path.read_bytes())
    out = subprocess.run([nm, "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    exported = sorted(line.split()[-1] for line in out.splitlines() if line.strip())
    # and the engine's calls around launches (runtime/host/library.py, runtime/host/launch.py)
    assert exported == sorted([*(f"tsr_launch_{c_ident(k)}" for k in KERNELS), "tsr_trim_arenas_v1",
                               "tsr_sigint_watch_v1", "tsr_sigint_unwatch_v1", "tsr_sigint_counter_v1"])


LOOPS = "".join(f"""
@kernel tile[(32,)]
def {k}(x: f32[n], out: mut f32[n]):
    for i in range(global_linear_id(), n, grid_tile_count()):
        out[i] = x[i] * 2.0
""" for k in ("calloc", "step"))


def test_the_dispatch_of_a_kernel_compiled_twice_is_not_exported(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A region-mode kernel with a loop is compiled for AVX2 and the baseline (TSR_VECTOR_CLONES in
    the prelude): GCC gives its dispatch's symbols (the kernel's name, an ifunc, and `name.resolver`)
    default visibility, and `calloc`'s, tsr_u_calloc, matches the exports' pattern (tsr_*): the
    kernel's body hides them (TSR_HIDE_CLONES)."""
    nm = shutil.which("nm")
    assert nm
    monkeypatch.setenv("TESSERA_CPU_CLONES", "all")  # both clones and their dispatch (tests/conftest.py)
    mod = tessera.compile(LOOPS, backend="cpu")
    c = compile_source(SourceFile("k.tsr", LOOPS), options=CompileOptions(cpu_regions=True)).cuda
    assert "TSR_VECTOR_CLONES tsr_u_calloc(" in c
    from tessera.runtime.host.library import cached_library

    variant = mod.variant(None, {})
    variant.library()
    path = cached_library(variant.library_key)
    assert path is not None
    lib = tmp_path / "lib.so"
    lib.write_bytes(path.read_bytes())
    out = subprocess.run([nm, "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert {f"tsr_launch_{c_ident('calloc')}", "tsr_launch_step"} <= exported
    assert not {"tsr_u_calloc", "tsr_u_calloc.resolver", "step", "step.resolver"} & exported
    x = np.arange(100, dtype=np.float32)
    out_arr = np.zeros_like(x)
    mod.calloc(x, out_arr, grid=2)
    assert (out_arr == x * 2).all()
