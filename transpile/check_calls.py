"""Type checking of calls: builtins of spec sections 5 and 7, casts and device functions.

A dispatch table maps each builtin to a checker; anything it does not list is
reported with its location. Checked calls keep the builtin's name in `func`
with `ref="builtin"` (`"cast"` for casts, `"func"` for device functions).
"""

from __future__ import annotations

import dataclasses
import re

from tessera import nodes as N
from tessera.dtypes import BOOL, F32, I32, SCALARS, ScalarType, literal_adopts, promote
from tessera.errors import Loc
from tessera.transpile.check_expr import BUILTIN_NAMES, ExprChecker, is_scalar, type_name

INDEX_NOARG = {"tile_linear_id", "group_linear_id", "group_tile_count", "global_linear_id",
               "grid_tile_count", "lane_id", "warp_id"}
INDEX_AXIS = {"tile_id", "group_id", "group_shape", "group_count"}
MATH_UNARY = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "floor", "ceil"}
WARP_REDUCE = {"warp_sum", "warp_max", "warp_min"}
SHUFFLES = {"shfl", "shfl_xor", "shfl_down"}
GROUP_REDUCE = {"group_sum", "group_max", "group_min"}
ATOMICS = {"atomic_add", "atomic_sub", "atomic_max", "atomic_min", "atomic_and", "atomic_or",
           "atomic_xor", "atomic_exch", "atomic_cas"}
NOT_YET = {"tcopy_async": "tcopy_async", "tcommit": "tcommit", "twait": "twait"}
SCOPES = ("group", "device", "mesh")

_FMT_SPEC = re.compile(r"%([-+ #0]*)(\d+|\*)?(?:\.(\d*|\*))?([a-zA-Z%])")
_FMT_LENGTH = re.compile(r"%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?[hlLqjzt]+[a-zA-Z]?")


def same_expr(a: object, b: object) -> bool:
    """Structural equality of two expressions, ignoring locations and types."""
    if type(a) is not type(b):
        return False
    if not dataclasses.is_dataclass(a):
        return a == b
    for f in dataclasses.fields(a):
        if f.name in ("loc", "ty", "ref"):
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, tuple):
            if not isinstance(y, tuple) or len(x) != len(y) or not all(same_expr(p, q) for p, q in zip(x, y)):
                return False
        elif not same_expr(x, y):
            return False
    return True


