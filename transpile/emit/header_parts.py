"""Which sections of the device header a module includes, decided from its lowered IR.

NVRTC's time grows with the header it parses (cuda_fp16.h and cuda_bf16.h alone cost about as much
as compiling a small kernel), so the device header is split into sections and an emitted module
includes only those it uses. This module is the one place that maps what a module uses to sections:

    section       file (under templates/)   included when
    core          device/core.cuh           always: pragmas, float to int, integer division, ids, fill
    fdiv          device/fdiv.cuh           a float `/` or `//` in a 2-D whole-fragment statement (tsr_fdiv)
    f16           device/f16.cuh            an f16 value, parameter, array or constant (cuda_fp16.h)
    bf16          device/bf16.cuh           the same for bf16 (cuda_bf16.h)
    race          device/race.cuh           check_bounds and a load or store of a shared array; copy
    warp_reduce   device/warp_reduce.cuh    warp_sum, warp_max, warp_min, warp_cumsum
    group_reduce  device/group_reduce.cuh   group_sum, group_max, group_min, group_cumsum
    atomic_cas    device/atomic_cas.cuh     atomic_max, atomic_min, atomic_cas on f32/f64
    atomic_16     device/atomic_16.cuh      required by atomic_f16 and atomic_bf16 (the 16-bit CAS loop)
    atomic_f16    device/atomic_f16.cuh     an atomic on f16
    atomic_bf16   device/atomic_bf16.cuh    an atomic on bf16
    bounds        device/bounds.cuh         check_bounds and an array element access
    overflow      device/overflow.cuh       check_bounds and i32/i64 + - * or negation
    assert        device/assert.cuh         debug and a tassert
    copy          tessera_copy.cuh          a tcopy
    vec           device/vec.cuh            a vector access of a view (r[:] = X[i, j:j + 8])
    mma           device/mma.cuh            a tmma (ldmatrix, mma.sync and their CPU-backend versions)
    wgmma         device/wgmma.cuh          a wgmma kernel (sm_90a): descriptors, fences, the emulation
                                            (the instructions follow the header: emit/wgmma_asm.py)
    tma           device/tma.cuh            a variant that moves copies with the tensor memory accelerator
                                            (sm_90a: bulk tensor copies, mbarriers, tensor-map parameters)
    map           device/map.cuh            a map kernel with vectorize(w > 1), unless only its generic
                                            variant is emitted (vector loads and stores)

`SECTIONS` lists them in the order they are emitted, each after the sections it requires (whose
definitions it uses); every section may use `core`. The triggers are a superset of what the printer
emits (emit/exprs.py, emit/builtin_calls.py, emit/stmts.py): a section that is included and not needed costs compile time,
one that is needed and missing does not compile. The CPU backend compiles the same sections with its
prelude force-included, which provides what the device-only parts (`#if !defined(TESSERA_HOST)`)
leave out (the race detector hooks, `tsr_host_fail` of the failure reports).
"""

from __future__ import annotations

from collections.abc import Iterable

from tessera.base.dtypes import ScalarType
from tessera.base.irnode import ir_node
from tessera.base.options import CompileOptions
from tessera.transpile.builtins import BUILTINS
from tessera.transpile.emit.mma_checks import needs_checks
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import all_exprs, statements, walk

__all__ = ["SECTIONS", "Section", "closure", "sections"]


@ir_node
class Section:
    name: str
    file: str                       # the template, relative to templates/
    requires: tuple[str, ...] = ()  # sections whose definitions this one uses (besides core)


SECTIONS: tuple[Section, ...] = (
    Section("core", "device/core.cuh"),
    Section("fdiv", "device/fdiv.cuh"),
    Section("f16", "device/f16.cuh"),
    Section("bf16", "device/bf16.cuh"),
    Section("race", "device/race.cuh"),
    Section("warp_reduce", "device/warp_reduce.cuh"),
    Section("group_reduce", "device/group_reduce.cuh"),
    Section("atomic_cas", "device/atomic_cas.cuh"),
    Section("atomic_16", "device/atomic_16.cuh"),
    Section("atomic_f16", "device/atomic_f16.cuh", ("f16", "atomic_16")),
    Section("atomic_bf16", "device/atomic_bf16.cuh", ("bf16", "atomic_16")),
    Section("bounds", "device/bounds.cuh"),
    Section("overflow", "device/overflow.cuh"),
    Section("assert", "device/assert.cuh"),
    Section("copy", "tessera_copy.cuh", ("race",)),  # owned by the copy routines: included whole
    Section("vec", "device/vec.cuh", ("race",)),
    Section("map", "device/map.cuh"),
    Section("mma", "device/mma.cuh"),
    Section("wgmma", "device/wgmma.cuh", ("mma",)),
    Section("tma", "device/tma.cuh", ("copy",)),
)

_COLLECTIVES = {"warp_reduce": "warp_reduce", "group_reduce": "group_reduce"}  # printer rule -> section
_CAS_ATOMICS = frozenset({"atomic_max", "atomic_min", "atomic_cas"})
_CHECKED_OPS = frozenset({"+", "-", "*"})


