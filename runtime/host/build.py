"""Build CPU-backend kernel libraries.

A kernel library has two translation units.  The kernel one is the CUDA C that Tessera emits
for NVRTC (``kernel.cu``) with a small C++ wrapper per kernel (``wrapper.cpp``), compiled with
the thin prelude ``host/tessera_host.h`` force-included, which declares only what emitted code
uses and includes no system header (precompiled by GCC when the package is installed: see
`prelude_header`).  The engine one (``host/engine.cpp``: fibers, scheduler,
launches, signals) is compiled when the package is installed (``setup.py``, with the recipe of
`tessera.runtime.host.recipe`), else once per compiler and cached as an object file.  The two are
linked with the kernel unit's stack bound (`tessera.runtime.host.frames`) into a shared library
that exports only the ``tsr_launch_*`` entry points.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path

from tessera.base.errors import CompileError, TesseraError
from tessera.base.forksafe import ForkSafeLock
from tessera.base.package_dir import package_dir
from tessera.runtime.host import recipe as host_recipe
from tessera.runtime.host import unit as host_unit
from tessera.runtime.host.diagnostics import compile_failure
from tessera.runtime.host.frames import frame_bytes, frames_asm
from tessera.runtime.host.recipe import ENGINE_FLAGS, KERNEL_FLAGS

LINK_FLAGS: tuple[str, ...] = ("-shared", "-pthread")
# Added to LINK_FLAGS where the compiler accepts it (`linker`): gold links a library in 30-35 ms
# here against 65-90 ms for the default linker (GNU ld), on the critical path of a first launch.
# Gold also exports the symbols it defines (_end, _edata, __bss_start) unless a version script
# keeps them local, as GNU ld does: only the tsr_ entry points with default visibility are global.
GOLD: tuple[str, ...] = ("-fuse-ld=gold",)
GOLD_EXPORTS = "{\n  global: tsr_*;\n  local: *;\n};\n"
# The lean link (`_link`): the C libraries only, not the compiler's default libraries. Neither unit
# needs libstdc++ or its unwinder (both are built with -fno-exceptions, and the engine allocates
# with malloc), and reading libstdc++'s symbol table was a third of a library's link (13 ms
# instead of 19-22 here, on the critical path of a first launch). --no-undefined: a reference
# these libraries do not resolve fails the link instead of the library's load.
LEAN_LINK: tuple[str, ...] = ("-nodefaultlibs", "-Wl,--no-undefined")
LEAN_LIBS: tuple[str, ...] = ("-lm", "-lpthread", "-lc", "-lgcc")
# Every flag a kernel library is built with (part of its cache key).
BASE_FLAGS: tuple[str, ...] = KERNEL_FLAGS + ENGINE_FLAGS + LINK_FLAGS + LEAN_LINK + LEAN_LIBS

# CUDA headers that emitted code may include; everything they declare that the backend
# supports is in the prelude, so empty stand-ins satisfy the #include.
STUB_HEADERS: tuple[str, ...] = (
    "cuda_fp16.h",
    "cuda_bf16.h",
    "cuda_runtime.h",
    "cuda_pipeline_primitives.h",
    "device_launch_parameters.h",
)


def find_cxx() -> list[str]:
    """The C++ compiler command: ``$CXX`` (split like a shell would), else c++, g++ or clang++ on PATH."""
    try:
        return host_recipe.find_cxx()
    except host_recipe.NoCompiler as exc:
        raise TesseraError(str(exc)) from None


_LINKERS: dict[tuple[str, ...], subprocess.Popen[str] | tuple[tuple[str, ...], str]] = {}
_LINKER_LOCK = ForkSafeLock()


def _probe_gold(cxx: tuple[str, ...]) -> subprocess.Popen[str] | tuple[tuple[str, ...], str]:
    try:
        return subprocess.Popen([*cxx, *GOLD, "-Wl,--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, text=True)
    except OSError:
        return LINK_FLAGS, ""


def start_linker_probe(cxx: Sequence[str]) -> None:
    """Start asking `cxx` whether it links with gold (a process of 15-20 ms), once per compiler;
    `linker` takes the answer."""
    with _LINKER_LOCK:
        if tuple(cxx) not in _LINKERS:
            _LINKERS[tuple(cxx)] = _probe_gold(tuple(cxx))


def linker(cxx: Sequence[str]) -> tuple[tuple[str, ...], str]:
    """The link flags for `cxx` (LINK_FLAGS, plus GOLD where gold answers) and the linker's version
    line ("" for the default linker): both are part of a library's cache key."""
    with _LINKER_LOCK:
        probe = _LINKERS.get(tuple(cxx)) or _probe_gold(tuple(cxx))
        if isinstance(probe, subprocess.Popen):
            first = (probe.communicate()[0].splitlines() or [""])[0]
            probe = (LINK_FLAGS + GOLD, first) if probe.returncode == 0 and "GNU gold" in first else (LINK_FLAGS, "")
        _LINKERS[tuple(cxx)] = probe
        return probe