class CallChecker(ExprChecker):
    tile: tuple[int, ...]
    in_kernel: bool
    uses: set[str]

    def x_Call(self, e: N.Call) -> N.Expr:
        if not isinstance(e.func, N.Name):
            if isinstance(e.func, N.Attr) and isinstance(e.func.base, N.Name) and e.func.base.id == "tshared":
                return self.x_Attr(e.func)
            self.sink.error(e.loc, "only builtins, casts and device functions can be called")
            return e
        name = e.func.id
        sym = self.lookup(name)
        if sym is not None and sym.ref == "func":
            if sym.extra["def"].kind == "kernel":
                self.sink.error(e.loc, f"'{name}' is a kernel; a kernel is launched from the host, only @device "
                                "functions can be called")
                return e
            return self.call_device(e, sym)
        if sym is not None:
            self.sink.error(e.loc, f"'{name}' is not a function")
            return e
        if name in SCALARS:
            return self.call_cast(e, SCALARS[name])
        if name in NOT_YET:
            self.sink.error(e.loc, f"{name} is not supported yet (asynchronous copies come with the pipeline issue)")
            return e
        if name in ("range", "static_range", "tpipeline"):
            self.sink.error(e.loc, f"{name}(...) is only allowed as the iterable of a for loop")
            return e
        if name in ("tregs",):
            self.sink.error(e.loc, "tregs(...) is only allowed as the value of an assignment to a name")
            return e
        handler = getattr(self, "b_" + name, None) if name in BUILTIN_NAMES else None
        if handler is None:
            for group, h in ((INDEX_NOARG, self.b_index), (INDEX_AXIS, self.b_index_axis),
                             (MATH_UNARY, self.b_math1), (WARP_REDUCE, self.b_warp_reduce),
                             (SHUFFLES, self.b_shuffle), (GROUP_REDUCE, self.b_group_reduce),
                             (ATOMICS, self.b_atomic)):
                if name in group:
                    handler = h
                    break
        if handler is None:
            if name in ("WARP_SIZE", "grid_groups"):
                self.sink.error(e.loc, f"'{name}' is a value, not a function; write {name} without parentheses")
            elif name == "tshared":
                self.sink.error(e.loc, "'tshared' is not a function; allocate with tshared.alloc(f32[...])")
            else:
                self.undefined(e.func.loc, name)
            return e
        return handler(e, name)

    # ---- helpers
    def _typed(self, e: N.Call, name: str, args, ty, kwargs=()) -> N.Call:
        return N.Call(e.loc, N.Name(e.func.loc, name, ref="builtin"), tuple(args), tuple(kwargs), ty)

    def _arity(self, e: N.Call, name: str, lo: int, hi: int | None = None, kw: tuple[str, ...] = ()) -> bool:
        hi = lo if hi is None else hi
        n = len(e.args)
        for k in e.kwargs:
            if k.name not in kw:
                self.sink.error(k.loc, f"{name}() got an unexpected keyword argument '{k.name}'")
                return False
        if n < lo or n > hi:
            want = f"{lo}" if lo == hi else f"{lo} to {hi}"
            self.sink.error(e.loc, f"{name}() takes {want} argument{'s' if hi != 1 else ''}, got {n}")
            return False
        return True

    def _numeric(self, a: N.Expr, name: str) -> N.Expr:
        t = self.scalar_expr(a, f"argument of {name}()")
        if t.ty is not None and not t.ty.is_numeric:
            self.sink.error(a.loc, f"{name}() needs a numeric argument, not {t.ty}")
            return dataclasses.replace(t, ty=None)
        return t

    def _scope(self, e: N.Call, name: str, pos_index: int | None) -> str | None:
        node = None
        for k in e.kwargs:
            if k.name == "scope":
                node = k.value
        if node is None and pos_index is not None and len(e.args) > pos_index:
            node = e.args[pos_index]
        if node is None:
            return "device"
        if not isinstance(node, N.StrLit) or node.value not in SCOPES:
            self.sink.error(node.loc, f"scope of {name}() must be one of \"group\", \"device\", \"mesh\"")
            return None
        return node.value

    # ---- index builtins
    def b_index(self, e: N.Call, name: str) -> N.Expr:
        self._arity(e, name, 0)
        return self._typed(e, name, (), I32)

    def b_index_axis(self, e: N.Call, name: str) -> N.Expr:
        if not self._arity(e, name, 1):
            return e
        axis = self.const_int(e.args[0], f"the axis of {name}()", 0, 2)
        if axis is None:
            return e
        return self._typed(e, name, (N.IntLit(e.args[0].loc, axis, I32),), I32)

    # ---- math and casts
    def b_math1(self, e: N.Call, name: str) -> N.Expr:
        if not self._arity(e, name, 1):
            return e
        a = self._numeric(e.args[0], name)
        if a.ty is None:
            return e
        if not a.ty.is_float:
            a = self.coerce(a, F32)
        return self._typed(e, name, (a,), a.ty)

    def b_abs(self, e: N.Call, name: str) -> N.Expr:
        if not self._arity(e, name, 1):
            return e
        a = self._numeric(e.args[0], name)
        return self._typed(e, name, (a,), a.ty) if a.ty else e

    def _promote_all(self, e: N.Call, name: str, need_float: bool) -> tuple[list[N.Expr], ScalarType | None]:
        args = [self._numeric(a, name) for a in e.args]
        if any(a.ty is None for a in args):
            return args, None
        strong = [a.ty for a in args if not self.is_weak(a)]
        ty = strong[0] if strong else args[0].ty
        for t in strong[1:]:
            ty = promote(ty, t)
        for a in args:
            # A literal the others' type cannot hold (2.5 next to an i32) widens it, as with operators.
            if (not strong and a is not args[0]) or (self.is_weak(a) and not literal_adopts(a.ty, ty)):
                ty = promote(ty, a.ty)
        if need_float and not ty.is_float:
            ty = F32
        if ty.kind == "bool":
            ty = I32
        return [self.coerce(a, ty) for a in args], ty

    def b_min(self, e: N.Call, name: str) -> N.Expr:
        if not self._arity(e, name, 2, 16):
            return e
        args, ty = self._promote_all(e, name, False)
        return self._typed(e, name, args, ty) if ty else e

    b_max = b_min

    def b_pow(self, e: N.Call, name: str) -> N.Expr:
        if not self._arity(e, name, 2):
            return e
        args, ty = self._promote_all(e, name, True)
        return self._typed(e, name, args, ty) if ty else e

    def b_fma(self, e: N.Call, name: str) -> N.Expr:
        if not self._arity(e, name, 3):
            return e
        args, ty = self._promote_all(e, name, True)
        return self._typed(e, name, args, ty) if ty else e

    def call_cast(self, e: N.Call, ty: ScalarType) -> N.Expr:
        if not self._arity(e, ty.name, 1):
            return e
        a = self.scalar_expr(e.args[0], f"argument of {ty.name}()")
        if a.ty is None:
            return e
        return N.Call(e.loc, N.Name(e.func.loc, ty.name, ref="cast"), (a,), (), ty)

    # ---- debugging
    def b_tprint(self, e: N.Call, name: str) -> N.Expr:
        if not e.args or not isinstance(e.args[0], N.StrLit):
            self.sink.error(e.loc, "tprint() needs a format string as its first argument")
            return e
        fmt = e.args[0]
        args = [self.scalar_expr(a, "tprint argument") for a in e.args[1:]]
        if e.kwargs:
            self.sink.error(e.kwargs[0].loc, "tprint() takes no keyword arguments")
        out: list[str] = []
        pos, k = 0, 0
        text = fmt.value
        for m in _FMT_SPEC.finditer(text):
            if "%" in text[pos:m.start()]:
                self.sink.error(fmt.loc, "tprint format has a stray '%'; write '%%' for a percent sign")
                return e
            out.append(text[pos:m.start()])
            pos = m.end()
            flags, width, prec, conv = m.groups()
            if conv == "%":
                out.append("%%")
                continue
            if "*" in (width or "") or "*" in (prec or ""):
                self.sink.error(fmt.loc, "tprint format: '*' widths are not supported")
                return e
            if conv in "hlLqjzt":
                spec = _FMT_LENGTH.match(text, m.start()).group(0)
                self.sink.error(fmt.loc, f"tprint format: drop the length modifier in '{spec}'; the argument's "
                                "type decides it (write %d for any integer, %f for any float)")
                return e
            if conv not in "diuxXofFeEgGc":
                self.sink.error(fmt.loc, f"tprint format: unsupported conversion '%{conv}'")
                return e
            if k >= len(args):
                self.sink.error(fmt.loc, "tprint format has more conversions than arguments")
                return e
            a = args[k]
            k += 1
            if a.ty is None:
                continue
            want_float = conv in "fFeEgG"
            if want_float != a.ty.is_float:
                kind = "a float" if want_float else "an integer"
                self.sink.error(a.loc, f"tprint format '%{conv}' needs {kind} argument, got {a.ty}")
                continue
            if conv == "c" and a.ty.bits == 64:
                self.sink.error(a.loc, f"tprint format '%c' needs an integer of at most 32 bits, got {a.ty}")
                continue
            length = "ll" if (not want_float and a.ty.bits == 64) else ""
            out.append(f"%{flags}{width or ''}{'.' + prec if prec is not None else ''}{length}{conv}")
        out.append(text[pos:])
        if "%" in text[pos:]:
            self.sink.error(fmt.loc, "tprint format has a stray '%'; write '%%' for a percent sign")
            return e
        if k != len(args):
            self.sink.error(e.loc, f"tprint format has {k} conversions but {len(args)} arguments were given")
            return e
        self.uses.add("tprint")
        return self._typed(e, name, (N.StrLit(fmt.loc, "".join(out), N.STR), *args), N.VOID)

    def b_tassert(self, e: N.Call, name: str) -> N.Expr:
        if len(e.args) not in (1, 2) or (len(e.args) == 2 and not isinstance(e.args[1], N.StrLit)):
            self.sink.error(e.loc, "tassert() takes a condition and an optional message string")
            return e
        c = self.scalar_expr(e.args[0], "condition of tassert()")
        msg = e.args[1] if len(e.args) == 2 else N.StrLit(e.loc, "assertion failed")
        return self._typed(e, name, (c, dataclasses.replace(msg, ty=N.STR)), N.VOID)

    # ---- memory, cooperation
    def b_tbarrier(self, e: N.Call, name: str) -> N.Expr:
        self._arity(e, name, 0)
        self.uses.add("tbarrier")
        return self._typed(e, name, (), N.VOID)

    def b_tfence(self, e: N.Call, name: str) -> N.Expr:
        if not self._arity(e, name, 0, 1, ("scope",)):
            return e
        scope = self._scope(e, name, 0)
        if scope is None:
            return e
        return self._typed(e, name, (N.StrLit(e.loc, scope, N.STR),), N.VOID)

    def b_warp_reduce(self, e: N.Call, name: str) -> N.Expr:
        if not self._arity(e, name, 1):
            return e
        a = self._numeric(e.args[0], name)
        self._warp_check(e, name)
        return self._typed(e, name, (a,), a.ty) if a.ty else e

    def b_shuffle(self, e: N.Call, name: str) -> N.Expr:
        if not self._arity(e, name, 2):
            return e
        a = self.scalar_expr(e.args[0], f"argument of {name}()")
        lane = self.scalar_expr(e.args[1], f"lane argument of {name}()")
        if lane.ty is not None and not lane.ty.is_int:
            self.sink.error(lane.loc, f"the lane argument of {name}() must be an integer, not {lane.ty}")
            return e
        self._warp_check(e, name)
        if a.ty is None or lane.ty is None:
            return e
        return self._typed(e, name, (a, self.coerce(lane, I32)), a.ty)

    def _warp_check(self, e: N.Call, name: str) -> None:
        self.uses.add("warp")
        if self.in_kernel and self.tile and _prod(self.tile) % 32 != 0:
            what = name if name.endswith(" and") else f"{name}()"
            self.sink.error(e.loc, f"{what} needs whole warps: the group has {_prod(self.tile)} tiles, "
                            "not a multiple of 32")

    def b_group_reduce(self, e: N.Call, name: str) -> N.Expr:
        if not self._arity(e, name, 1):
            return e
        if not self.in_kernel:
            self.sink.error(e.loc, f"{name}() is only allowed in a kernel body")
            return e
        a = self._numeric(e.args[0], name)
        if a.ty is None:
            return e
        self.uses.add("group_reduce")
        self.reduce_types.add(a.ty)
        return self._typed(e, name, (a,), a.ty)

    def atomic_target(self, ref: N.Expr, name: str) -> N.Expr:
        if not isinstance(ref, N.Index):
            self.sink.error(ref.loc, f"the first argument of {name}() must be an element of a mut tensor or "
                            "a shared array, such as out[i]")
            return ref
        t = self.expr(ref)
        base_ty = t.base.ty if isinstance(t, N.Index) else None
        if isinstance(base_ty, N.TensorType) and not base_ty.mut:
            self.sink.error(ref.loc, f"'{t.base.id}' is not mut; declare it 'mut' to update it atomically")
            return dataclasses.replace(t, ty=None)
        if isinstance(base_ty, N.ArrayType) and base_ty.space != "shared":
            self.sink.error(ref.loc, f"atomics need a tensor or shared array, not a {type_name(base_ty)}")
            return dataclasses.replace(t, ty=None)
        return t

    def b_atomic(self, e: N.Call, name: str) -> N.Expr:
        nval = 2 if name == "atomic_cas" else 1
        if not self._arity(e, name, 1 + nval, 2 + nval, ("scope",)):
            return e
        ref = self.atomic_target(e.args[0], name)
        scope = self._scope(e, name, 1 + nval)
        vals = [self.scalar_expr(v, f"value of {name}()") for v in e.args[1:1 + nval]]
        if ref.ty is None or scope is None or any(v.ty is None for v in vals):
            return e
        elem: ScalarType = ref.ty
        ok_types = {"i32", "u32", "i64", "u64", "f32", "f64"}
        if name in ("atomic_add", "atomic_sub", "atomic_exch"):
            ok_types |= {"f16", "bf16"}
        if name in ("atomic_and", "atomic_or", "atomic_xor"):
            ok_types -= {"f32", "f64"}
        if elem.name not in ok_types:
            self.sink.error(e.args[0].loc, f"{name}() is not available for {elem} elements")
            return e
        if isinstance(ref.base.ty, N.ArrayType):
            scope = "group"
        vals = [self.assignable(v, elem, v.loc, f"an element of '{ref.base.id}'") for v in vals]
        self.uses.add("atomic")
        return self._typed(e, name, (ref, *vals), elem, (N.Keyword(e.loc, "scope", N.StrLit(e.loc, scope, N.STR)),))

    def b_tcopy(self, e: N.Call, name: str) -> N.Expr:
        if not self._arity(e, name, 2):
            return e
        dst = self.view(e.args[0], name, "destination")
        src = self.view(e.args[1], name, "source")
        if dst is None or src is None:
            return e
        dt, st = dst.ty, src.ty
        dspace = "global" if isinstance(dt.base, N.TensorType) else "shared"
        sspace = "global" if isinstance(st.base, N.TensorType) else "shared"
        if dspace == "global" and sspace == "global":
            self.sink.error(e.loc, "tcopy() copies global<->shared or shared->shared, not global->global")
            return e
        if dspace == "global" and not dt.base.mut:
            self.sink.error(e.args[0].loc, f"'{_root(dst)}' is not mut; declare it 'mut' to store to it")
            return e
        if dt.base.elem != st.base.elem:
            self.sink.error(e.loc, f"tcopy() needs the same element type on both sides, got "
                            f"{dt.base.elem} and {st.base.elem}")
            return e
        if dt.extents != st.extents:
            self.sink.error(e.loc, f"tcopy() shapes differ: destination {list(dt.extents)}, source "
                            f"{list(st.extents)}")
            return e
        if len(dt.extents) > 3:
            self.sink.error(e.loc, "tcopy() supports views of at most 3 dimensions")
            return e
        self.uses.add("tcopy")
        return self._typed(e, name, (dst, src), N.VOID)

    def view(self, e: N.Expr, name: str, what: str) -> N.Expr | None:
        if isinstance(e, N.Name):
            t = self.expr(e)
            if t.ty is None:
                return None
            if isinstance(t.ty, N.ArrayType) and t.ty.space == "shared":
                return N.Index(e.loc, t, (), N.ViewType(t.ty, t.ty.shape))
            self.sink.error(e.loc, f"the {what} of {name}() must be a view (A[r0:r0 + BM, c]) or a shared array")
            return None
        if not isinstance(e, N.Index):
            self.sink.error(e.loc, f"the {what} of {name}() must be a view (A[r0:r0 + BM, c]) or a shared array")
            return None
        base = self.expr(e.base)
        bt = base.ty
        if bt is None:
            return None
        if isinstance(bt, N.TensorType):
            dims = bt.dims
        elif isinstance(bt, N.ArrayType) and bt.space == "shared":
            dims = tuple(N.IntLit(e.loc, d) for d in bt.shape)
        else:
            self.sink.error(e.loc, f"the {what} of {name}() must be a view of a tensor or a shared array")
            return None
        if len(e.indices) != len(dims):
            self.sink.error(e.loc, f"'{base.id}' has {len(dims)} dimensions but is indexed with {len(e.indices)}")
            return None
        idx: list[N.Expr] = []
        extents: list[int] = []
        for i, d in zip(e.indices, dims):
            if isinstance(i, N.Slice):
                lo = self.scalar_expr(i.lo, "slice start") if i.lo is not None else N.IntLit(i.loc, 0, I32)
                hi = self.scalar_expr(i.hi, "slice stop") if i.hi is not None else None
                ext = self.extent(i, lo, hi, d)
                if ext is None:
                    return None
                extents.append(ext)
                idx.append(N.Slice(i.loc, self.coerce(lo, I32), hi, I32))
            else:
                t = self.scalar_expr(i, "index")
                if t.ty is not None and not t.ty.is_int:
                    self.sink.error(i.loc, f"index must be an integer, not {t.ty}")
                    return None
                idx.append(self.coerce(t, I32))
        if not extents:
            self.sink.error(e.loc, f"the {what} of {name}() has no slice; write A[r0:r0 + n] for a view")
            return None
        return N.Index(e.loc, base, tuple(idx), N.ViewType(bt, tuple(extents)))

    def extent(self, s: N.Slice, lo: N.Expr, hi: N.Expr | None, dim: N.Expr) -> int | None:
        if hi is None:
            hi = dim
        ext_expr: N.Expr | None = None
        if isinstance(hi, N.BinOp) and hi.op == "+":
            if same_expr(hi.left, lo):
                ext_expr = hi.right
            elif same_expr(hi.right, lo):
                ext_expr = hi.left
        if ext_expr is None:
            ext_expr = N.BinOp(s.loc, "-", hi, lo)
        v = self.const_int(ext_expr, "the extent of a view (stop - start)", 1)
        return v

    # ---- device functions
    def call_device(self, e: N.Call, sym) -> N.Expr:
        fn: N.FuncDef = sym.extra["def"]
        if e.kwargs:
            self.sink.error(e.kwargs[0].loc, "device functions take positional arguments only")
            return e
        if len(e.args) != len(fn.params):
            self.sink.error(e.loc, f"{fn.name}() takes {len(fn.params)} arguments, got {len(e.args)}")
            return e
        if any(p.type_name not in SCALARS for p in fn.params) or (fn.ret is not None and fn.ret not in SCALARS):
            # The signature has an unknown type, already reported at the definition.
            for a in e.args:
                self.scalar_expr(a, "argument")
            return e
        args = []
        for a, p in zip(e.args, fn.params):
            t = self.scalar_expr(a, f"argument '{p.name}' of {fn.name}()")
            args.append(self.assignable(t, SCALARS[p.type_name], a.loc, f"parameter '{p.name}'"))
        if sym.extra.get("cooperative"):
            self.uses.add("coop_call")
        if any(u in fn.uses for u in ("warp", "warp_call")):
            self.uses.add("warp_call")
            self._warp_check(e, f"{fn.name}() uses warp operations and")
        ret = SCALARS[fn.ret] if fn.ret else N.VOID
        return N.Call(e.loc, N.Name(e.func.loc, fn.name, ref="func"), tuple(args), (), ret)


def _prod(t: tuple[int, ...]) -> int:
    n = 1
    for d in t:
        n *= d
    return n


def _root(v: N.Expr) -> str:
    return v.base.id if isinstance(v, N.Index) and isinstance(v.base, N.Name) else "?"


__all__ = ["CallChecker", "same_expr", "is_scalar", "BOOL", "Loc"]
