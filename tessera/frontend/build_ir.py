"""Building the IR: the Lark transformer that the parser calls as it reduces, making the nodes of
`tessera.frontend.nodes` with the source location of every node (1-based line and column of a token)."""

from __future__ import annotations

import math

from lark import Token, Transformer

from tessera.base.errors import Loc
from tessera.base.limits import MAX_STRING_CHARS, int_literal_digits, leading_zeros, max_int_digits
from tessera.frontend import nodes as N


class LexError(Exception):
    """A located error found while lexing (indentation, string escapes)."""

    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


_PREC = {"BITOR": 1, "BITXOR": 2, "BITAND": 3, "SHIFTOP": 4, "ADDOP": 5, "MULOP": 6}


def _climb(seg: list, i: int, min_prec: int = 1) -> tuple[N.Expr, int]:
    """Precedence climbing over [operand, op, operand, ...] (all operators left-associative);
    each BinOp is located at its operator. Returns the expression and the next index."""
    left = seg[i]
    i += 1
    while i < len(seg) and _PREC[seg[i].type] >= min_prec:
        tok = seg[i]
        right, i = _climb(seg, i + 1, _PREC[tok.type] + 1)
        left = N.BinOp(_loc(tok), str(tok), left, right)
    return left, i


def _loc(x: Token | Loc) -> Loc:
    if isinstance(x, Token):
        return Loc(x.line or 1, x.column or 1)
    return x


def _parse_int(text: str, loc: Loc) -> int:
    instead = leading_zeros(text)
    if instead:
        raise LexError(loc, f"leading zeros in a decimal integer literal are not allowed: {instead}")
    digits, base = int_literal_digits(text)
    if len(digits) > max_int_digits(base):
        raise LexError(loc, f"integer literal is too long: {len(digits)} digits (the limit is {max_int_digits(base)})")
    return int(digits, base)


def _start(x: object) -> Loc:
    """Where a node's source text starts: its leftmost token (an operator's node is located at
    the operator, its text starts at its left operand)."""
    while True:
        if isinstance(x, N.BoolOp | N.Ternary):
            return x.loc  # built located at its start (and_op, or_op, ternary): no walk down a long chain
        if isinstance(x, N.BinOp):
            x = x.left
        elif isinstance(x, N.Compare):
            x = x.operands[0]
        elif isinstance(x, N.Index | N.Attr):
            x = x.base
        elif isinstance(x, N.Call):
            x = x.func
        else:
            return _loc(x) if isinstance(x, Token) else x.loc  # type: ignore[attr-defined]


