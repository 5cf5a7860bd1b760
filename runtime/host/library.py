"""The CPU backend: the emitted CUDA C compiled with the host prelude into a shared library
(cached on disk), loaded with ctypes, and launched with GPU semantics (one fiber per tile)."""

from __future__ import annotations

import ctypes
import functools
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tessera.base.errors import LaunchError
from tessera.base.forksafe import ForkSafeLock
from tessera.base.kernel_info import KernelInfo, ParamInfo
from tessera.runtime.launch_args import Bound, check_shared

# The shared memory a group may have on the CPU backend: what an sm_90 GPU allows (opt-in).
CPU_SHARED_LIMIT = 227 * 1024

# C types of scalar parameters as the emitted kernels declare them (compute types).
_C_SCALAR = {"bool": "bool", "i8": "signed char", "i16": "short", "i32": "int", "i64": "long long",
             "u8": "unsigned char", "u16": "unsigned short", "u32": "unsigned int", "u64": "unsigned long long",
             "f16": "float", "bf16": "float", "f32": "float", "f64": "double"}
_C_STORAGE = dict(_C_SCALAR, f16="__half", bf16="__nv_bfloat16")
_CTYPES: dict[str, Any] = {"bool": ctypes.c_bool, "i8": ctypes.c_int8, "i16": ctypes.c_int16, "i32": ctypes.c_int32,
           "i64": ctypes.c_int64, "u8": ctypes.c_uint8, "u16": ctypes.c_uint16, "u32": ctypes.c_uint32,
           "u64": ctypes.c_uint64, "f16": ctypes.c_float, "bf16": ctypes.c_float, "f32": ctypes.c_float,
           "f64": ctypes.c_double}


def _c_param(p: ParamInfo) -> str:
    if p.kind == "tensor":
        ty = _C_STORAGE[p.dtype]
        return f"{ty}*" if p.mut else f"const {ty}*"
    return _C_SCALAR[p.dtype]


def wrapper_source(kernels: tuple[KernelInfo, ...]) -> str:
    """One exported `tsr_launch_<kernel>(cfg, args)` per kernel, unpacking a void*[].  Its own
    names all start with `tsr_`, which no user name in the emitted code does."""
    out = ['#include "kernel.cu"', ""]
    for k in kernels:
        out.append(f"TSR_EXPORT int tsr_launch_{k.c_name}(const tsr_launch_config* tsr_cfg, void** tsr_args) {{")
        names = []
        for i, p in enumerate(k.params):
            t = _c_param(p)
            out.append(f"    {t} tsr_a{i} = *static_cast<{t}*>(tsr_args[{i}]);")
            names.append(f"tsr_a{i}")
        launch = "tsr::launch_regions" if k.regions else "tsr::launch"
        out.append(f'    return {launch}(tsr_cfg, [=] {{ ::{k.c_name}({", ".join(names)}); }}, "{k.name}");')
        out.append("}")
        out.append("")
    return "\n".join(out)


def unit_source(cuda: str, kernels: tuple[KernelInfo, ...]) -> str:
    """The kernel translation unit as one file (`tesserac --emit cpu`): the emitted C and the
    wrappers that `build_library` compiles as ``wrapper.cpp`` including ``kernel.cu``, with the
    command line in front (the prelude ``tessera_host.h`` force-included)."""
    from tessera.runtime.host.recipe import KERNEL_FLAGS

    modes = ", ".join(f"{k.c_name}: {'region' if k.regions else 'fiber'} mode" for k in kernels) or "no kernels"
    head = ["// The C++ unit the CPU backend compiles (tesserac --emit cpu), built as",
            f"//   c++ {' '.join(KERNEL_FLAGS)} -include tessera_host.h -I STUBS -c FILE.cpp",
            "// with the prelude tessera_host.h of tessera/runtime/host (CUDA's built-ins on the host engine; STUBS:",
            "// empty stand-ins for the CUDA headers), and linked with the engine into a library that exports the",
            "// tsr_launch_* entry points.",
            f"// {modes}", ""]
    wrappers = wrapper_source(kernels).split("\n", 2)[2]  # without its `#include "kernel.cu"`
    return "\n".join(head) + cuda.rstrip("\n") + "\n\n// ---- launch entry points " + "-" * 70 + "\n" + wrappers


