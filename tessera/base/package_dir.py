"""The folder of one of Tessera's packages, for the files shipped in it (the grammar, the
templates, the CPU backend's C++ sources).

Found from the package's `__path__`, not with `importlib.resources.files`, which imports
importlib's resource readers and `zipfile` (2-4 ms of a cold `tessera.load`) for packages that
live inside zip archives: Tessera never does (the CPU backend gives the C++ compiler its host
sources by path). `__path__` is right for a normal install and for an editable one, whose import
hook maps each subpackage to its own source folder (pyproject.toml's `package-dir`).
"""

from __future__ import annotations

import importlib
from pathlib import Path


def package_dir(name: str) -> Path:
    """The folder of the (regular) package `name`, imported if it is not yet."""
    return Path(importlib.import_module(name).__path__[0])