class Build(Transformer):
    """Parse tree to IR nodes, called by the parser as it reduces (no parse tree is built). Every
    node is located at a token (1-based line and column): the keywords and brackets that start a
    construct are named terminals in the grammar for that. No state: one instance serves every
    parse on every thread."""

    # -- module
    def start(self, items):
        return N.Module("", tuple(i for i in items if i is not None))  # the caller sets the path

    def const_def(self, c):
        kw, name, value = c
        return N.ConstDef(_loc(kw), str(name), value)

    def table_def(self, c):
        kw, name, elem, dims, values = c
        return N.TableDef(_loc(kw), str(name), str(elem), _loc(elem), tuple(dims), values.items)

    def funcdef(self, c):
        *decos, name, tparams, params, ret, suite = c
        if isinstance(ret, tuple):  # `-> (f32, i32)`: `ret` is None, the types are in `rets`
            lpar, *types = ret
            return N.FuncDef(_loc(name), str(name), tuple(params or ()), None, _loc(lpar), suite, tuple(decos),
                             rets=tuple(str(t) for t in types if t is not None),
                             rets_locs=tuple(_loc(t) for t in types if t is not None),
                             type_params=tuple(tparams or ()))
        return N.FuncDef(_loc(name), str(name), tuple(params or ()), str(ret) if ret else None,
                         _loc(ret) if ret else None, suite, tuple(decos), type_params=tuple(tparams or ()))

    def type_params(self, c):
        return tuple(c)

    def type_param(self, c):
        name, *allowed = c
        names = tuple(t for t in allowed if t is not None)
        return N.TypeParam(_loc(name), str(name), tuple(map(str, names)) if names else None,
                           tuple(_loc(t) for t in names))

    def ret_tuple(self, c):
        return tuple(c)

    def decorator(self, c):
        at, name, args, *clauses = c
        pos = tuple(a for a in (args or ()) if not isinstance(a, N.Keyword)) if args is not None else None
        kws = tuple(a for a in (args or ()) if isinstance(a, N.Keyword))
        return N.Decorator(_loc(at), str(name), pos, kws, tuple(clauses))

    def deco_args(self, c):
        return tuple(c[0] or ())

    def clause_index(self, c):
        name, items = c
        return N.Call(_loc(name), N.Name(_loc(name), str(name)), (N.TupleLit(_loc(name), tuple(items)),))

    def clause_call(self, c):
        name, args = c
        return self._call(_loc(name), N.Name(_loc(name), str(name)), args)

    def params(self, c):
        return tuple(p for p in c if p is not None)

    def param(self, c):
        name, qual, frag, tname, dims, default = c
        return N.Param(_loc(name), str(name), qual or "", str(tname), _loc(tname),
                       tuple(dims) if dims is not None else None, default, frag=frag is not None)

    def dims(self, c):
        return c[0]

    def qual_mut(self, c):
        return "mut"

    def qual_const(self, c):
        return "const"

    # -- statements
    def suite(self, c):
        out: list[N.Stmt] = []
        for s in c:
            out.extend(s if isinstance(s, tuple) else (s,))
        return tuple(out)

    def simple_stmt(self, c):
        return c[0]

    def assign(self, c):
        return N.Assign(_start(c[0]), c[0], c[1])

    def ann_assign(self, c):
        name, tname, value = c
        return N.Assign(_loc(name), N.Name(_loc(name), str(name)), value, str(tname), _loc(tname))

    def aug_assign(self, c):
        target, op, value = c
        return N.AugAssign(_loc(op), target, str(op)[:-1], value)

    def expr_stmt(self, c):
        return N.ExprStmt(_start(c[0]), c[0])

    def pass_stmt(self, c):
        return N.Pass(_loc(c[0]))

    def break_stmt(self, c):
        return N.Break(_loc(c[0]))

    def continue_stmt(self, c):
        return N.Continue(_loc(c[0]))

    def return_stmt(self, c):
        return N.Return(_loc(c[0]), c[1])

    def if_stmt(self, c):
        kw, cond, then, *rest = c
        orelse: tuple = rest[-1] if rest and rest[-1] is not None else ()
        for el in reversed([r for r in rest[:-1]]):
            orelse = (N.If(el[0], el[1], el[2], orelse),)
        return N.If(_loc(kw), cond, then, orelse)

    def elif_clause(self, c):
        return (_loc(c[0]), c[1], c[2])

    def else_clause(self, c):
        return c[0]

    def while_stmt(self, c):
        return N.While(_loc(c[0]), c[1], c[2])

    def for_stmt(self, c):
        kw, var, it, body = c
        return N.For(_loc(kw), str(var), it, body, var_loc=_loc(var))

    # -- expressions
    def ternary(self, c):
        return N.Ternary(_start(c[0]), c[1], c[0], c[2])

    def or_op(self, c):
        return N.BoolOp(_start(c[0]), "or", c[0], c[1])

    def and_op(self, c):
        return N.BoolOp(_start(c[0]), "and", c[0], c[1])

    def not_op(self, c):
        return N.Unary(_loc(c[0]), "not", c[1])

    def chain(self, c):
        """`a op b op c ...` with Python's precedence; comparisons split the chain into operands
        of one Compare (a chained comparison is reported by the checker)."""
        operands: list = [[c[0]]]
        comparisons: list[Token] = []
        for tok, x in zip(c[1::2], c[2::2]):
            if tok.type == "COMPOP":
                comparisons.append(tok)
                operands.append([x])
            else:
                operands[-1] += [tok, x]
        parts = tuple(_climb(seg, 0)[0] for seg in operands)
        if not comparisons:
            return parts[0]
        return N.Compare(_loc(comparisons[0]), tuple(str(t) for t in comparisons), parts)

    def unary(self, c):
        # `-2147483648` is one literal, the i32 minimum (as `-(2**31)` would not be: 2**31 is an i64).
        if str(c[0]) == "-" and isinstance(c[1], N.IntLit) and c[1].value > 0:
            return N.IntLit(_loc(c[0]), -c[1].value)
        return N.Unary(_loc(c[0]), str(c[0]), c[1])

    def _call(self, loc, func, args):
        args = tuple(args or ())
        pos = tuple(a for a in args if not isinstance(a, N.Keyword))
        kws = tuple(a for a in args if isinstance(a, N.Keyword))
        return N.Call(loc, func, pos, kws)

    def call(self, c):
        func, args = c
        return self._call(func.loc, func, args)

    def arglist(self, c):
        seen_kw = False
        for a in c:
            if isinstance(a, N.Keyword):
                seen_kw = True
            elif seen_kw:
                raise LexError(a.loc, "positional argument follows keyword argument")
        return tuple(c)

    def kwarg(self, c):
        return N.Keyword(_loc(c[0]), str(c[0]), c[1])

    def index(self, c):
        base, subs = c
        return N.Index(base.loc, base, tuple(subs))

    def subscripts(self, c):
        return tuple(s for s in c if s is not None)

    def slice(self, c):
        lo, colon, hi = c
        return N.Slice(_start(lo) if lo is not None else _loc(colon), lo, hi)

    def attr(self, c):
        return N.Attr(c[0].loc, c[0], str(c[1]))

    def name(self, c):
        return N.Name(_loc(c[0]), str(c[0]))

    def int_lit(self, c):
        return N.IntLit(_loc(c[0]), _parse_int(str(c[0]), _loc(c[0])))

    def size_lit(self, c):
        text = str(c[0])
        unit = 1024 if text.endswith("KiB") else 1024 * 1024
        return N.IntLit(_loc(c[0]), _parse_int(text[:-3].rstrip("_"), _loc(c[0])) * unit)

    def float_lit(self, c):
        value = float(str(c[0]).replace("_", ""))
        if math.isinf(value):  # no constant expression may start from an infinity
            raise LexError(_loc(c[0]), "float literal is too large")
        return N.FloatLit(_loc(c[0]), value)

    def str_lit(self, c):
        raw = str(c[0])[1:-1]
        loc = _loc(c[0])
        if len(raw) > MAX_STRING_CHARS:
            raise LexError(loc, f"string literal is too long: {len(raw)} characters (the limit is {MAX_STRING_CHARS})")
        return N.StrLit(loc, _unescape(raw, loc))

    def true_lit(self, c):
        return N.BoolLit(_loc(c[0]), True)

    def false_lit(self, c):
        return N.BoolLit(_loc(c[0]), False)

    def tuple_lit(self, c):
        lpar, first, rest = c
        return N.TupleLit(_loc(lpar), (first, *(rest or ())))

    def bare_tuple(self, c):
        items = tuple(x for x in c if x is not None)
        return N.TupleLit(_start(items[0]), items)

    def list_lit(self, c):
        lsqb, items = c
        return N.ListLit(_loc(lsqb), tuple(items or ()))

    def expr_list(self, c):
        return tuple(x for x in c if x is not None)


_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "r": "\r"}


def _unescape(raw: str, loc: Loc) -> str:
    out: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw):
            nxt = raw[i + 1]
            if nxt not in _ESCAPES:
                # A string never spans lines: the escape is on the literal's line, after its quote.
                shown = repr(nxt)[1:-1] if nxt.isprintable() else f"U+{ord(nxt):04X}"
                raise LexError(Loc(loc.line, loc.col + 1 + i),
                                   f"unknown escape sequence '\\{shown}' in a string; the escapes are "
                                   "\\n, \\t, \\r, \\\" and \\\\")
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)
