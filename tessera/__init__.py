"""Tessera: a compiler from the .tsr kernel language to readable CUDA C."""

from tessera.errors import CompileError, LaunchError, TesseraError

__version__ = "0.1.0"
__all__ = ["CompileError", "LaunchError", "TesseraError", "__version__"]
