"""Type checking of calls (spec sections 5 and 7): what a call calls (a device function, a cast
or a builtin, anything else reported with its location), casts, and the typing rules of the index,
math, bit, debugging and cooperation builtins.

`BuiltinCalls` is a part of the type checker (typecheck.FunctionChecker): it sends a builtin's call
to the rule the builtin table (builtins.py) names for it, through the checker's rule table
(rules.rule_table), and provides the rules above (`rules()`); device functions go to
device_calls.DeviceCalls. Checked calls keep the builtin's name in `func` with `ref="builtin"`
(`"cast"` for casts, `"func"` for device functions).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tessera.base.dtypes import BOOL, F32, I32, SCALARS, ScalarType, common_type, literal_adopts, promote
from tessera.frontend import nodes as N
from tessera.transpile.builtins import BUILTINS, ITERABLES, VALUES
from tessera.transpile.checks.expr import scalar_type
from tessera.transpile.checks.rules import Rule, check_arity, check_warps, scope_arg, typed_call
from tessera.transpile.checks.scope import Part

if TYPE_CHECKING:
    pass

_FMT_SPEC = re.compile(r"%([-+ #0]*)(\d+|\*)?(?:\.(\d*|\*))?([a-zA-Z%])")
# Matches wherever _FMT_SPEC takes a length modifier for the conversion ("%.ld" included).
_FMT_LENGTH = re.compile(r"%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d*|\*))?[hlLqjzt]+[a-zA-Z]?")


class BuiltinCalls(Part):
    """The type checker's part for calls: what a call calls, casts, and the typing rules of the index,
    math, bit, debugging and cooperation builtins."""

    def rules(self) -> dict[str, Rule]:
        return {"index": self.rule_index, "index_axis": self.rule_index_axis,
                "math1": self.rule_math1, "abs": self.rule_abs, "minmax": self.rule_minmax, "pow": self.rule_pow,
                "fma": self.rule_fma,
                "bits": self.rule_bits, "mulhi": self.rule_mulhi, "bitcast": self.rule_bitcast,
                "tprint": self.rule_tprint, "tassert": self.rule_tassert,
                "tbarrier": self.rule_tbarrier, "tfence": self.rule_tfence, "warp_reduce": self.rule_warp_reduce,
                "warp_vote": self.rule_warp_vote, "shuffle": self.rule_shuffle, "group_reduce": self.rule_group_reduce}

    def call(self, e: N.Call) -> N.Expr:
        """A call: of a device function, a cast or a builtin (through the rule table)."""
        if not isinstance(e.func, N.Name):
            if isinstance(e.func, N.Attr) and isinstance(e.func.base, N.Name) and e.func.base.id == "tshared":
                return self.exprs.x_Attr(e.func)
            self.sink.error(e.loc, "only builtins, casts and device functions can be called")
            return e
        name = e.func.id
        sym = self.scope.lookup(name)
        if sym is not None and sym.ref == "func":
            if sym.extra["def"].kind == "kernel":
                self.sink.error(e.loc, f"'{name}' is a kernel; a kernel is launched from the host, only @device "
                                "functions can be called")
                return e
            return self.fc.devices.call_device(e, sym)
        if sym is not None:
            self.sink.error(e.loc, f"'{name}' is not a function")
            return e
        if name in SCALARS:
            return self.call_cast(e, SCALARS[name])
        if name in ITERABLES:
            self.sink.error(e.loc, f"{name}(...) is only allowed as the iterable of a for loop")
            return e
        if name in ("tregs", "tfrag"):
            self.sink.error(e.loc, f"{name}(...) is only allowed as the value of an assignment to a name")
            return e
        builtin = BUILTINS.get(name)
        if builtin is None:
            word = e.args[0].value.strip() if len(e.args) == 1 and isinstance(e.args[0], N.StrLit) else ""
            if name == "float" and word.lower() in ("inf", "-inf", "+inf", "nan"):
                self.sink.error(e.loc, f"write {word.lower().lstrip('+')} for float(\"{word}\"): .tsr has the "
                                "float constants inf and nan")
                return e
            if name in VALUES:
                self.sink.error(e.loc, f"'{name}' is a value, not a function; write {name} without parentheses")
            elif name == "tshared":
                self.sink.error(e.loc, "'tshared' is not a function; allocate with tshared.alloc(f32[...])")
            else:
                self.scope.undefined(e.func.loc, name)
            return e
        return self.fc.rules[builtin.rule](e, name)

    # ---- helpers
    def _numeric(self, a: N.Expr, name: str) -> N.Expr:
        t = self.exprs.scalar_expr(a, f"argument of {name}()")
        ty = scalar_type(t)
        if ty is not None and not ty.is_numeric:
            self.sink.error(a.loc, f"{name}() needs a numeric argument, not {ty}")
            return N.replace(t, ty=None)
        return t

    # ---- index builtins
    def rule_index(self, e: N.Call, name: str) -> N.Expr:
        check_arity(self.sink, e, name, 0)
        return typed_call(e, name, (), I32)

    def rule_index_axis(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 1):
            return e
        axis = self.scope.const_int(e.args[0], f"the axis of {name}()", 0, 2)
        if axis is None:
            return e
        return typed_call(e, name, (N.IntLit(e.args[0].loc, axis, I32),), I32)

    # ---- math and casts
    def rule_math1(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 1):
            return e
        a = self._numeric(e.args[0], name)
        ty = scalar_type(a)
        if ty is None:
            return e
        if not ty.is_float:
            a = self.exprs.coerce(a, F32)
        return typed_call(e, name, (a,), a.ty)

    def rule_abs(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 1):
            return e
        a = self._numeric(e.args[0], name)
        return typed_call(e, name, (a,), a.ty) if a.ty else e

    def _promote_all(self, e: N.Call, name: str, need_float: bool) -> tuple[list[N.Expr], ScalarType | None]:
        args = [self._numeric(a, name) for a in e.args]
        types = [t for t in map(scalar_type, args) if t is not None]
        if len(types) < len(args):
            return args, None
        ty = common_type(types, [self.exprs.is_weak(a) for a in args])
        if need_float and not ty.is_float:
            ty = F32
        if ty.kind == "bool":
            ty = I32
        return [self.exprs.coerce(a, ty) for a in args], ty

    def rule_minmax(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 2, 16):
            return e
        args, ty = self._promote_all(e, name, False)
        return typed_call(e, name, args, ty) if ty else e

    def rule_pow(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 2):
            return e
        args, ty = self._promote_all(e, name, True)
        return typed_call(e, name, args, ty) if ty else e

    def rule_fma(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 3):
            return e
        args, ty = self._promote_all(e, name, True)
        return typed_call(e, name, args, ty) if ty else e

    # ---- integers and bits
    def _wide_int(self, a: N.Expr, ty: ScalarType, name: str, weak: bool = False) -> bool:
        """Whether `a` (of type `ty`) is a 32- or 64-bit integer (a literal of a narrower type is
        too: it takes the other operand's type); reports why not."""
        if not ty.is_int:
            self.sink.error(a.loc, f"{name}() needs an integer argument, not {ty}")
            return False
        if ty.bits < 32 and not weak:
            conv = "u32" if ty.kind == "uint" else "i32"
            how = f"{name}({conv}(a), {conv}(b))" if name == "mulhi" else f"{name}({conv}(x))"
            self.sink.error(a.loc, f"{name}() takes 32- or 64-bit integers, not {ty}; convert first ({how})")
            return False
        return True

    def rule_bits(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 1):
            return e
        a = self.exprs.scalar_expr(e.args[0], f"argument of {name}()")
        ty = scalar_type(a)
        if ty is None or not self._wide_int(a, ty, name):
            return e
        return typed_call(e, name, (a,), ty if name == "brev" else I32)

    def rule_mulhi(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 2):
            return e
        args = [self.exprs.scalar_expr(a, f"argument of {name}()") for a in e.args]
        types = [t for t in map(scalar_type, args) if t is not None]
        if len(types) < len(args):
            return e
        weak = [self.exprs.is_weak(a) for a in args]
        if not all(self._wide_int(a, t, name, True) for a, t in zip(args, types)):
            return e
        strong = [t for t, w in zip(types, weak) if not w]
        ty = strong[0] if strong else promote(types[0], types[1])
        for t in strong[1:]:
            ty = promote(ty, t)
        for t, w in zip(types, weak):
            if w and not literal_adopts(t, ty):  # a literal too wide for the other type widens it
                ty = promote(ty, t)
        if ty.bits < 32:
            self._wide_int(e, ty, name)
            return e
        return typed_call(e, name, tuple(self.exprs.coerce(a, ty) for a in args), ty)

    def rule_bitcast(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 2):
            return e
        a = self._numeric(e.args[0], name)
        target = e.args[1]
        if not isinstance(target, N.Name) or target.id not in SCALARS or self.scope.lookup(target.id) is not None:
            self.sink.error(target.loc, "the second argument of bitcast() must be a scalar type name "
                            "(bitcast(x, u32))")
            return e
        ty = SCALARS[target.id]
        src = scalar_type(a)
        if src is None:
            return e
        if ty.kind == "bool":
            self.sink.error(target.loc, "bitcast() cannot give bool; compare the bits instead (x != 0)")
            return e
        if src.bits != ty.bits:
            self.sink.error(e.loc, f"bitcast() keeps the width: {src} is {src.bits} bits but {ty} is "
                            f"{ty.bits} bits; convert first ({ty}(x)) or pick a {src.bits}-bit type")
            return e
        return typed_call(e, name, (a,), ty)

    def call_cast(self, e: N.Call, ty: ScalarType) -> N.Expr:
        if not check_arity(self.sink, e, ty.name, 1):
            return e
        a = self.exprs.scalar_expr(e.args[0], f"argument of {ty.name}()")
        if a.ty is None:
            return e
        return N.Call(e.loc, N.Name(e.func.loc, ty.name, ref="cast"), (a,), (), ty)

    # ---- debugging
    def rule_tprint(self, e: N.Call, name: str) -> N.Expr:
        if not e.args or not isinstance(e.args[0], N.StrLit):
            self.sink.error(e.loc, "tprint() needs a format string as its first argument")
            return e
        fmt = e.args[0]
        args = [self.exprs.scalar_expr(a, "tprint argument") for a in e.args[1:]]
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
                length_spec = _FMT_LENGTH.match(text, m.start())
                assert length_spec is not None, text  # it matches wherever _FMT_SPEC found a length
                spec = length_spec.group(0)
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
            aty = scalar_type(a)
            if aty is None:
                continue
            want_float = conv in "fFeEgG"
            if want_float != aty.is_float:
                kind = "a float" if want_float else "an integer"
                self.sink.error(a.loc, f"tprint format '%{conv}' needs {kind} argument, got {aty}")
                continue
            if conv == "c" and aty.bits == 64:
                self.sink.error(a.loc, f"tprint format '%c' needs an integer of at most 32 bits, got {aty}")
                continue
            length = "ll" if (not want_float and aty.bits == 64) else ""
            out.append(f"%{flags}{width or ''}{'.' + prec if prec is not None else ''}{length}{conv}")
        out.append(text[pos:])
        if "%" in text[pos:]:
            self.sink.error(fmt.loc, "tprint format has a stray '%'; write '%%' for a percent sign")
            return e
        if k != len(args):
            self.sink.error(e.loc, f"tprint format has {k} conversions but {len(args)} arguments were given")
            return e
        return typed_call(e, name, (N.StrLit(fmt.loc, "".join(out), N.STR), *args), N.VOID)

    def rule_tassert(self, e: N.Call, name: str) -> N.Expr:
        if len(e.args) not in (1, 2) or (len(e.args) == 2 and not isinstance(e.args[1], N.StrLit)):
            self.sink.error(e.loc, "tassert() takes a condition and an optional message string")
            return e
        c = self.exprs.scalar_expr(e.args[0], "condition of tassert()")
        msg = e.args[1] if len(e.args) == 2 else N.StrLit(e.loc, "assertion failed")
        return typed_call(e, name, (c, N.replace(msg, ty=N.STR)), N.VOID)

    # ---- memory, cooperation
    def rule_tbarrier(self, e: N.Call, name: str) -> N.Expr:
        check_arity(self.sink, e, name, 0)
        return typed_call(e, name, (), N.VOID)

    def rule_tfence(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 0, 1, ("scope",)):
            return e
        scope = scope_arg(self.sink, e, name, 0)
        if scope is None:
            return e
        return typed_call(e, name, (N.StrLit(e.loc, scope, N.STR),), N.VOID)

    def rule_warp_reduce(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 1):
            return e
        a = self._numeric(e.args[0], name)
        check_warps(self.fc, e, name)
        return typed_call(e, name, (a,), a.ty) if a.ty else e

    def rule_warp_vote(self, e: N.Call, name: str) -> N.Expr:
        # The predicate is any scalar, true where it is non-zero (as an `if` condition).
        if not check_arity(self.sink, e, name, 1):
            return e
        p = self.exprs.scalar_expr(e.args[0], f"predicate of {name}()")
        check_warps(self.fc, e, name)
        if p.ty is None:
            return e
        return typed_call(e, name, (p,), SCALARS["u32"] if name == "warp_ballot" else BOOL)

    def rule_shuffle(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 2):
            return e
        what = {"shfl_down": "delta", "shfl_up": "delta", "shfl_xor": "mask"}.get(name, "lane")
        a = self.exprs.scalar_expr(e.args[0], f"argument of {name}()")
        lane = self.exprs.scalar_expr(e.args[1], f"{what} argument of {name}()")
        lane_ty = scalar_type(lane)
        if lane_ty is not None and not lane_ty.is_int:
            self.sink.error(lane.loc, f"the {what} argument of {name}() must be an integer, not {lane_ty}")
            return e
        check_warps(self.fc, e, name)
        if a.ty is None or lane.ty is None:
            return e
        return typed_call(e, name, (a, self.exprs.coerce(lane, I32)), a.ty)

    def rule_group_reduce(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 1):
            return e
        if not self.fc.in_kernel:
            self.sink.error(e.loc, f"{name}() is only allowed in a kernel body")
            return e
        a = self._numeric(e.args[0], name)
        if a.ty is None:
            return e
        return typed_call(e, name, (a,), a.ty)
