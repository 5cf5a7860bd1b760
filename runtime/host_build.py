"""Build and run CPU-backend kernel libraries.

The CPU backend compiles the CUDA C that Tessera emits for NVRTC with the host
prelude ``host/tessera_host.h`` force-included, together with a small C++
wrapper per kernel that unpacks a ``void*[]`` of arguments and calls
``tsr::launch``.  This module finds a C++ compiler, builds such a shared
library atomically, loads it, and launches a wrapper symbol through ctypes.
"""

from __future__ import annotations

import importlib.resources
import os
import shlex
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

from tessera.errors import CompileError, TesseraError

# Flags every kernel library is built with.  -fno-strict-aliasing: emitted
# CUDA C may type-pun through pointers (float4 loads, __half storage) as
# nvcc/NVRTC allow.
BASE_FLAGS: tuple[str, ...] = (
    "-std=c++17",
    "-O2",
    "-fPIC",
    "-shared",
    "-pthread",
    "-fno-strict-aliasing",
    "-DTESSERA_HOST",
)

# CUDA headers that emitted code may include; everything they declare that the
# backend supports is in the prelude, so empty stand-ins satisfy the #include.
STUB_HEADERS: tuple[str, ...] = (
    "cuda_fp16.h",
    "cuda_bf16.h",
    "cuda_runtime.h",
    "cuda_pipeline_primitives.h",
    "device_launch_parameters.h",
)

_CANDIDATES = ("c++", "g++", "clang++")


def find_cxx() -> list[str]:
    """The C++ compiler command: ``$CXX`` (split like a shell would), else c++, g++ or clang++ on PATH."""
    env = os.environ.get("CXX", "").strip()
    if env:
        cmd = shlex.split(env)
        if not shutil.which(cmd[0]):
            raise TesseraError(f"the C++ compiler named by $CXX ({env!r}) was not found")
        return cmd
    for name in _CANDIDATES:
        path = shutil.which(name)
        if path:
            return [path]
    raise TesseraError(
        "no C++ compiler found for the CPU backend (tried $CXX, " + ", ".join(_CANDIDATES) + " on PATH); "
        "install g++ or clang++, or set CXX"
    )


def host_header_path() -> Path:
    """Path of the host prelude header shipped in the ``tessera.runtime`` package."""
    res = importlib.resources.files("tessera.runtime").joinpath("host", "tessera_host.h")
    path = Path(str(res))
    if not path.is_file():
        raise TesseraError(f"the CPU backend's prelude is missing: {path}")
    return path


def compile_command(cxx: Sequence[str], source: Path, output: Path, include_dir: Path,
                    extra_flags: Sequence[str] = ()) -> list[str]:
    """The full compiler command line for one kernel library."""
    return [
        *cxx,
        *BASE_FLAGS,
        "-I", str(include_dir),
        "-include", str(host_header_path()),
        *extra_flags,
        "-o", str(output),
        str(source),
    ]


def build_shared_library(cuda_source: str, wrapper_source: str, out_path: Path, *,
                         extra_flags: Sequence[str] = ()) -> None:
    """Compile ``wrapper_source`` (which does ``#include "kernel.cu"``) into ``out_path``.

    ``cuda_source`` is written next to the wrapper as ``kernel.cu``.  The library
    appears at ``out_path`` atomically (built beside it, then ``os.replace``d), so a
    concurrent reader never sees a half-written file.  Compiler warnings are passed
    on as Python warnings; a failed compile raises ``CompileError`` with the
    compiler's output.
    """
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    cxx = find_cxx()
    with tempfile.TemporaryDirectory(prefix="tessera-host-") as tmp:
        tmpdir = Path(tmp)
        stubs = tmpdir / "stubs"
        stubs.mkdir()
        for name in STUB_HEADERS:
            (stubs / name).write_text(f"// {name}: provided by tessera_host.h on the CPU backend\n")
        (tmpdir / "kernel.cu").write_text(cuda_source)
        wrapper = tmpdir / "wrapper.cpp"
        wrapper.write_text(wrapper_source)
        # Same directory as the destination, so os.replace never crosses filesystems.
        fd, partial_name = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".partial", dir=out_path.parent)
        os.close(fd)
        partial = Path(partial_name)
        try:
            cmd = compile_command(cxx, wrapper, partial, stubs, extra_flags)
            try:
                proc = subprocess.run(cmd, cwd=tmpdir, capture_output=True, text=True, check=False)
            except OSError as exc:
                raise TesseraError(f"cannot run the C++ compiler {cxx[0]!r}: {exc}") from exc
            output = (proc.stdout + proc.stderr).strip()
            if proc.returncode != 0:
                raise CompileError(
                    [], text=f"host C++ compilation failed ({shlex.join(cmd)}):\n{output}"
                )
            if output:
                warnings.warn(f"host C++ compiler output:\n{output}", stacklevel=2)
            os.replace(partial, out_path)
        finally:
            partial.unlink(missing_ok=True)