def library_key(cuda: str, wrapper: str) -> str:
    """The cache key of a kernel library: the code, the build flags, the C++ compiler and the
    Tessera fingerprint (which covers the host prelude and this backend's own sources)."""
    from tessera.runtime.cache.disk import cache_key
    from tessera.runtime.cache.fingerprint import fingerprint
    from tessera.runtime.host.build import BASE_FLAGS, find_cxx, linker
    from tessera.runtime.host.recipe import compiler_identity

    cxx = find_cxx()
    link_flags, link_version = linker(cxx)
    return cache_key("cpu-library", fingerprint(), cuda, wrapper, " ".join(BASE_FLAGS), compiler_identity(cxx),
                     " ".join(link_flags), link_version)


def build_library(cuda: str, kernels: tuple[KernelInfo, ...]) -> tuple[str, Path]:
    """(cache key, load path) of the shared library for this emitted code, built on a miss."""
    from tessera.runtime.cache.disk import DiskCache
    from tessera.runtime.cache.pinned import keep_private
    from tessera.runtime.host.build import build_shared_library
    from tessera.runtime.host.clones import wrapper_prefix

    wrapper = wrapper_prefix() + wrapper_source(kernels)
    key = library_key(cuda, wrapper)
    cache = DiskCache("cpu")
    hit = cached_library(key)
    if hit is not None:
        return key, hit
    with tempfile.TemporaryDirectory(prefix="tessera-build-") as tmp:
        out = Path(tmp) / f"{key}.so"
        build_shared_library(cuda, wrapper, out)
        stored = cache.put_file(key, ".so", out)
        # No usable cache at all (not even the private fallback): nothing is left behind.
        return key, stored if stored is not None else keep_private(out)


def build_or_fall_back(cuda: str, kernels: tuple[KernelInfo, ...],
                       fibers: Callable[[], tuple[str, tuple[KernelInfo, ...]]] | None,
                       ) -> tuple[str, Path, tuple[KernelInfo, ...]]:
    """`build_library`, and where the host compiler rejects code with kernels in region mode
    (transpile/cpu/regions.py: the compiler's own fault for a program NVRTC's checks accepted),
    the same kernels in fiber mode (`fibers()`: their CUDA C and metadata), with a warning that
    asks for a report: (cache key, load path, the kernels as built). A program that fiber mode
    rejects too raises that error."""
    from tessera.base.errors import CompileError

    try:
        return (*build_library(cuda, kernels), kernels)
    except CompileError:
        regions = [k.name for k in kernels if k.regions]
        if fibers is None or not regions:
            raise
    fiber_cuda, fiber_kernels = fibers()
    key, path = build_library(fiber_cuda, fiber_kernels)
    warnings.warn(f"internal compiler error: the CPU backend's region mode produced C that does not compile for "
                  f"{', '.join(regions)}; they run in fiber mode instead (slower, same results). Please report "
                  "this with the .tsr file", stacklevel=4)
    return key, path, fiber_kernels


def cached_library(key: str) -> Path | None:
    """The load path of the cached library with this key, or None."""
    from tessera.runtime.cache.disk import DiskCache
    from tessera.runtime.host import unit as host_unit

    hit = DiskCache("cpu").get_file(key, ".so")
    if hit is not None:
        host_unit.discard()  # the compiler started for the process's first build has nothing to build
    return hit


@functools.lru_cache(maxsize=1)
def _cpu_count() -> int:
    return os.cpu_count() or 1  # a system call (9 us), on every launch otherwise


def _default_threads() -> int:
    # os.environ's own dict (a get on os.environ raises and catches KeyError when unset: 0.5 us a launch)
    env = getattr(os.environb, "_data", os.environb).get(b"TESSERA_CPU_THREADS", b"")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return _cpu_count()


# The libraries launched most recently keep their pooled fiber stacks and worker threads; older
# ones give them back (tsr_trim_arenas_v1). Each pooled arena is two memory mappings per tile, and
# each library's pool up to a thread per CPU, so a process with many libraries would otherwise
# reach the kernel's limit on mappings (vm.max_map_count, 65530) or on threads.
KEEP_ARENAS = 4
_recent: list[CpuLibrary] = []
_recent_lock = ForkSafeLock()


def _launched(lib: CpuLibrary) -> None:
    if _recent and _recent[-1] is lib:  # the common case, without the lock: the list only changes under it
        return
    with _recent_lock:
        if _recent and _recent[-1] is lib:
            return
        if lib in _recent:
            _recent.remove(lib)
        _recent.append(lib)
        stale = _recent[:-KEEP_ARENAS]
        del _recent[:-KEEP_ARENAS]
    for old in stale:
        old.trim()