def host_dir() -> Path:
    """The folder of the prelude and the engine: the ``tessera.runtime.host`` package's own."""
    path = package_dir("tessera.runtime.host")
    if not (path / "tessera_host.h").is_file() or not (path / "engine.cpp").is_file():
        raise TesseraError(f"the CPU backend's prelude or engine is missing from {path}")
    return path


def host_header_path() -> Path:
    """Path of the prelude force-included into the kernel translation unit."""
    return host_dir() / "tessera_host.h"


_PRELUDES: dict[tuple[str, ...], Path] = {}


def prelude_header(cxx: Sequence[str]) -> Path:
    """The prelude the kernel unit force-includes: the header of the prelude precompiled for `cxx`
    when the package was installed (same compiler identity, flags and sources; checksum intact,
    checked once per process), else tessera_host.h itself."""
    found = _PRELUDES.get(tuple(cxx))
    if found is None:
        found = host_recipe.prebuilt_prelude(prebuilt_dir(), host_recipe.prelude_key(cxx, host_dir()))
        found = _PRELUDES[tuple(cxx)] = found or host_header_path()
    return found


def prebuilt_dir() -> Path:
    """The folder of the engine object and the precompiled prelude built when the package was
    installed (``setup.py``)."""
    return host_dir() / host_recipe.PREBUILT


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise TesseraError(f"cannot run the C++ compiler {cmd[0]!r}: {exc}") from exc


def _warn_output(proc: subprocess.CompletedProcess[str]) -> None:
    output = (proc.stdout + proc.stderr).strip()
    if output:
        warnings.warn(f"host C++ compiler output:\n{output}", stacklevel=3)


_ENGINES: dict[str, bytes] = {}
_ENGINE_LOCK = ForkSafeLock()  # one build of the engine at a time in a process (see prefetch_engine)
_PREFETCH_LOCK = ForkSafeLock()  # not _ENGINE_LOCK: a second prefetch must not wait for the build
_prefetched = False


def engine_object(cxx: Sequence[str]) -> bytes:
    """The compiled engine for `cxx` (an object file's bytes): from the disk cache, else the one
    built when the package was installed if it was built for the same key (`prebuilt_dir`: same
    compiler identity, flags and sources, checksum intact), else built once (and cached; kept in
    memory for the process when the cache is off). A byte entry, not a file entry: the linker runs
    in another process, and the object is never loaded, so nothing needs to stay pinned."""
    from tessera.runtime.cache.disk import DiskCache

    key = host_recipe.engine_key(cxx, host_dir())
    with _ENGINE_LOCK:
        known = _ENGINES.get(key)
        if known is not None:
            return known
        cache = DiskCache("cpu")
        data = cache.get_bytes(key)
        if data is None:
            data = host_recipe.read_prebuilt(prebuilt_dir(), key)
        if data is None:
            data = _build_engine(cxx)
            cache.put_bytes(key, data)
        _ENGINES[key] = data
        return data


def _take_prebuilt(cxx: Sequence[str]) -> bool:
    """Whether the prebuilt engine (`prebuilt_dir`) was built for `cxx` and the host sources and is
    intact; if so, it is what `engine_object` returns in this process."""
    key = host_recipe.engine_key(cxx, host_dir())
    data = host_recipe.read_prebuilt(prebuilt_dir(), key)
    if data is not None:
        with _ENGINE_LOCK:
            _ENGINES.setdefault(key, data)
    return data is not None