def sections(module: L.Module, opts: CompileOptions) -> tuple[str, ...]:
    """The names of the sections `module` includes when emitted with `opts`, in emission order."""
    used = {"core"} | _halves({c.dtype for c in module.consts} | {t.elem for t in module.tables})
    for fn in module.functions:
        stmts = tuple(statements(fn.body))
        exprs = tuple(all_exprs(fn.body))
        used |= _halves(_types(fn, stmts, exprs)) | _builtins(exprs)
        if any(isinstance(s, L.Copy) for s in stmts):
            used.add("copy")
        if any(isinstance(s, L.Mma) for s in stmts) or any(b.space == "frag" and b.elem.is_half for b in fn.buffers):
            used.add("mma")  # (operand fragments: tload from shared memory uses ldmatrix)
        if fn.wgmma:
            used.add("wgmma")
        if any(isinstance(s, L.FragAssign) and _divides(fn, s) for s in stmts):
            used.add("fdiv")
        if any(isinstance(s, L.VecMove) for s in stmts):
            used.add("vec")
        if any(isinstance(s, L.Copy) and s.tma is not None and s.tma.active for s in stmts):
            used.add("tma")
        if fn.aligned and any(isinstance(s, L.ElementLoop) and s.width > 1 for s in stmts):
            used.add("map")
        if opts.debug and any(isinstance(s, L.Assert) for s in stmts):
            used.add("assert")
        if opts.check_bounds:
            used |= _checks(fn, stmts, exprs)
    return closure(used)


def closure(names: Iterable[str]) -> tuple[str, ...]:
    """`names` and every section they require, directly or not, in the order of `SECTIONS`."""
    want = set(names)
    for s in reversed(SECTIONS):  # a section comes after those it requires: they are visited later
        if s.name in want:
            want.update(s.requires)
    return tuple(s.name for s in SECTIONS if s.name in want)


def _types(fn: L.Function, stmts: tuple[L.Stmt, ...], exprs: tuple[L.Expr, ...]) -> set[ScalarType]:
    """Every type in a function: of its parameters, arrays, constants, result and values."""
    types = {p.dtype for p in fn.params} | {b.elem for b in fn.buffers} | {c.dtype for c in fn.consts}
    types |= {e.dtype for e in exprs} | {s.op_type for s in stmts if isinstance(s, (L.Assign, L.Store)) and s.op_type}
    return types | ({fn.ret} if fn.ret is not None else set())


def _halves(types: set[ScalarType]) -> set[str]:
    """The sections of the 16-bit float types among `types` ("f16", "bf16")."""
    return {t.name for t in types if t.is_half}


def _builtins(exprs: tuple[L.Expr, ...]) -> set[str]:
    """The sections of the warp and group reductions and of the atomics CUDA does not provide."""
    out: set[str] = set()
    for e in exprs:
        if isinstance(e, L.Collective) and BUILTINS[e.op].printer in _COLLECTIVES:
            out.add(_COLLECTIVES[BUILTINS[e.op].printer])
        elif isinstance(e, L.Atomic) and e.dtype.is_half:
            out.add("atomic_" + e.dtype.name)
        elif isinstance(e, L.Atomic) and e.dtype.is_float and e.op in _CAS_ATOMICS:
            out.add("atomic_cas")
    return out


def _divides(fn: L.Function, s: L.FragAssign) -> bool:
    """Whether a 2-D fragment statement divides in `float` (CPrinter.inline_division: `tsr_fdiv`)."""
    acc = fn.buffer(s.acc)
    if acc is None or len(acc.shape) != 2:  # a row vector's statement keeps `/`
        return False
    op_type = s.op_type or acc.elem
    if s.op in ("/", "//") and op_type is not None and op_type.c_compute == "float":
        return True
    return any(isinstance(e, L.Binary) and e.op in ("/", "//") and e.dtype.c_compute == "float" for e in walk(s.value))


def _checks(fn: L.Function, stmts: tuple[L.Stmt, ...], exprs: tuple[L.Expr, ...]) -> set[str]:
    """The sections of a check_bounds build: index checks on every element access, the race
    detector on shared loads and stores, overflow checks on signed 32/64-bit + - * and negation."""
    out: set[str] = set()
    accessed = [e.buf for e in exprs if isinstance(e, L.Load)] + [s.buf for s in stmts if isinstance(s, L.Store)]
    if accessed or any(isinstance(e, L.Atomic) for e in exprs) or any(needs_checks(s) for s in stmts):
        out.add("bounds")
    if any((b := fn.buffer(name)) is not None and b.space in ("shared", "ref") for name in accessed):
        out.add("race")
    if any(isinstance(e, (L.Binary, L.Unary)) and e.op in _CHECKED_OPS and _overflows(e.dtype) for e in exprs) or any(
            isinstance(s, (L.Assign, L.Store)) and s.op in _CHECKED_OPS and _overflows(s.op_type) for s in stmts) \
            or padded_sum(fn):
        out.add("overflow")
    return out


def padded_sum(fn: L.Function) -> bool:
    """Whether the function has a padded launch-sized shared array: its indexing adds the padding
    to the row length (exprs.padded_dims), checked for overflow, though no expression of the body
    need add anything."""
    return any(b.space == "shared" and b.pad and not all(isinstance(d, L.Const) for d in b.shape)
               for b in fn.buffers)


def _overflows(ty: ScalarType | None) -> bool:
    """Signed 32/64-bit arithmetic, where C leaves overflow undefined (CPrinter.overflow_checked)."""
    return ty is not None and ty.kind == "int" and ty.bits >= 32
