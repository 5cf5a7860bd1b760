"""NVRTC: compiling generated CUDA C to PTX and cubin, with no GPU and no nvcc.

This module owns every call into NVRTC (through ``cuda.bindings.nvrtc``): the
option list, the location of the CUDA headers (``cuda_fp16.h`` and friends,
shipped by the ``nvidia-cuda-runtime`` wheel), the fallback to PTX when the
requested GPU is newer than this NVRTC, and the parsing of the ``ptxas -v``
report into per-kernel resource counts. Every NVRTC status is checked; a
failure becomes a `CompileError` (the source did not compile; its text holds
the NVRTC log and the numbered CUDA source) or a `TesseraError` (anything
else). The NVRTC program is destroyed on every path.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tessera.base.errors import CompileError, TesseraError

__all__ = [
    "KernelResources",
    "NvrtcResult",
    "compile_cuda",
    "cuda_include_dirs",
    "bindings_version",
    "nvrtc_version",
    "supported_archs",
]

_ARCH_RE = re.compile(r"sm_(\d{2,3})(a?)")
# NVRTC, its headers and the bindings come with one of the package's CUDA extras (pyproject.toml).
INSTALL_HINT = ('pip install "tessera-tsr[cu12]" for a CUDA 12 driver, "tessera-tsr[cu13]" for CUDA 13, '
                "or put the CUDA toolkit's NVRTC where cuda-bindings finds it")


def _nvrtc() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise TesseraError(f"NVRTC is unavailable: cannot import cuda.bindings.nvrtc ({e}); {INSTALL_HINT}") from None
    return nvrtc


def _error_string(status: Any) -> str:
    try:
        err, text = _nvrtc().nvrtcGetErrorString(status)
    except Exception:  # pragma: no cover - defensive: never mask the original failure
        return str(status)
    if int(err) != 0:  # pragma: no cover
        return str(status)
    return text.decode() if isinstance(text, bytes) else str(text)


def _call(fn: Any, *args: Any) -> tuple[Any, ...]:
    """Call an NVRTC binding, raise `TesseraError` unless it succeeded; return its outputs."""
    try:
        status, *values = fn(*args)
    except RuntimeError as e:  # the bindings found no NVRTC library to load (cuda.pathfinder)
        raise TesseraError(f"NVRTC is unavailable: {str(e).strip()}; {INSTALL_HINT}") from None
    if int(status) != 0:
        raise TesseraError(f"{fn.__name__} failed: {_error_string(status)}")
    return tuple(values)


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library that is loaded."""
    major, minor = _call(_nvrtc().nvrtcVersion)
    return int(major), int(minor)


def bindings_version() -> tuple[int, ...]:
    """The version of the cuda-bindings package in use (12.x or 13.x: either works)."""
    import cuda.bindings

    return tuple(int(x) for x in re.findall(r"\d+", cuda.bindings.__version__)[:3])


@functools.lru_cache(maxsize=1)
def supported_archs() -> tuple[int, ...]:
    """The SM numbers (e.g. 80, 90, 120) this NVRTC can generate code for, ascending."""
    (archs,) = _call(_nvrtc().nvrtcGetSupportedArchs)
    return tuple(sorted(int(a) for a in archs))