class CpuLibrary:
    """A loaded kernel library."""

    def __init__(self, path: Path) -> None:
        from tessera.runtime.host.launch import load_library

        self.path = path
        self.lib = load_library(path)
        self._entries: dict[str, Any] = {}  # kernel C name -> its PreparedLaunch

    def trim(self) -> None:
        """End this library's pooled worker threads and unmap its pooled fiber stacks (its next
        launch starts and maps new ones)."""
        fn = getattr(self.lib, "tsr_trim_arenas_v1", None)
        if fn is not None:
            fn.restype = None
            fn()

    def _prepared(self, info: KernelInfo) -> Any:
        prepared = self._entries.get(info.c_name)
        if prepared is None:
            from tessera.runtime.host.launch import PreparedLaunch

            types = [ctypes.c_void_p if p.kind == "tensor" else ctypes.c_int32 if p.kind == "shape"
                     else _CTYPES[p.dtype] for p in info.params]
            prepared = self._entries[info.c_name] = PreparedLaunch(self.lib, f"tsr_launch_{info.c_name}", info.tile,
                                                                   types)
            prepared.kinds = tuple((p.kind, p.name) for p in info.params)
        return prepared

    def direct(self, info: KernelInfo, nargs: int, check_bounds: bool) -> Callable[[tuple, Any, Any], bool] | None:
        """The direct launcher of `info` for `nargs` positional arguments (runtime/backends.py
        `Library.direct`): `launch` without a `Bound`, the arguments checked straight into the
        parameter values (runtime/direct_args.py); none with `check_bounds` (launches on copies)."""
        from tessera.runtime.direct_args import make_checker

        check = make_checker(info, nargs, device=False)
        if check is None or check_bounds or info.dynamic_smem > CPU_SHARED_LIMIT:
            return None
        prepared, smem, name = self._prepared(info), info.dynamic_smem, info.name

        def launch(args: tuple, grid: Any, stream: Any) -> bool:
            got = check(args, grid)
            if got is None:
                return False
            values, grid3, held = got  # `held` keeps other libraries' views alive during the launch
            _launched(self)
            try:
                prepared.run(values, grid3, smem, _default_threads(), None)
            except LaunchError as e:
                if str(e).startswith(name):
                    raise
                raise LaunchError(f"{name}: {e}") from None
            return True

        return launch

    def benchmark(self, info: KernelInfo, bound: Bound, *, repeat: int = 20, warmup: int = 3,
                  stream: Any = None) -> float:
        """Median milliseconds per launch, wall time, after `warmup` launches that are not timed
        (the CUDA library's method of the same name, measured with events there; `stream` is its)."""
        import statistics  # with fractions, 5-9 ms: not on a first launch's path

        for _ in range(warmup):
            self.launch(info, bound)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            self.launch(info, bound)
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    def launch(self, info: KernelInfo, bound: Bound, *, stream: Any = None, check_bounds: bool = False,
               num_threads: int | None = None, timeout: float | None = None) -> None:
        """Run a launch to its end (`stream` is the CUDA backend's: launches here run in order)."""
        check_shared(info, bound, CPU_SHARED_LIMIT, "the CPU backend (as sm_90)")
        arrays = bound.arrays
        if check_bounds:
            # Run on copies so that a failing launch leaves the caller's arrays untouched.
            arrays = {k: (np.array(v, copy=True) if _is_mut(info, k) else v) for k, v in arrays.items()}
        prepared = self._prepared(info)
        if arrays is bound.arrays:
            shapes, scalars = bound.shapes, bound.scalars
            values = [bound.address(name) if kind == "tensor" else shapes[name] if kind == "shape" else scalars[name]
                      for kind, name in prepared.kinds]
        else:
            values = [arrays[p.name].__array_interface__["data"][0] if p.kind == "tensor" else
                      bound.shapes[p.name] if p.kind == "shape" else bound.scalars[p.name] for p in info.params]
        _launched(self)
        try:
            prepared(values, bound.grid, bound.smem, num_threads=num_threads or _default_threads(), timeout=timeout)
        except LaunchError as e:
            if str(e).startswith(info.name):
                raise
            raise LaunchError(f"{info.name}: {e}") from None
        if check_bounds:
            for k, v in arrays.items():
                if _is_mut(info, k):
                    np.copyto(bound.arrays[k], v)


def _is_mut(info: KernelInfo, name: str) -> bool:
    return any(p.name == name and p.mut for p in info.params)
