"""The compile options shared by the command line and the Python API, and their validation.

Options reach the C text (the architecture is named in the header comment) and the cache keys,
so the API checks each one as strictly as `tesserac` does, raising a TesseraError that names it.
"""

from __future__ import annotations

from typing import Any

from tessera.base.errors import TesseraError

# The architectures a user may ask for (`--arch`, `arch=`); one table for both.
ARCHS = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90")


def check_arch(arch: Any) -> str | None:
    """`arch` if it is None (the device's, or sm_90) or one of ARCHS."""
    if arch is not None and (not isinstance(arch, str) or arch not in ARCHS):
        raise TesseraError(f"arch= must be one of {', '.join(ARCHS)} or None, not {_shown(arch)}")
    return arch


def check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TesseraError(f"{name}= must be True or False, not {_shown(value)}")
    return value


def check_text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TesseraError(f"{name} must be a str, not {type(value).__name__}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