@functools.lru_cache(maxsize=1)
def cuda_include_dirs() -> tuple[str, ...]:
    """Folders holding the CUDA headers (``cuda_fp16.h``, ``cuda_bf16.h``) to pass to NVRTC with -I.

    Looks in the ``nvidia`` pip namespace package first (``nvidia/cuda_runtime/include`` for the
    CUDA 12 wheels, ``nvidia/cu<major>/include`` for later layouts), then in $CUDA_HOME / $CUDA_PATH.
    """
    candidates: list[str] = []
    spec = importlib.util.find_spec("nvidia.cuda_runtime")
    if spec is not None and spec.submodule_search_locations:
        candidates += [os.path.join(p, "include") for p in spec.submodule_search_locations]
    nvidia = importlib.util.find_spec("nvidia")
    if nvidia is not None and nvidia.submodule_search_locations:
        major = nvrtc_version()[0]
        for root in nvidia.submodule_search_locations:
            candidates.append(os.path.join(root, "cuda_runtime", "include"))
            candidates.append(os.path.join(root, f"cu{major}", "include"))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "include"))
    found: list[str] = []
    for d in candidates:
        d = os.path.realpath(d)
        if d not in found and os.path.isfile(os.path.join(d, "cuda_fp16.h")):
            found.append(d)
    return tuple(found)


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reported for one entry function (``__global__`` kernel)."""

    name: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int
    shared_bytes: int  # static __shared__ only
    const_bytes: int  # this kernel's cmem[] banks (parameters; ptxas omits it on sm_90+); not __constant__


@dataclass(frozen=True)
class NvrtcResult:
    """The output of one NVRTC compilation.

    `arch` is the target actually compiled for: ``sm_XX`` when `cubin` holds SASS, else
    ``compute_XX`` (PTX only; then `kernels` is empty, as ptxas never ran).
    """

    arch: str
    ptx: str
    cubin: bytes | None
    log: str
    kernels: tuple[KernelResources, ...]

    def kernel(self, name: str) -> KernelResources:
        for k in self.kernels:
            if k.name == name:
                return k
        known = ", ".join(k.name for k in self.kernels) or "none"
        raise KeyError(f"no kernel {name!r} in the ptxas report (kernels: {known})")

    @property
    def warnings(self) -> tuple[str, ...]:
        """Log lines that are warnings: NVRTC front end (``x.cu(3): warning #177-D: ...``),
        ``nvrtc: warning: ...``, ``ptxas warning : ...`` and Tessera's own fallback notice."""
        return tuple(line for line in self.log.splitlines() if _WARNING_RE.match(line))


# Diagnostic lines start at column 0; NVRTC echoes the offending source line indented below them.
_WARNING_RE = re.compile(r"\S[^\n]*?\bwarning\b\s*(?:#[\w-]+)?\s*:")
_ENTRY_RE = re.compile(r"ptxas\b.*?:\s*Compiling entry function '([^']+)'")
_PROPS_RE = re.compile(r"ptxas\b.*?:\s*Function properties for (\S+)")
_FRAME_RE = re.compile(
    r"ptxas\s+\.\s+(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"ptxas\b.*?:\s*Used (\d+) registers(.*)")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_CMEM_RE = re.compile(r"(\d+) bytes cmem\[\d+\]")


def parse_ptxas_report(log: str) -> tuple[KernelResources, ...]:
    """Per-entry-function resources from a ``-Xptxas=-v`` log, in the order ptxas compiled them."""
    frames: dict[str, tuple[int, int, int]] = {}  # name -> (stack, spill stores, spill loads)
    used: dict[str, tuple[int, int, int]] = {}  # entry -> (registers, smem, cmem)
    entries: list[str] = []
    entry: str | None = None
    props: str | None = None
    for line in log.splitlines():
        if m := _ENTRY_RE.match(line):
            entry = props = m.group(1)
            if entry not in entries:
                entries.append(entry)
        elif m := _PROPS_RE.match(line):
            props = m.group(1)
        elif (m := _FRAME_RE.match(line)) and props is not None:
            frames[props] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := _USED_RE.match(line)) and entry is not None:
            rest = m.group(2)
            smem = sum(int(x) for x in _SMEM_RE.findall(rest))
            cmem = sum(int(x) for x in _CMEM_RE.findall(rest))
            used[entry] = (int(m.group(1)), smem, cmem)
    out = []
    for name in entries:
        regs, smem, cmem = used.get(name, (0, 0, 0))
        stack, st, ld = frames.get(name, (0, 0, 0))
        out.append(KernelResources(name, regs, st, ld, stack, smem, cmem))
    return tuple(out)


def _numbered(source: str) -> str:
    lines = source.splitlines()
    width = len(str(len(lines)))
    return "\n".join(f"{i:>{width}} | {text}" for i, text in enumerate(lines, 1))


def _get_log(nv: Any, prog: Any) -> str:
    (size,) = _call(nv.nvrtcGetProgramLogSize, prog)
    buf = b" " * int(size)
    _call(nv.nvrtcGetProgramLog, prog, buf)
    return buf.rstrip(b"\0").decode("utf-8", errors="replace").rstrip()


def _target(arch: str, cubin: bool) -> tuple[str, bool, str | None]:
    """(NVRTC --gpu-architecture value, whether a cubin comes out, fallback notice or None)."""
    m = _ARCH_RE.fullmatch(arch)
    if m is None:
        raise TesseraError(f"bad GPU architecture {arch!r}: expected sm_XX or sm_XXa, e.g. 'sm_90'")
    number, suffix = int(m.group(1)), m.group(2)
    archs = supported_archs()
    newest = max(archs)
    if number > newest:
        major, minor = nvrtc_version()
        note = (f"tessera: warning: NVRTC {major}.{minor} cannot generate code for {arch} "
                f"(newest it knows: sm_{newest}); emitted PTX for compute_{newest} instead, "
                f"to be JIT-compiled by the driver")
        return f"compute_{newest}", False, note
    if number not in archs:
        known = ", ".join(f"sm_{a}" for a in archs)
        raise TesseraError(f"NVRTC {'.'.join(map(str, nvrtc_version()))} does not know {arch}; it knows {known}")
    return (f"sm_{number}{suffix}" if cubin else f"compute_{number}{suffix}"), cubin, None


def compile_cuda(source: str, *, name: str = "tessera.cu", arch: str = "sm_90",
                 options: Sequence[str] = (), cubin: bool = True,
                 line_info: bool = False) -> NvrtcResult:
    """Compile CUDA C `source` with NVRTC for `arch` (``sm_XX`` / ``sm_XXa``).

    With `cubin` the result carries SASS and the ptxas resource report; without it (or when
    `arch` is newer than this NVRTC, which is noted in the log) only PTX for ``compute_XX``.
    Raises `CompileError` when the source does not compile, `TesseraError` on any other failure.
    """
    target, want_cubin, note = _target(arch, cubin)
    opts = [f"--gpu-architecture={target}", "--std=c++17"]
    if want_cubin:
        opts.append("-Xptxas=-v")
    opts += [f"-I{d}" for d in cuda_include_dirs()]
    if line_info:
        opts.append("-lineinfo")
    opts += list(options)

    nv = _nvrtc()
    (prog,) = _call(nv.nvrtcCreateProgram, source.encode(), name.encode(), 0, [], [])
    try:
        encoded = [o.encode() for o in opts]
        (status,) = nv.nvrtcCompileProgram(prog, len(encoded), encoded)
        log = _get_log(nv, prog)
        if int(status) != 0:
            header = (f"NVRTC failed to compile {name} for {target} "
                      f"({_error_string(status)}); options: {' '.join(opts)}")
            text = f"{header}\n{log}\n\n--- CUDA source {name} ---\n{_numbered(source)}"
            if status == nv.nvrtcResult.NVRTC_ERROR_COMPILATION:
                raise CompileError([], text=text)
            raise TesseraError(text)
        (ptx_size,) = _call(nv.nvrtcGetPTXSize, prog)
        ptx_buf = b" " * int(ptx_size)
        _call(nv.nvrtcGetPTX, prog, ptx_buf)
        ptx = ptx_buf.rstrip(b"\0").decode("utf-8", errors="replace")
        binary: bytes | None = None
        if want_cubin:
            (cubin_size,) = _call(nv.nvrtcGetCUBINSize, prog)
            if int(cubin_size) == 0:
                raise TesseraError(f"NVRTC produced no cubin for {name} ({target})\n{log}")
            cubin_buf = b" " * int(cubin_size)
            _call(nv.nvrtcGetCUBIN, prog, cubin_buf)
            binary = bytes(cubin_buf)
    except BaseException:
        nv.nvrtcDestroyProgram(prog)  # status ignored: the error already propagating matters more
        raise
    _call(nv.nvrtcDestroyProgram, prog)

    if note is not None:
        log = f"{note}\n{log}" if log else note
    kernels = parse_ptxas_report(log) if want_cubin else ()
    return NvrtcResult(arch=target, ptx=ptx, cubin=binary, log=log, kernels=kernels)
