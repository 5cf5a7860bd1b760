"""The recipe of the CPU backend's engine object and precompiled prelude, shared by the install
step and the runtime.

The engine (``host/engine.cpp``: fibers, worker threads, signal handling) is compiled once per
compiler. ``setup.py``'s ``build_engine`` command compiles it when the package is installed, into
``host/prebuilt/`` (`prebuilt_files`), and precompiles the prelude there (`prelude_files`), so that
a first launch compiles only the user's kernel; `tessera.runtime.host.build` uses each when its key
matches and builds without it otherwise. Both sides take the flags, the compiler, its identity, the key and the command from
here. Standard library only: ``setup.py`` loads this file by its path, in a build environment
that has neither Tessera nor its dependencies.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

# The engine at -Og: a first launch with an empty cache waits for its compile when it is not
# prebuilt (0.29 s here against 0.59 s at -O2), and what runs per barrier or shuffle is inline code
# of the kernel unit (host_sync.h), so kernel times and launch overheads measured the same at both levels.
ENGINE_FLAGS: tuple[str, ...] = (
    "-std=c++17", "-Og", "-fPIC", "-pthread", "-fvisibility=hidden", "-fno-exceptions", "-DTESSERA_HOST",
)
# The kernel translation unit.  -fno-strict-aliasing: emitted CUDA C may type-pun through
# pointers (float4 loads, __half storage) as nvcc/NVRTC allow.  -fstack-clash-protection: no
# frame steps over the guard page below a fiber's stack.  -ffp-contract=off: `a * b + c` rounds
# twice, as NumPy computes it, on hosts whose compiler would fuse it (GCC on aarch64 does).
# -frounding-math: GCC (12 at least) folds `0.0 - (double)i` to `-(double)i`, which is -0.0 for
# i == 0 where the GPU computes 0.0; assuming no rounding mode, it folds no such expression.
KERNEL_FLAGS: tuple[str, ...] = (
    "-std=c++17", "-O2", "-fPIC", "-fno-strict-aliasing", "-fvisibility=hidden", "-fstack-clash-protection",
    "-ffp-contract=off", "-frounding-math", "-fno-exceptions", "-DTESSERA_HOST",
)
CANDIDATES = ("c++", "g++", "clang++")
PREBUILT = "prebuilt"  # the folder of the prebuilt engine and prelude, inside the host folder
_COMPILE_TIMEOUT = 600  # seconds an install waits for the engine's compile


class NoCompiler(LookupError):
    """No C++ compiler: the message says where it was looked for."""


def find_cxx() -> list[str]:
    """The C++ compiler command: ``$CXX`` (split like a shell would), else c++, g++ or clang++ on PATH."""
    env = os.environ.get("CXX", "").strip()
    if env:
        cmd = shlex.split(env)
        if not shutil.which(cmd[0]):
            raise NoCompiler(f"the C++ compiler named by $CXX ({env!r}) was not found")
        return cmd
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return [path]
    raise NoCompiler(
        "no C++ compiler found for the CPU backend (tried $CXX, " + ", ".join(CANDIDATES) + " on PATH); "
        "install g++ or clang++, or set CXX"
    )


@functools.lru_cache(maxsize=8)
def _identity(cxx: tuple[str, ...]) -> str:
    try:
        out = subprocess.run([*cxx, "--version"], capture_output=True, text=True, check=False).stdout
    except OSError:
        out = ""
    return " ".join(cxx) + "\n" + out


def compiler_identity(cxx: Sequence[str]) -> str:
    """The command and its ``--version`` output: part of every cache key of built code."""
    return _identity(tuple(cxx))


def cache_key(*parts: str | bytes) -> str:
    """sha256 hex over the length-prefixed parts, so ``("ab", "c") != ("a", "bc")``."""
    h = hashlib.sha256(b"tessera-cache-key\0")
    for part in parts:
        if isinstance(part, str):
            part = part.encode("utf-8")
        elif not isinstance(part, bytes):
            raise TypeError(f"cache_key parts must be str or bytes, not {type(part).__name__}")
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def host_sources(host: Path) -> list[Path]:
    """Every file of the prelude and the engine in the host folder `host` (their text is part of
    the cache keys)."""
    return sorted(p for p in host.iterdir() if p.suffix in (".h", ".cpp"))


def engine_key(cxx: Sequence[str], host: Path) -> str:
    """The key of the engine built by `cxx` from the host folder `host`: the machine type (a wheel
    built with the engine may be installed on another), the compiler's identity, the flags and
    every host source's name and text."""
    return _key("cpu-engine", cxx, ENGINE_FLAGS, host)


