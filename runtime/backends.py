"""The backends a module can run on, in one table: what the Python API and a compiled variant need
of each (tessera/api.py, tessera/variant.py), so that neither names a backend's modules itself.

A backend lives in its own folder under runtime/ (cuda/, host/), whose `backend.py` defines a
`Backend`; `backend(name)` finds it. Adding a backend is writing runtime/<name>/backend.py and
adding its name to `NAMES` and `backend`; `AUTO` says which `backend="auto"` prefers.
"""

from __future__ import annotations

from typing import Any, Protocol

from tessera.base.kernel_info import KernelInfo

NAMES = ("cpu", "cuda")
AUTO = ("cuda", "cpu")  # what backend="auto" takes: the first that is available


class Library(Protocol):
    """A loaded kernel library: it launches a kernel with checked, bound arguments."""

    def launch(self, info: KernelInfo, bound: Any, *, stream: Any = None, check_bounds: bool = False,
               timeout: float | None = None) -> None: ...

    def benchmark(self, info: KernelInfo, bound: Any, *, repeat: int = 20, warmup: int = 3,
                  stream: Any = None) -> float: ...

    def direct(self, info: KernelInfo, nargs: int, check_bounds: bool) -> Any:
        """The direct launcher of `info` for `nargs` positional arguments: `launcher(args, grid,
        stream)` launches and returns True, or returns False having done nothing (the arguments
        need the usual way: runtime/direct_args.py); None where the kernel has none."""
        ...


class Backend(Protocol):
    name: str
    warmup: int            # untimed launches before `Kernel.benchmark` times any
    device_arrays: bool    # takes device arrays; NumPy arrays go to fresh (16-byte aligned) allocations,
    #                        but those in unified memory (runtime/managed.py), used in place

    def status(self) -> tuple[bool, str]:
        """Whether it can run here, and why (or why not), in words."""
        ...

    def arch(self) -> str | None:
        """The architecture to compile for when none is given (None: the compiler's default)."""
        ...

    def region_mode(self) -> bool:
        """Whether its C is the CPU backend's, with kernels in region mode where they allow it."""
        ...

    def prefetch(self) -> None:
        """Start what a first build will need, while the compiler transpiles."""
        ...

    def cached(self, key: str) -> Any | None:
        """The artifact of the library with this key from the cache (what `load` takes), or None."""
        ...

    def build(self, cuda: str, kernels: tuple[KernelInfo, ...], arch: str,
              fibers: Any) -> tuple[str, Any, tuple[KernelInfo, ...]]:
        """Compile a library from the emitted C: (its key, its artifact, the kernels as built).
        `fibers`, where given, gives the C and kernels with every kernel in fiber mode."""
        ...

    def load(self, key: str, kernels: tuple[KernelInfo, ...], artifact: Any) -> Library | None:
        """The library with this key, loaded (from `artifact`, else the cache); None if it is gone."""
        ...

    def managed_buffer(self, nbytes: int) -> Any:
        """`nbytes` of memory that the host and the kernels share (recorded by runtime/managed.py),
        as a uint8 NumPy array that owns it."""
        ...

    def prefetch_memory(self, start: int, nbytes: int, to_gpu: bool, stream: Any) -> None:
        """Move a range of that memory towards the device (or the host), queued on `stream`."""
        ...

    def advise_memory(self, start: int, nbytes: int, hint: str) -> None:
        """Advise where a range of that memory should live (runtime/managed.py `HINTS`)."""
        ...


def backend(name: str) -> Backend:
    """The backend called `name` (one of NAMES)."""
    if name == "cpu":
        from tessera.runtime.host.backend import BACKEND as cpu

        return cpu
    if name == "cuda":
        from tessera.runtime.cuda.backend import BACKEND as cuda

        return cuda
    raise KeyError(name)


__all__ = ["AUTO", "NAMES", "Backend", "Library", "backend"]
