"""Tessera: a compiler from the .tsr kernel language to readable CUDA C, with CPU and CUDA runtimes.

`tessera.load(path)` / `tessera.compile(text)` give a module whose attributes are kernels.
Imports are lazy so that a warm start stays cheap.
"""

from tessera.base.errors import CompileError, LaunchError, TesseraError
from tessera.base.version import VERSION as __version__

__all__ = ["CompileError", "LaunchError", "TesseraError", "__version__", "compile", "load"]


def load(path, backend: str = "auto", **options):
    """Load a .tsr file; see `tessera.api.load`."""
    from tessera.api import load as _load

    return _load(path, backend, **options)


def compile(source: str, backend: str = "auto", **options):  # noqa: A001 - the spec's name
    """Compile .tsr source text; see `tessera.api.compile`."""
    from tessera.api import compile as _compile

    return _compile(source, backend, **options)