def prelude_key(cxx: Sequence[str], host: Path) -> str:
    """The key of the prelude (tessera_host.h) precompiled by `cxx` for the kernel unit's flags."""
    return _key("cpu-prelude", cxx, KERNEL_FLAGS, host)


def _key(what: str, cxx: Sequence[str], flags: Sequence[str], host: Path) -> str:
    return cache_key(what, f"{sys.platform} {platform.machine()}", compiler_identity(cxx), " ".join(flags),
                     *(p.name + "\n" + p.read_text(encoding="utf-8") for p in host_sources(host)))


def engine_command(cxx: Sequence[str], host: Path, output: Path) -> list[str]:
    """The compiler command that builds the engine of the host folder `host` into `output`."""
    return [*cxx, *ENGINE_FLAGS, "-I", str(host), "-c", str(host / "engine.cpp"), "-o", str(output)]


def prebuilt_files(folder: Path, key: str) -> tuple[Path, Path]:
    """The prebuilt engine object of `key` in `folder`, and the file that records its sha256."""
    return folder / f"engine-{key}.o", folder / f"engine-{key}.o.sha256"


def read_prebuilt(folder: Path, key: str) -> bytes | None:
    """The bytes of the prebuilt engine of `key` in `folder`, or None when it is absent, unreadable
    or does not match its recorded sha256."""
    return _checked(*prebuilt_files(folder, key))


def _checked(path: Path, checksum: Path) -> bytes | None:
    """The bytes of `path` when `checksum` records their sha256, else None (absent, unreadable,
    damaged)."""
    try:
        data = path.read_bytes()
        recorded = checksum.read_bytes()
    except OSError:
        return None
    return data if recorded.strip() == _sha256(data) else None


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).hexdigest().encode()


def _write(path: Path, data: bytes) -> None:
    """`data` into `path` atomically (a temp file beside it, then os.replace), readable by all."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_prebuilt(folder: Path, key: str, data: bytes) -> Path:
    """`data` as the prebuilt engine of `key` in `folder` (created if needed), with its checksum;
    every other engine object and checksum there is removed. Returns the object's path."""
    path, checksum = prebuilt_files(folder, key)
    _store(folder, "engine-*", {path: data, checksum: _sha256(data) + b"\n"})
    return path


def _store(folder: Path, pattern: str, files: dict[Path, bytes]) -> None:
    """`files` written into `folder` (created if needed), and every other file there that matches
    `pattern` (an older version's) removed."""
    folder.mkdir(parents=True, exist_ok=True)
    for path, data in files.items():
        _write(path, data)
    for old in folder.glob(pattern):
        if old not in files:
            old.unlink()


class _CompileFailed(Exception):
    """The install step's compile failed: the message says how."""


def _compile(cmd: list[str], cwd: str, output: Path) -> bytes:
    """Run the compile `cmd` in `cwd` and return `output`'s bytes; _CompileFailed if it fails."""
    proc = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False,
                          timeout=_COMPILE_TIMEOUT)
    if proc.returncode != 0:
        raise _CompileFailed(f"{cmd[0]} exited with {proc.returncode}: {_first_line(proc.stdout + proc.stderr)}")
    return output.read_bytes()


