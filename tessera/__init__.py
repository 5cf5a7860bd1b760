"""Tessera: a compiler from the .tsr kernel language to readable CUDA C, with CPU and CUDA runtimes.

`tessera.load(path)` / `tessera.compile(text)` give a module whose attributes are kernels;
`tessera.managed_empty`, `managed_zeros`, `prefetch` and `advise` are unified memory
(tessera/memory.py). Imports are lazy so that a warm start stays cheap.
"""

from tessera.base.errors import CompileError, LaunchError, TesseraError
from tessera.base.version import VERSION as __version__

__all__ = ["CompileError", "LaunchError", "TesseraError", "__version__", "advise", "compile", "load", "managed_empty",
           "managed_zeros", "prefetch"]


def load(path, backend: str = "auto", **options):
    """Load a .tsr file; see `tessera.api.load`."""
    from tessera.api import load as _load

    return _load(path, backend, **options)


def compile(source: str, backend: str = "auto", **options):  # noqa: A001 - the spec's name
    """Compile .tsr source text; see `tessera.api.compile`."""
    from tessera.api import compile as _compile

    return _compile(source, backend, **options)


def managed_empty(shape, dtype, *, backend: str = "auto"):
    """An uninitialized array in unified memory; see `tessera.memory.managed_empty`."""
    from tessera.memory import managed_empty as _managed_empty

    return _managed_empty(shape, dtype, backend=backend)


def managed_zeros(shape, dtype, *, backend: str = "auto"):
    """A zeroed array in unified memory; see `tessera.memory.managed_zeros`."""
    from tessera.memory import managed_zeros as _managed_zeros

    return _managed_zeros(shape, dtype, backend=backend)


def prefetch(array, device: str = "gpu", stream=None) -> None:
    """Migrate a managed array to the GPU or the host; see `tessera.memory.prefetch`."""
    from tessera.memory import prefetch as _prefetch

    _prefetch(array, device, stream)


def advise(array, hint: str) -> None:
    """Advise where a managed array should live; see `tessera.memory.advise`."""
    from tessera.memory import advise as _advise

    _advise(array, hint)