class _EngineBuild:
    """A compile of the engine into a temporary folder, running from its construction on."""

    def __init__(self, cxx: Sequence[str]) -> None:
        self._tmp = Path(tempfile.mkdtemp(prefix="tessera-engine-"))
        self._cxx = cxx[0]
        cmd = host_recipe.engine_command(cxx, host_dir(), self._tmp / "engine.o")
        try:
            self._proc = subprocess.Popen(cmd, cwd=self._tmp, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True)
        except OSError as exc:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise TesseraError(f"cannot run the C++ compiler {cmd[0]!r}: {exc}") from exc

    def result(self) -> bytes:
        """The object file's bytes, once the compiler is done."""
        try:
            out, err = self._proc.communicate()
            proc = subprocess.CompletedProcess(self._proc.args, self._proc.returncode, out, err)
            if proc.returncode != 0:
                raise TesseraError(f"the CPU backend's engine does not compile with {self._cxx}:\n"
                                   + (out + err).strip())
            _warn_output(proc)
            return (self._tmp / "engine.o").read_bytes()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def cancel(self) -> None:
        self._proc.kill()
        self._proc.communicate()
        shutil.rmtree(self._tmp, ignore_errors=True)


# The prefetch's build, started before the cache is asked (`prefetch_engine`), for the build to take.
_STARTED: dict[tuple[str, ...], _EngineBuild] = {}


def _build_engine(cxx: Sequence[str]) -> bytes:
    return (_STARTED.pop(tuple(cxx), None) or _EngineBuild(cxx)).result()


def prefetch_engine() -> None:
    """Start getting the engine object on a background thread: the prebuilt one when it was built
    for this compiler and these sources (read here, well under a millisecond; no compile), else from
    the cache or by compiling it (most of a first launch's time with an empty cache), so that it
    overlaps the transpiling and the kernel unit's compile; `engine_object` then waits for it. Not a
    daemon thread: a process that ends meanwhile waits for the build (and keeps its result in the
    cache) rather than leaving a compiler writing into a temporary folder nobody removes."""
    global _prefetched
    with _PREFETCH_LOCK:
        if _prefetched:
            return
        _prefetched = True
    try:
        cxx = find_cxx()
        # Without a prebuilt engine the compile starts here (2-3 ms), not on the thread, where each
        # system call of starting it waited for the GIL while this one imports the compiler
        # (15-45 ms); it starts before the cache is asked (on the thread), and is cancelled if the
        # cache has the engine.
        if not _take_prebuilt(cxx):
            _STARTED[tuple(cxx)] = _EngineBuild(cxx)
    except (TesseraError, OSError):
        return  # the build proper reports it
    threading.Thread(target=_prefetch, args=(cxx,), name="tessera-engine-build").start()