def install_engine(host: Path, dest: Path) -> str:
    """Compile the engine of the host folder `host` into the prebuilt folder `dest` (the install
    step). Never raises for want of a compiler, a failed compile or an unwritable folder: returns
    one line that says what was done, or why not (the engine is then built on first use)."""
    host = host.resolve()  # the compiler runs in a temporary folder
    try:
        cxx = find_cxx()
        key = engine_key(cxx, host)
        with tempfile.TemporaryDirectory(prefix="tessera-engine-") as tmp:
            output = Path(tmp) / "engine.o"
            path = write_prebuilt(dest, key, _compile(engine_command(cxx, host, output), tmp, output))
    # ValueError: a $CXX that shlex cannot split, or a host source that is not UTF-8.
    except (NoCompiler, _CompileFailed, OSError, ValueError, subprocess.SubprocessError) as exc:
        return _not_prebuilt(str(exc))
    return f"tessera: prebuilt the CPU engine with {' '.join(cxx)}: {path}"


# The precompiled prelude: the kernel unit force-includes `prelude-<key>.hpp` of the prebuilt folder,
# which includes ../tessera_host.h, and GCC reads `prelude-<key>.hpp.gch` beside it instead (GCC
# checks itself that the flags and macros it was made with fit, and reads the header otherwise):
# 20-28 ms less per kernel unit here (0.051 s instead of 0.073 s), on a first load's critical path.
_PRELUDE_STUB = '#include "../tessera_host.h"  // precompiled beside this file (tessera.runtime.host.recipe)\n'


def prelude_files(folder: Path, key: str) -> tuple[Path, Path, Path]:
    """The prelude header of `key` in `folder`, its precompiled form, and its recorded sha256."""
    stub = folder / f"prelude-{key}.hpp"  # not .h: the fingerprint hashes .h files
    return stub, folder / f"{stub.name}.gch", folder / f"{stub.name}.gch.sha256"


def prebuilt_prelude(folder: Path, key: str) -> Path | None:
    """The header of the precompiled prelude of `key` in `folder` to force-include, or None when it
    is absent, unreadable or does not match its recorded sha256."""
    stub, gch, checksum = prelude_files(folder, key)
    try:
        intact = stub.read_text(encoding="utf-8") == _PRELUDE_STUB and _checked(gch, checksum) is not None
    except (OSError, ValueError):
        return None
    return stub if intact else None


def install_prelude(host: Path, dest: Path) -> str:
    """Precompile the prelude of the host folder `host` into the prebuilt folder `dest` (the install
    step); like `install_engine`, returns one line and never raises for want of a compiler."""
    host = host.resolve()
    try:
        cxx = find_cxx()
        key = prelude_key(cxx, host)
        header = host / "tessera_host.h"
        if any(c in str(header) for c in '"\\\n'):
            return _not_prebuilt(f"a path GCC cannot #include: {str(header)!r}", "prelude")
        with tempfile.TemporaryDirectory(prefix="tessera-prelude-") as tmp:
            # Made from a header that includes the prelude by its path here; what GCC reads is
            # then the .gch beside the installed header, whatever the path of the file it came from.
            built = Path(tmp) / "prelude.h"
            built.write_text(f'#include "{header}"\n', encoding="utf-8")
            output = Path(tmp) / "prelude.h.gch"
            data = _compile([*cxx, *KERNEL_FLAGS, "-x", "c++-header", str(built), "-o", str(output)], tmp, output)
        stub, gch, checksum = prelude_files(dest, key)
        _store(dest, "prelude-*", {gch: data, checksum: _sha256(data) + b"\n", stub: _PRELUDE_STUB.encode()})
    except (NoCompiler, _CompileFailed, OSError, ValueError, subprocess.SubprocessError) as exc:
        return _not_prebuilt(str(exc), "prelude")
    return f"tessera: precompiled the CPU prelude with {' '.join(cxx)}: {gch}"


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "no output")


def _not_prebuilt(why: str, what: str = "engine") -> str:
    if what == "engine":
        return f"tessera: the CPU engine was not prebuilt ({why}); it is compiled on first use instead"
    return f"tessera: the CPU prelude was not precompiled ({why}); kernels compile it with them instead"
