"""SASS inspection: disassemble a cubin with nvdisasm and list its instruction mnemonics.

Used by tests (and curious users) to check what the generated code really became,
e.g. that a ``cp.async`` turned into ``LDGSTS`` or a ``float4`` load into ``LDG.E.128``.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile

from tessera.errors import TesseraError

__all__ = ["disassemble", "find_nvdisasm", "instructions"]

_EXE = "nvdisasm.exe" if os.name == "nt" else "nvdisasm"


def find_nvdisasm() -> str | None:
    """Path of an nvdisasm binary: the nvidia pip packages first, then $CUDA_HOME/bin, then PATH."""
    spec = importlib.util.find_spec("nvidia")
    if spec is not None and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            # nvidia/cuda_nvdisasm/bin (CUDA 12 wheels), nvidia/cu13/bin (CUDA 13 wheels), ...
            for path in sorted(glob.glob(os.path.join(root, "*", "bin", _EXE))):
                if os.access(path, os.X_OK):
                    return path
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            path = os.path.join(os.environ[var], "bin", _EXE)
            if os.access(path, os.X_OK):
                return path
    return shutil.which("nvdisasm")


def disassemble(cubin: bytes, *, code_only: bool = True, timeout: float = 60.0) -> str:
    """The SASS text of `cubin` (``nvdisasm -c``: code sections only, unless `code_only` is False)."""
    exe = find_nvdisasm()
    if exe is None:
        raise TesseraError("nvdisasm not found: pip install nvidia-cuda-nvdisasm, or put it on PATH")
    with tempfile.TemporaryDirectory(prefix="tessera-sass-") as tmp:
        with tempfile.NamedTemporaryFile(dir=tmp, suffix=".cubin", delete=False) as f:
            f.write(cubin)
            path = f.name
        cmd = [exe, *(["-c"] if code_only else []), path]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise TesseraError(f"could not run {exe}: {e}") from e
    if proc.returncode != 0:
        raise TesseraError(f"nvdisasm failed (exit {proc.returncode}):\n{proc.stderr.strip()}")
    return proc.stdout


# `/*0070*/   @!P0 LDGSTS.E.BYPASS.128 [R2], [R4.64] ;` -> LDGSTS.E.BYPASS.128
_INSN_RE = re.compile(
    r"^\s*/\*[0-9a-fA-F]+\*/\s+\{?\s*(?:@!?U?P(?:\d+|T)\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def instructions(sass_text: str) -> list[str]:
    """Opcode mnemonics with modifiers (``LDG.E.128``, ``BAR.SYNC.DEFER_BLOCKING``) in program order."""
    out = []
    for line in sass_text.splitlines():
        if m := _INSN_RE.match(line):
            out.append(m.group(1))
    return out
