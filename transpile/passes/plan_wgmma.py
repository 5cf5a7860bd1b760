"""Whether a kernel's `tmma` statements become warpgroup MMAs on sm_90a (spec section 16), and the
swizzled layout of the shared arrays they read; part of the plan-fragments pass.

A kernel uses `wgmma.mma_async` when all of these hold, and otherwise keeps `mma.sync` (the same
results; `tesserac --info` says which):
- the target is sm_90a and the group's tile count is a multiple of 128 (whole warpgroups);
- every fragment fits the warpgroup layout (M a multiple of 64 per warpgroup, N of 8);
- every tmma has f16/bf16 operands (A from shared memory, K-major, or from an operand fragment; B
  from shared memory, either way round) or 8-bit ones with `trans_b` (both K-major), K a multiple
  of the instruction's k, N at most 256 or a multiple of 256;
- each shared array a tmma reads has no `pad=`, constant extents, rows of 32, 64 or a multiple of
  128 bytes (lir/swizzle.py `matrix_of`) and a multiple of 8 rows, is read as whole matrices (a
  pipeline stage's, say), and is otherwise only written by whole-matrix `tcopy`/`tcopy_async`
  (which then write it swizzled: emit/stmts.py, or the TMA's swizzled boxes on a pipeline of bulk
  tensor copies, lir/tma.py). Any other access keeps the kernel on mma.sync.

    As = tshared.alloc(f16[128, 64]); Bs = tshared.alloc(f16[64, 128]); acc = tfrag(f32[128, 128])
    -> wgmma: As swizzle=128 (one panel), Bs swizzle=128 (two panels of 64 x 64), no padding
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.frag_buffers import is_column_vector_shape
from tessera.transpile.lir.frag_layout import MMA_KINDS, WGMMA_MAX_N, wgmma_division
from tessera.transpile.lir.swizzle import matrix_of
from tessera.transpile.lir.visit import bodies, statements

WGMMA_ARCH = "sm_90a"
WGMMA_TYPES = ("f16", "bf16", "i8", "u8")


def plan_wgmma(fn: L.Function, arch: str) -> L.Function:
    """`fn` with `wgmma` set and the swizzle modes of the arrays its tmma reads, where it qualifies."""
    modes = wgmma_modes(fn, arch)
    if modes is None:
        return fn
    buffers = tuple(dataclasses.replace(b, swizzle=modes[b.name], pad=0) if b.name in modes else b for b in fn.buffers)
    return dataclasses.replace(fn, wgmma=True, buffers=buffers)


def wgmma_modes(fn: L.Function, arch: str) -> dict[str, int] | None:
    """The swizzle mode of each shared array a qualifying kernel's tmma reads; None if it does not qualify."""
    if arch != WGMMA_ARCH or fn.kind != "kernel" or fn.tile_count % 128:
        return None
    warps = fn.tile_count // 32
    for b in fn.buffers:
        if b.space == "frag" and not is_column_vector_shape(b.shape):  # (a column vector fits any rows)
            dims = [int(d.value) for d in b.shape if isinstance(d, L.Const)]
            if wgmma_division(dims[0], dims[1] if len(dims) == 2 else 8, warps) is None:
                return None
    mmas = [s for s in statements(fn.body) if isinstance(s, L.Mma)]
    if not mmas:
        return None
    modes: dict[str, int] = {}
    for s in mmas:
        found = _operand_modes(fn, s)
        if found is None:
            return None
        modes.update(found)
    for st in statements(fn.body):
        for name, mode in modes.items():
            if _mentions(st, name) and not _allowed(fn, st, name, mode):
                return None
    return modes


def _operand_modes(fn: L.Function, s: L.Mma) -> dict[str, int] | None:
    acc, a, b = fn.buffer(s.acc), fn.buffer(s.a.buf), fn.buffer(s.b.buf)
    assert acc is not None and a is not None and b is not None
    if b.elem.name not in WGMMA_TYPES or b.space != "shared":
        return None
    if b.elem.size == 1 and not s.trans_b:  # 8-bit B must be K-major
        return None
    n = int(acc.shape[1].value) if isinstance(acc.shape[1], L.Const) else 0
    if n > WGMMA_MAX_N and n % WGMMA_MAX_N:
        return None
    k = [x for x in s.a.extents if x is not None][1]
    if k % MMA_KINDS[b.elem.name].k:
        return None
    out: dict[str, int] = {}
    for view, buf in ((s.a, a), (s.b, b)):
        if buf.space == "frag":
            if view is s.b or not buf.elem.is_half:
                return None
            continue
        m = _matrix(buf)
        if m is None or not _whole(view, buf):
            return None
        out[buf.name] = m.mode
    return out


def _matrix(b: L.Buffer):  # noqa: ANN202 (a SwizzledMatrix or None)
    if b.space != "shared" or not b.auto_pad or len(b.shape) < 2 or not all(isinstance(d, L.Const) for d in b.shape):
        return None
    rows, cols = (int(d.value) for d in b.shape[-2:])  # type: ignore[union-attr]
    return matrix_of(rows, cols, b.elem.size)


def _whole(v: L.View, b: L.Buffer) -> bool:
    """A view of whole matrices: the last two dimensions from 0 to their extents."""
    dims = [int(d.value) for d in b.shape]  # type: ignore[union-attr]
    tail = zip(v.starts[-2:], v.extents[-2:], dims[-2:])
    return all(isinstance(st, L.Const) and st.value == 0 and ext == d for st, ext, d in tail)


def _allowed(fn: L.Function, s: L.Stmt, name: str, mode: int) -> bool:
    """Statements that may touch a swizzled array: its allocation, tmma reading it, and whole-matrix
    copies into it from another array (cp.async, or bulk tensor copies whose boxes the TMA swizzles
    in the array's mode: pipeline-copies asked `wgmma_modes` before the pipeline was expanded)."""
    b = fn.buffer(name)
    assert b is not None
    if isinstance(s, L.Alloc):
        return True
    if isinstance(s, L.Mma):
        return s.acc != name
    if isinstance(s, L.Copy):  # a bulk tensor copy must swizzle as the MMA reads
        return s.dst.buf == name and s.src.buf != name and _whole(s.dst, b) and (s.tma is None or s.tma.swizzle == mode)
    return False


def _mentions(s: L.Stmt, name: str) -> bool:
    """Whether statement `s` itself (not the statements nested in it) names buffer `name`."""
    if any(getattr(s, f, None) == name for f in ("buf", "acc", "regs")):
        return True
    nested = {id(body) for body in bodies(s)}
    return any(_names(getattr(s, f.name), name) for f in dataclasses.fields(s) if id(getattr(s, f.name)) not in nested)


def _names(x: Any, name: str) -> bool:
    if isinstance(x, str):
        return False
    if isinstance(x, (tuple, list)):
        return any(_names(y, name) for y in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        if getattr(x, "buf", None) == name or getattr(x, "acc", None) == name or getattr(x, "regs", None) == name:
            return True
        return any(_names(getattr(x, f.name), name) for f in dataclasses.fields(x))
    return False


__all__ = ["WGMMA_ARCH", "plan_wgmma", "wgmma_modes"]
