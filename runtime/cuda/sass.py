"""SASS inspection: disassemble a cubin with nvdisasm, list its instruction mnemonics, find loops.

Used by tests (and curious users) to check what the generated code really became,
e.g. that a ``cp.async`` turned into ``LDGSTS`` or a ``float4`` load into ``LDG.E.128``, and by
``bench/vs_handwritten.py`` to measure a kernel's main loop.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from tessera.base.errors import TesseraError

__all__ = ["Loop", "disassemble", "find_nvdisasm", "function_sass", "instructions", "loops", "main_loop"]

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


# `        .section        .text.matmul,"ax",@progbits` -> matmul
_SECTION_RE = re.compile(r"^\s*\.section\s+(\S+?),")
_LABEL_RE = re.compile(r"^(\.L\w+):")
_TARGET_RE = re.compile(r"`\((\.L\w+)\)")


def function_sass(sass_text: str, name: str) -> str:
    """The part of a disassembly that holds function `name` (its ``.text.NAME`` section)."""
    out: list[str] = []
    inside = False
    for line in sass_text.splitlines():
        if m := _SECTION_RE.match(line):
            inside = m.group(1) == f".text.{name}"
        elif inside:
            out.append(line)
    if not out:
        raise KeyError(f"no function {name!r} in the disassembly")
    return "\n".join(out)


@dataclass(frozen=True)
class Loop:
    """A loop in SASS: the instructions from a label through the last backward branch to it."""

    label: str
    ops: tuple[str, ...]  # mnemonics with modifiers, in program order

    def count(self, opcode: str) -> int:
        """How many of the loop's instructions are `opcode` (``FFMA`` counts ``FFMA.FTZ`` too)."""
        return sum(1 for op in self.ops if op.split(".")[0] == opcode)


def loops(sass_text: str) -> list[Loop]:
    """Every loop of one function's SASS (see `function_sass`), in the order of their labels.

    A loop is a label that a later branch jumps back to; it spans the label through the last such
    branch, so loops nest or are disjoint as in the source.
    """
    ops: list[str] = []
    label_at: dict[str, int] = {}  # label -> index of the instruction it marks
    loop_end: dict[str, int] = {}  # label -> index of the last backward branch to it
    for line in sass_text.splitlines():
        if m := _LABEL_RE.match(line.strip()):
            label_at[m.group(1)] = len(ops)
        elif m := _INSN_RE.match(line):
            ops.append(m.group(1))
            target = _TARGET_RE.search(line)
            if m.group(1).startswith("BRA") and target and target.group(1) in label_at:
                loop_end[target.group(1)] = len(ops) - 1
    return [Loop(label, tuple(ops[label_at[label]:end + 1]))
            for label, end in sorted(loop_end.items(), key=lambda item: label_at[item[0]])]


def main_loop(sass_text: str, opcode: str = "FFMA") -> Loop:
    """The main loop of one function's SASS: of the loops holding the most `opcode` instructions,
    the shortest. That is the innermost loop holding all the arithmetic (a GEMM's k-loop, not a
    loop around it); where a kernel has several copies of that loop, specialized by a uniform
    branch (a fast path for aligned data and a general one), it is the fast path's.
    Raises TesseraError when no loop holds `opcode`.
    """
    candidates = [loop for loop in loops(sass_text) if loop.count(opcode)]
    if not candidates:
        raise TesseraError(f"no loop holds a {opcode} instruction")
    return max(candidates, key=lambda loop: (loop.count(opcode), -len(loop.ops)))
