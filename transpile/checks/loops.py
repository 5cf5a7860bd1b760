"""Type checking of `for` loops (spec sections 6 and 7): `range`, `static_range` (constant bounds)
and `tpipeline` (its `stages=`), the loop variable's type from the bounds, and the variable's scope.
`Loops` is a part of the type checker (typecheck.FunctionChecker), whose statement walk sends it
the `for` statements."""

from __future__ import annotations

from tessera.base.dtypes import SCALARS
from tessera.base.errors import Note
from tessera.base.limits import MAX_STAGES
from tessera.frontend import nodes as N
from tessera.transpile.checks.expr import scalar_type
from tessera.transpile.checks.scope import Part, Sym

# What a name of the body other than a plain local is, for the error when a loop variable takes it.
_WHAT = {"loopvar": "a loop variable", "shared": "a shared array", "regs": "a register array",
         "frag": "a fragment"}


class Loops(Part):
    """The type checker's part for `for` loops; the core (FunctionChecker) walks their bodies."""

    def s_For(self, s: N.For) -> N.Stmt:
        it = s.iter
        if not (isinstance(it, N.Call) and isinstance(it.func, N.Name)
                and it.func.id in ("range", "static_range", "tpipeline")):
            self.sink.error(it.loc, "a for loop iterates over range(...), static_range(...) or tpipeline(...)")
            return s
        kind = it.func.id
        stages = self.stages(it) if kind == "tpipeline" else None
        if kind == "tpipeline" and stages is None:
            return s
        if it.kwargs and kind != "tpipeline":
            self.sink.error(it.kwargs[0].loc, f"{kind}() takes no keyword arguments")
            return s
        if not 1 <= len(it.args) <= 3:
            self.sink.error(it.loc, f"{kind}() takes 1 to 3 arguments, got {len(it.args)}")
            return s
        args = [self.exprs.scalar_expr(a, f"argument of {kind}()") for a in it.args]
        types = [t for t in map(scalar_type, args) if t is not None]
        if len(types) < len(args):
            return s
        for a, t in zip(args, types):
            if not t.is_int:
                self.sink.error(a.loc, f"{kind}() needs integer arguments, not {t}")
                return s
        if kind == "static_range":
            vals = [self.scope.const_int(a, "a static_range bound") for a in it.args]
            if any(v is None for v in vals):
                return s
            if len(vals) == 3 and vals[2] == 0:
                self.sink.error(it.args[2].loc, "static_range() step must not be zero")
                return s
        elif len(args) == 3 and self.exprs.is_weak(args[2]) and self.scope.const_value(args[2], "step") == 0:
            self.sink.error(it.args[2].loc, "range() step must not be zero")
            return s
        strong = [t for a, t in zip(args, types) if not self.exprs.is_weak(a)]
        var_ty = strong[0] if strong else SCALARS["i32"]
        for t in strong[1:]:
            if t.bits > var_ty.bits:
                var_ty = t
        args = [self.exprs.coerce(a, var_ty) for a in args]
        at = s.var_loc or s.loc
        if not self.scope.check_new_name(s.var, at):
            return s
        prev = self.fc.locals.get(s.var)
        if prev is not None and prev.ref != "local":
            self.sink.error(at, f"'{s.var}' is already {_WHAT.get(prev.ref, 'defined')} and cannot be a loop variable",
                            Note("defined here", prev.loc))
            return s
        if s.var in self.fc.params:
            self.sink.error(at, f"'{s.var}' is a parameter and cannot be a loop variable",
                            Note("parameter here", self.fc.params[s.var].loc))
            return s
        if prev is not None and prev.ty != var_ty:
            self.sink.error(at, f"loop variable '{s.var}' is {var_ty} but the local '{s.var}' is {prev.ty}")
            return s
        if prev is None:
            self.fc.locals[s.var] = Sym(s.var, "loopvar", var_ty, s.loc, block=self.fc.block + (-1,))
        self.fc.loop_depth += 1
        body = self.fc.body(s.body)
        self.fc.loop_depth -= 1
        if prev is None:
            del self.fc.locals[s.var]
        new_iter = N.replace(it, args=tuple(args), func=N.replace(it.func, ref="builtin"), ty=var_ty)
        step = self.scope.try_const(it.args[2]) if len(it.args) == 3 else 1
        step = step if isinstance(step, int) and not isinstance(step, bool) else None
        return N.replace(s, iter=new_iter, body=body, var_ty=var_ty, step_value=step, stages=stages)

    def stages(self, it: N.Call) -> int | None:
        """The `stages=S` of a tpipeline(...): a compile-time constant, 2 when left out."""
        value: N.Expr | None = None
        for k in it.kwargs:
            if k.name != "stages":
                self.sink.error(k.loc, f"tpipeline() got an unexpected keyword argument '{k.name}'")
                return None
            value = k.value
        if value is None:
            return 2
        return self.scope.const_int(value, "the stages of tpipeline()", 1, MAX_STAGES)
