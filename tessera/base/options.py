"""The compile options: one frozen object that is both a compile's input and its cache key.

`CompileOptions` holds everything besides the source, the `-D` values and the const parameter
values that shapes the C a compile emits: the target architecture, the debugging aids, the
aliasing promise, which alignment variants to emit, whether the C is the CPU backend's (region
mode) and whether shared arrays may share memory. The Python API builds it through `checked`,
which refuses a bad value with a TesseraError that names the option (`tesserac` gets values its
argument parser checked already); the compiler reads it (transpile/driver.py, the passes through
their context, the printers); the variant cache keys it with `key()`. Adding an option is adding a field here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tessera.base.errors import TesseraError
from tessera.base.irnode import ir_node

# The architectures a user may ask for (`--arch`, `arch=`); one table for both. An NVRTC older than
# an architecture (sm_100 needs CUDA 12.8) compiles PTX for the newest it knows instead. `sm_90a` is
# Hopper with its architecture-specific features (spec section 16: the tensor memory accelerator for
# `tcopy_async`); its code runs on sm_90 GPUs only. The default stays `sm_90`.
ARCHS = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a", "sm_100")
# Which alignment variants of the kernels that have them to emit: the one for any alignment, the
# one for 16-byte-aligned arrays, or both (tesserac's default; a launch compiles the one it needs).
ALIGNMENTS = ("generic", "aligned", "both")


@ir_node
class CompileOptions:
    arch: str = "sm_90"
    debug: bool = False         # tassert checks compiled in
    line_info: bool = False     # #line directives naming the .tsr file
    check_bounds: bool = False  # every access checked, signed overflow reported (CPU backend)
    restrict: bool = True       # tensor parameters are __restrict__ (a launch refuses overlapping arrays)
    alignment: str = "both"     # one of ALIGNMENTS
    cpu_regions: bool = False   # the CPU backend's C: kernels that allow it in region mode (transpile/cpu)
    shared_reuse: bool = True   # shared arrays whose lifetimes a barrier separates share memory

    @staticmethod
    def checked(**given: Any) -> CompileOptions:
        """Options from keyword values, each checked: a TesseraError names the first bad one."""
        fields = {f.name: f for f in dataclasses.fields(CompileOptions)}
        for name, value in given.items():
            if name not in fields:
                raise TesseraError(f"unknown compile option {name!r}")
            if name == "arch":
                check_arch(value)
            elif name == "alignment":
                if value not in ALIGNMENTS:
                    raise TesseraError(f"alignment= must be one of {', '.join(ALIGNMENTS)}, not {_shown(value)}")
            else:
                check_flag(name, value)
        return CompileOptions(**given)

    def replace(self, **changes: Any) -> CompileOptions:
        return dataclasses.replace(self, **changes)

    def key(self) -> str:
        """The options as text for cache keys: every field, in declaration order."""
        return ";".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))


DEFAULT_OPTIONS = CompileOptions()


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
