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
  pipeline stage's, say) or as slices of them along K (`As[:, kk:kk + 16]`, `Bs[kk:kk + 16, :]`)
  whose start is a constant or the variable of a `static_range` with constant bounds, a multiple
  of the instruction's k in every iteration, and is otherwise only written by whole-matrix `tcopy`/`tcopy_async`
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
    loops = _unrolled_loops(fn)
    modes: dict[str, int] = {}
    for s in mmas:
        found = _operand_modes(fn, s, loops)
        if found is None:
            return None
        modes.update(found)
    for st in statements(fn.body):
        for name, mode in modes.items():
            if _mentions(st, name) and not _allowed(fn, st, name, mode):
                return None
    return modes


def _operand_modes(fn: L.Function, s: L.Mma, loops: dict[str, list[range]]) -> dict[str, int] | None:
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
    step = MMA_KINDS[b.elem.name].k
    if k % step:
        return None
    out: dict[str, int] = {}
    for view, buf in ((s.a, a), (s.b, b)):
        if buf.space == "frag":
            if view is s.b or not buf.elem.is_half:
                return None
            continue
        m = _matrix(buf)
        k_axis = -2 if view is s.b and not s.trans_b else -1  # B[K, N] is MN-major; A and B^T are K-major
        if m is None or not _k_slice(view, buf, k_axis, step, loops):
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


def _k_slice(v: L.View, b: L.Buffer, k_axis: int, step: int, loops: dict[str, list[range]]) -> bool:
    """A view of whole matrices, or of matrices sliced along K (dimension `k_axis`) at starts that
    are multiples of the instruction's k: the descriptors then start at that row or column."""
    dims = [int(d.value) for d in b.shape]  # type: ignore[union-attr]
    other = len(dims) - 2 if k_axis == -1 else len(dims) - 1
    if _values(v.starts[other], loops) != [0] or v.extents[other] != dims[other]:
        return False
    ext, dim = v.extents[k_axis], dims[k_axis]
    starts = _values(v.starts[k_axis], loops)
    return ext is not None and starts is not None and all(k % step == 0 and k >= 0 and k + ext <= dim for k in starts)


def _values(e: L.Expr, loops: dict[str, list[range]]) -> list[int] | None:
    """Every value an index takes: a constant's, or an affine form's over `static_range` variables
    (every unrolled loop of that name, constant bounds); None for anything else."""
    if isinstance(e, L.Const):
        return [e.value] if type(e.value) is int else None
    if isinstance(e, L.Var):
        return [k for r in loops[e.name] for k in r] if e.name in loops else None
    if not isinstance(e, L.Affine) or type(e.offset.value) is not int:
        return None
    values = [e.offset.value]
    for atom, coeff in e.terms:
        atoms = _values(atom, loops)
        if atoms is None or type(coeff.value) is not int or len(values) * len(atoms) > 4096:
            return None
        values = [x + coeff.value * a for x in values for a in atoms]
    return values


def _unrolled_loops(fn: L.Function) -> dict[str, list[range]]:
    """The ranges of the kernel's unrolled loops with constant bounds, by variable name (a name
    bound by another kind of loop, or by an assignment, is left out)."""
    found: dict[str, list[range]] = {}
    other: set[str] = set()
    for s in statements(fn.body):
        if isinstance(s, L.For):
            bounds = [x.value if isinstance(x, L.Const) and type(x.value) is int else None
                      for x in (s.start, s.stop, s.step)]
            if s.unroll and None not in bounds and bounds[2] != 0:
                found.setdefault(s.var.name, []).append(range(*bounds))  # type: ignore[arg-type]
            else:
                other.add(s.var.name)
        elif isinstance(s, (L.Decl, L.Assign)):
            other.add(s.var.name)
    return {n: r for n, r in found.items() if n not in other}


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
