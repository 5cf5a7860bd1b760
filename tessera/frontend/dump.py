"""A readable, deterministic text form of the syntax tree (`tesserac --dump-after PASS` for the passes
before `lower`): .tsr-like statements with each expression's type after a colon where it is known.
The lowered IR has its own (transpile/lir/dump.py)."""

from __future__ import annotations

from tessera.frontend import nodes as N


def _ty(t: object) -> str:
    if t is None:
        return ""
    if isinstance(t, N.TensorType):
        return f"{'mut ' if t.mut else ''}{t.elem}[{', '.join(_expr(d) for d in t.dims)}]"
    if isinstance(t, N.ArrayType):
        pad = f" pad={t.pad}" if t.pad else ""
        return f"{t.space} {t.elem}{list(t.shape)}{pad}"
    if isinstance(t, N.ViewType):
        return f"view{list(t.extents)}"
    return str(getattr(t, "name", type(t).__name__.replace("Type", "").lower()))


def _expr(e: object) -> str:
    if isinstance(e, N.Name):
        text = e.id
    elif isinstance(e, (N.IntLit, N.FloatLit, N.BoolLit)):
        text = repr(e.value)
    elif isinstance(e, N.StrLit):
        return repr(e.value)
    elif isinstance(e, N.BinOp):
        text = f"({_expr(e.left)} {e.op} {_expr(e.right)})"
    elif isinstance(e, N.Compare):
        text = "(" + f" {e.ops[0]} ".join(_expr(o) for o in e.operands) + ")"
    elif isinstance(e, N.BoolOp):
        text = f"({_expr(e.left)} {e.op} {_expr(e.right)})"
    elif isinstance(e, N.Unary):
        text = f"({e.op}{' ' if e.op == 'not' else ''}{_expr(e.operand)})"
    elif isinstance(e, N.Ternary):
        text = f"({_expr(e.then)} if {_expr(e.cond)} else {_expr(e.orelse)})"
    elif isinstance(e, N.Call):
        args = [_expr(a) for a in e.args] + [f"{k.name}={_expr(k.value)}" for k in e.kwargs]
        text = f"{_expr(e.func) if not isinstance(e.func, N.Name) else e.func.id}({', '.join(args)})"
    elif isinstance(e, N.Index):
        text = f"{_expr(e.base)}[{', '.join(_expr(i) for i in e.indices)}]"
    elif isinstance(e, N.Slice):
        return f"{_expr(e.lo) if e.lo else ''}:{_expr(e.hi) if e.hi else ''}"
    elif isinstance(e, N.Attr):
        text = f"{_expr(e.base)}.{e.name}"
    elif isinstance(e, (N.TupleLit, N.ListLit)):
        text = "[" + ", ".join(_expr(i) for i in e.items) + "]"
    else:
        return "?"
    ty = _ty(getattr(e, "ty", None))
    return f"{text}:{ty}" if ty and isinstance(e, (N.Name, N.Call, N.Index)) else text


def _stmts(body: tuple[N.Stmt, ...], depth: int, out: list[str]) -> None:
    pad = "    " * depth
    for s in body:
        ln = f"  # line {s.loc.line}"
        if isinstance(s, N.Assign):
            decl = "let " if s.declares else ""
            out.append(f"{pad}{decl}{_expr(s.target)} = {_expr(s.value)}{ln}")
        elif isinstance(s, N.AugAssign):
            out.append(f"{pad}{_expr(s.target)} {s.op}= {_expr(s.value)}{ln}")
        elif isinstance(s, N.ExprStmt):
            out.append(f"{pad}{_expr(s.expr)}{ln}")
        elif isinstance(s, N.If):
            out.append(f"{pad}if {_expr(s.cond)}:{ln}")
            _stmts(s.then, depth + 1, out)
            if s.orelse:
                out.append(f"{pad}else:")
                _stmts(s.orelse, depth + 1, out)
        elif isinstance(s, N.While):
            out.append(f"{pad}while {_expr(s.cond)}:{ln}")
            _stmts(s.body, depth + 1, out)
        elif isinstance(s, N.For):
            vt = f":{s.var_ty}" if s.var_ty else ""
            out.append(f"{pad}for {s.var}{vt} in {_expr(s.iter)}:{ln}")
            _stmts(s.body, depth + 1, out)
        elif isinstance(s, N.Return):
            out.append(f"{pad}return{' ' + _expr(s.value) if s.value else ''}{ln}")
        else:
            out.append(f"{pad}{type(s).__name__.lower()}{ln}")


def dump_module(m: N.Module) -> str:
    out: list[str] = [f"module {m.path}"]
    for item in m.items:
        if isinstance(item, N.ConstDef):
            out.append(f"const {item.name} = {item.folded if item.folded is not None else _expr(item.value)}")
        elif isinstance(item, N.TableDef):
            out.append(f"const {item.name}: {item.elem}{list(item.shape)} = {list(item.folded)}")
        elif isinstance(item, N.FuncDef):
            head = f"{item.kind or 'function'} {item.name}"
            if item.config:
                head += f" tile{item.config.tile}"
                if item.config.shared_budget:
                    head += f" shared({item.config.shared_budget})"
            params = [f"{p.name}: {'const ' if p.qual == 'const' else ''}{_ty(p.ty)}" if p.ty is not None else p.name
                      for p in item.params]
            rets = f" -> ({', '.join(item.rets)})" if item.rets else ""
            out.append(f"{head}({', '.join(params)}){' -> ' + item.ret if item.ret else rets}:")
            for k, v in item.const_values:
                out.append(f"    const {k} = {v!r}")
            _stmts(item.body, 1, out)
    return "\n".join(out) + "\n"