def _prefetch(cxx: list[str]) -> None:
    start_linker_probe(cxx)  # runs beside the engine's compile; the link takes its answer
    try:
        with contextlib.suppress(OSError, ValueError):
            prelude_header(cxx)  # its checksum (5 MB, 3 ms) computed here, beside the compiler's imports
            start_unit(cxx)
        # A failure is not cached: the build proper runs it again and raises it where it is seen.
        with contextlib.suppress(TesseraError, OSError):
            engine_object(cxx)
    finally:
        unused = _STARTED.pop(tuple(cxx), None)
        if unused is not None:
            unused.cancel()
        linker(cxx)  # the probe's process reaped here, also when no library is linked


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's threads and child processes: the parent's engine
    compile and linker probe forgotten (its locks are new: ForkSafeLock)."""
    _STARTED.clear()
    for cxx in [c for c, probe in _LINKERS.items() if isinstance(probe, subprocess.Popen)]:
        del _LINKERS[cxx]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def stub_headers(folder: Path) -> Path:
    """`folder`, created with an empty stand-in for each CUDA header emitted code may include."""
    folder.mkdir()
    for name in STUB_HEADERS:
        (folder / name).write_text(f"// {name}: provided by tessera_host.h on the CPU backend\n")
    return folder


def kernel_command(cxx: Sequence[str], source: Path, output: Path, include_dir: Path,
                   extra_flags: Sequence[str] = ()) -> list[str]:
    """The compiler command line for a kernel translation unit (writes ``<output stem>.su``)."""
    return [*cxx, *KERNEL_FLAGS, "-fstack-usage", "-I", str(include_dir), "-include", str(prelude_header(cxx)),
            *extra_flags, "-c", str(source), "-o", str(output)]


def build_shared_library(cuda_source: str, wrapper_source: str, out_path: Path, *,
                         extra_flags: Sequence[str] = ()) -> None:
    """Compile ``wrapper_source`` (which does ``#include "kernel.cu"``) into ``out_path``.

    ``cuda_source`` is written next to the wrapper as ``kernel.cu``.  The library appears at
    ``out_path`` atomically (built beside it, then ``os.replace``d), so a concurrent reader
    never sees a half-written file.  Compiler warnings are passed on as Python warnings; a
    failed compile raises `CompileError`, located at the `.tsr` lines of the emitted code the
    compiler rejected (see `tessera.runtime.host.diagnostics`).  The first build of a process
    takes the compiler `prefetch_engine` started (`tessera.runtime.host.unit`).
    """
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    cxx = find_cxx()
    unit = None if extra_flags else host_unit.take(cxx)
    if unit is not None:
        try:
            (unit.folder / "kernel.cu").write_text(cuda_source)
            proc = unit.finish(wrapper_source)
            if proc is not None and proc.returncode == 0:  # else compiled anew below, which reports it
                _warn_output(proc)
                _link_library(cxx, unit.folder, out_path)
                return
        finally:
            unit.discard()
    with tempfile.TemporaryDirectory(prefix="tessera-host-") as tmp:
        tmpdir = Path(tmp)
        stubs = stub_headers(tmpdir / "stubs")
        (tmpdir / "kernel.cu").write_text(cuda_source)
        wrapper = tmpdir / "wrapper.cpp"
        wrapper.write_text(wrapper_source)
        proc = _run(kernel_command(cxx, wrapper, tmpdir / "kernel.o", stubs, extra_flags), tmpdir)
        if proc.returncode != 0:
            raise compile_failure(proc.stdout + proc.stderr, cuda_source)
        _warn_output(proc)
        _link_library(cxx, tmpdir, out_path)


# Compiler wrappers that run the compiler twice (a preprocessing pass first): no early unit for them.
_WRAPPERS = ("ccache", "sccache", "distcc")


def start_unit(cxx: Sequence[str]) -> None:
    """Start the kernel unit's compiler for the process's first build (`tessera.runtime.host.unit`)."""
    if os.path.basename(cxx[0]) in _WRAPPERS:
        return
    host_unit.start(cxx, lambda folder, main: kernel_command(
        cxx, main, folder / "kernel.o", stub_headers(folder / "stubs"), ("-iquote", str(folder))))


def _link_library(cxx: Sequence[str], tmpdir: Path, out_path: Path) -> None:
    """Link ``tmpdir/kernel.o`` (with its ``kernel.su``), the engine and the stack bound into `out_path`."""
    engine = tmpdir / "engine.o"  # after the kernel unit: prefetch_engine may be building it meanwhile
    engine.write_bytes(engine_object(cxx))
    frames = tmpdir / "frames.s"
    frames.write_text(frames_asm(frame_bytes((tmpdir / "kernel.su").read_text())))
    # Same directory as the destination, so os.replace never crosses filesystems.
    fd, partial_name = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".partial", dir=out_path.parent)
    os.close(fd)
    partial = Path(partial_name)
    try:
        flags = linker(cxx)[0]
        if GOLD[0] in flags:
            (tmpdir / "exports.map").write_text(GOLD_EXPORTS)
            flags += (f"-Wl,--version-script={tmpdir / 'exports.map'}",)
        proc = _link(cxx, flags, [str(tmpdir / "kernel.o"), str(engine), str(frames)], partial, tmpdir)
        if proc.returncode != 0:
            raise CompileError([], text="linking the CPU kernel library failed:\n"
                               + (proc.stdout + proc.stderr).strip())
        _warn_output(proc)
        os.replace(partial, out_path)
    finally:
        partial.unlink(missing_ok=True)


_FULL_LINK_ONLY: set[tuple[str, ...]] = set()  # compilers whose lean link failed where the full one did not


def _link(cxx: Sequence[str], flags: Sequence[str], objects: list[str], output: Path,
          cwd: Path) -> subprocess.CompletedProcess[str]:
    """Link `objects` into the shared library `output`: the lean link (LEAN_LINK) first, else with
    the compiler's default libraries, as a platform whose C libraries are named otherwise (or a
    compiler without -nodefaultlibs) needs; a compiler for which only the latter worked is not
    given the lean link again in this process."""
    if tuple(cxx) not in _FULL_LINK_ONLY:
        # Not -pthread (clang warns that it is unused with -nodefaultlibs): -lpthread is in LEAN_LIBS.
        lean = [f for f in flags if f != "-pthread"]
        proc = _run([*cxx, *lean, *LEAN_LINK, *objects, *LEAN_LIBS, "-o", str(output)], cwd)
        if proc.returncode == 0:
            return proc
    proc = _run([*cxx, *flags, *objects, "-o", str(output)], cwd)
    if proc.returncode == 0:
        _FULL_LINK_ONLY.add(tuple(cxx))
    return proc
