"""Parsing: source text to the IR of `tessera.nodes`.

Owns the Lark parser (LALR with an indentation post-lexer), the translation of
Lark's exceptions into located diagnostics, and the transformer that builds nodes.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Iterator

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError
from lark.indenter import Indenter

from tessera import nodes as N
from tessera.errors import CompileError, Diagnostic, Loc, SourceFile

KEYWORDS = frozenset(["def", "const", "mut", "if", "elif", "else", "while", "for", "in", "break", "continue", "return", "pass", "and", "or", "not", "True", "False"])


class _LexError(Exception):
    """A located error found while lexing (indentation, string escapes)."""

    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


class TsrIndenter(Indenter):
    NL_type = "_NL"
    OPEN_PAREN_types = ["LPAR", "LSQB"]
    CLOSE_PAREN_types = ["RPAR", "RSQB"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8

    open_brackets: list[Token]
    keyword_names: list[Token]

    def process(self, stream):
        self.open_brackets = []
        self.keyword_names = []
        return super().process(stream)

    def _process(self, stream):
        # As Lark's, but remembering the open brackets (for "'(' was never closed") and the
        # keywords the contextual lexer took as names (for "unexpected keyword 'else'").
        for token in super()._process(stream):
            if token.type == "NAME" and str(token) in KEYWORDS:
                self.keyword_names.append(token)
            yield token
            if token.type in self.OPEN_PAREN_types:
                self.open_brackets.append(token)
            elif token.type in self.CLOSE_PAREN_types and self.open_brackets:
                self.open_brackets.pop()

    def handle_NL(self, token: Token) -> Iterator[Token]:
        if self.paren_level > 0:
            return
        yield token
        indent_str = token.rsplit("\n", 1)[1]
        line = (token.end_line or token.line or 1)
        if "\t" in indent_str:
            raise _LexError(Loc(line, indent_str.index("\t") + 1),
                               "tab in indentation; indent with spaces")
        indent = len(indent_str.replace("\f", ""))
        if indent > self.indent_level[-1]:
            self.indent_level.append(indent)
            # Located at the first character of the indented line, not at the newline before it.
            yield Token(self.INDENT_type, indent_str, start_pos=token.end_pos, line=line,
                        column=len(indent_str) + 1, end_line=line, end_column=len(indent_str) + 1,
                        end_pos=token.end_pos)
        else:
            while indent < self.indent_level[-1]:
                self.indent_level.pop()
                yield Token.new_borrow_pos(self.DEDENT_type, indent_str, token)
            if indent != self.indent_level[-1]:
                raise _LexError(Loc(line, indent + 1),
                                   "unindent does not match any outer indentation level")


@functools.lru_cache(maxsize=1)
def _parser() -> Lark:
    grammar = importlib.resources.files("tessera.grammar").joinpath("tsr.lark").read_text("utf-8")
    return Lark(grammar, parser="lalr", postlex=TsrIndenter(), propagate_positions=True,
                maybe_placeholders=True, cache=False)


_TOKEN_WORDS = {
    "_NL": "end of line", "_INDENT": "indent", "_DEDENT": "dedent", "$END": "end of file",
    "NAME": "name", "INT": "integer", "FLOAT": "float literal", "SIZE": "size literal",
    "STRING": "string", "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'",
    "COLON": "':'", "COMMA": "','", "EQUAL": "'='", "DOT": "'.'", "AT": "'@'", "RARROW": "'->'",
    "BITOR": "'|'", "BITXOR": "'^'", "BITAND": "'&'", "SHIFTOP": "'<<' or '>>'", "ADDOP": "'+' or '-'",
    "MULOP": "'*', '/', '//' or '%'", "COMPOP": "a comparison", "AUGOP": "an augmented assignment",
    "UNOP": "'-', '+' or '~'",
}


def _describe(tok: Token) -> str:
    if tok.type in ("_NL",):
        return "end of line"
    if tok.type == "$END":
        return "end of file"
    if tok.type in ("_INDENT", "_DEDENT"):
        return "unexpected indentation" if tok.type == "_INDENT" else "dedent"
    text = str(tok)
    if len(text) > 30:
        text = text[:27] + "..."
    return repr(text) if tok.type not in ("NAME",) or text not in KEYWORDS else f"keyword {text!r}"


def _expected(exp: set[str]) -> str:
    words = sorted({_TOKEN_WORDS.get(e, e.lower().strip("_")) if not e.startswith("__ANON") else "" for e in exp} - {""})
    if not words or len(words) > 8:
        return ""
    return "; expected " + ", ".join(words)


def _syntax_error(err: UnexpectedInput, src: SourceFile) -> Diagnostic:
    if isinstance(err, UnexpectedCharacters):
        ch = src.text[err.pos_in_stream] if err.pos_in_stream < len(src.text) else "?"
        if ch == "\t":
            msg = "unexpected tab"
        elif ch.isprintable():
            msg = f"unexpected character {ch!r}"
        else:
            msg = f"unexpected character U+{ord(ch):04X}"
        return Diagnostic(msg, Loc(err.line, err.column))
    if isinstance(err, UnexpectedToken):
        tok = err.token
        line = tok.line or src.text.count("\n") + 1
        col = tok.column or 1
        # What the parser accepts here (err.expected is only what the contextual lexer tried).
        try:
            expected = set(err.accepts or ()) or set(err.expected)
        except Exception:  # noqa: BLE001 - a better message is not worth a crash
            expected = set(err.expected)
        opened = _unclosed_bracket(tok, src)
        if opened is not None:
            return Diagnostic(f"'{opened}' was never closed", Loc(opened.line, opened.column))
        kw = _keyword_before(tok)
        if kw is not None:
            return Diagnostic(f"unexpected keyword '{kw}'", Loc(kw.line, kw.column))
        if tok.type == "_INDENT":
            return Diagnostic("unexpected indent", Loc(line, col))
        if expected == {"_INDENT"}:
            # After 'if c:' and a newline, the suite's first line is not indented.
            lno = tok.line if tok.type not in ("_NL", "$END", "_DEDENT") else tok.end_line or tok.line
            lno = lno or len(src.lines) + 1
            if tok.type in ("_NL", "_DEDENT"):
                col = len(str(tok).rsplit("\n", 1)[-1]) + 1
            if lno > len(src.lines) or tok.type == "$END":  # the file ends after the ':'
                lno = max(1, len(src.lines))
                col = len(src.line(lno)) + 1
            return Diagnostic("expected an indented block", Loc(lno, col))
        if tok.type == "_NL" or tok.type == "$END":
            # Point at the end of the line that is unfinished.
            lno = tok.line or len(src.lines)
            text = src.line(lno)
            stripped = text.split("#", 1)[0].rstrip()
            return Diagnostic(f"unexpected end of line{_expected(expected)}", Loc(lno, len(stripped) + 1))
        if str(tok) in KEYWORDS and tok.type in ("NAME", str(tok).upper()):
            return Diagnostic(f"unexpected keyword {str(tok)!r}{_expected(expected)}", Loc(line, col))
        return Diagnostic(f"unexpected {_describe(tok)}{_expected(expected)}", Loc(line, col))
    if isinstance(err, UnexpectedEOF):
        n = max(1, len(src.lines))
        return Diagnostic("unexpected end of file", Loc(n, len(src.line(n)) + 1))
    return Diagnostic(f"syntax error: {err}", Loc(getattr(err, "line", 1) or 1, getattr(err, "column", 1) or 1))


def _unclosed_bracket(tok: Token, src: SourceFile) -> Token | None:
    """The innermost open bracket when the parser stopped at the start of a later line (or at the
    end of the file): then the likely mistake is the bracket that was never closed."""
    opened = getattr(_parser().options.postlex, "open_brackets", None)
    if not opened:
        return None
    last = opened[-1]
    if tok.type in ("$END", "_DEDENT"):  # inside brackets, dedents come only at the end of the file
        return last
    if not tok.line or tok.line <= (last.line or 0):
        return None
    before = src.line(tok.line)[: max(0, (tok.column or 1) - 1)]
    return last if before.strip() == "" else None


def _keyword_before(tok: Token) -> Token | None:
    """A keyword taken as a name earlier on the line where the parser stopped (`else:` where no
    'if' is open reads as the start of `else: TYPE = value`)."""
    names = getattr(_parser().options.postlex, "keyword_names", None) or []
    line, col = tok.line or 0, tok.column or 0
    for kw in names:
        if kw.line == line and (kw.column or 0) < col:
            return kw
    return None


def decode_source(data: bytes, path: str) -> SourceFile:
    """Decode UTF-8 source bytes; a bad byte or a NUL is a located error."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        before = data[: e.start]
        line = before.count(b"\n") + 1
        col = len(before.rsplit(b"\n", 1)[-1].decode("utf-8", "replace")) + 1
        src = SourceFile(path, data.decode("utf-8", "replace"))
        raise CompileError([Diagnostic("source is not valid UTF-8", Loc(line, col))], src) from None
    if text.startswith("\ufeff"):  # a UTF-8 byte order mark is not part of the program
        text = text[1:]
    src = SourceFile(path, text)
    if "\x00" in text:
        pos = text.index("\x00")
        line = text.count("\n", 0, pos) + 1
        col = pos - (text.rfind("\n", 0, pos) + 1) + 1
        raise CompileError([Diagnostic("NUL character in source", Loc(line, col))], src)
    return src


def _keyword_names(tree: Tree) -> list[Diagnostic]:
    """Keywords the contextual lexer took as names where only a name fits (`def = 3`)."""
    found = tree.scan_values(lambda v: isinstance(v, Token) and v.type == "NAME" and str(v) in KEYWORDS)
    return [Diagnostic(f"'{t}' is a keyword and cannot be used as a name", Loc(t.line or 1, t.column or 1))
            for t in sorted(found, key=lambda t: (t.line or 0, t.column or 0))]


def parse(src: SourceFile) -> N.Module:
    text = src.text if src.text.endswith("\n") else src.text + "\n"
    try:
        tree = _parser().parse(text)
        bad = _keyword_names(tree)
        if bad:
            raise CompileError(bad, src)
        return _Build(src.path).transform(tree)
    except _LexError as e:
        raise CompileError([Diagnostic(e.message, e.loc)], src) from None
    except UnexpectedInput as e:
        raise CompileError([_syntax_error(e, src)], src) from None
    except VisitError as e:
        if isinstance(e.orig_exc, _LexError):
            raise CompileError([Diagnostic(e.orig_exc.message, e.orig_exc.loc)], src) from None
        if isinstance(e.orig_exc, RecursionError):
            raise CompileError([too_deep(src)], src) from None
        raise


def too_deep(src: SourceFile) -> Diagnostic:
    """'program is nested too deeply', at the most deeply nested line (indentation or brackets)."""
    best, where = -1, Loc(1, 1)
    depth = 0  # open brackets
    for n, text in enumerate(src.lines, 1):
        code = text.split("#", 1)[0]
        indent = len(code) - len(code.lstrip(" "))
        if code.strip() and depth == 0 and indent > best:
            best, where = indent, Loc(n, indent + 1)
        for col, ch in enumerate(code, 1):
            if ch in "([":
                depth += 1
                if depth * 4 > best:  # one bracket counts as one indentation level
                    best, where = depth * 4, Loc(n, col)
            elif ch in ")]" and depth > 0:
                depth -= 1
    if best < 160 and src.lines:  # nothing deep in brackets or blocks: a long chain of operators
        n = max(range(len(src.lines)), key=lambda i: len(src.lines[i])) + 1
        text = src.lines[n - 1]
        where = Loc(n, len(text) - len(text.lstrip(" ")) + 1)
    return Diagnostic("program is nested too deeply", where)


def _loc(x: Tree | Token | N.Loc) -> Loc:
    if isinstance(x, Token):
        return Loc(x.line or 1, x.column or 1)
    if isinstance(x, Tree):
        return Loc(getattr(x.meta, "line", 1), getattr(x.meta, "column", 1))
    return x


def _iloc(meta) -> Loc:
    return Loc(getattr(meta, "line", 1), getattr(meta, "column", 1))


def _parse_int(text: str) -> int:
    t = text.replace("_", "")
    return int(t, 16) if t[:2].lower() == "0x" else int(t, 10)


@v_args(meta=True)
class _Build(Transformer):
    """Parse tree to IR nodes. Positions come from Lark's `meta` (1-based line and column)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    # -- module
    def start(self, meta, items):
        return N.Module(self.path, tuple(i for i in items if i is not None))

    def const_def(self, meta, c):
        return N.ConstDef(_iloc(meta), str(c[0]), c[1])

    def table_def(self, meta, c):
        name, elem, dims, values = c
        return N.TableDef(_iloc(meta), str(name), str(elem), _loc(elem), tuple(dims), values.items)

    def funcdef(self, meta, c):
        *decos, name, params, ret, suite = c
        return N.FuncDef(_loc(name), str(name), tuple(params or ()), str(ret) if ret else None,
                         _loc(ret) if ret else None, suite, tuple(decos))

    def decorator(self, meta, c):
        name, args, *clauses = c
        pos = tuple(a for a in (args or ()) if not isinstance(a, N.Keyword)) if args is not None else None
        kws = tuple(a for a in (args or ()) if isinstance(a, N.Keyword))
        return N.Decorator(_iloc(meta), str(name), pos, kws, tuple(clauses))

    def deco_args(self, meta, c):
        return tuple(c[0] or ())

    def clause_index(self, meta, c):
        name, items = c
        return N.Call(_loc(name), N.Name(_loc(name), str(name)), (N.TupleLit(_iloc(meta), tuple(items)),))

    def clause_call(self, meta, c):
        name, args = c
        return self._call(_loc(name), N.Name(_loc(name), str(name)), args)

    def params(self, meta, c):
        return tuple(p for p in c if p is not None)

    def param(self, meta, c):
        name, qual, tname, dims, default = c
        return N.Param(_loc(name), str(name), qual or "", str(tname), _loc(tname),
                       tuple(dims) if dims is not None else None, default)

    def dims(self, meta, c):
        return c[0]

    def qual_mut(self, meta, c):
        return "mut"

    def qual_const(self, meta, c):
        return "const"

    # -- statements
    def suite(self, meta, c):
        out: list[N.Stmt] = []
        for s in c:
            out.extend(s if isinstance(s, tuple) else (s,))
        return tuple(out)

    def simple_stmt(self, meta, c):
        return c[0]

    def assign(self, meta, c):
        return N.Assign(_iloc(meta), c[0], c[1])

    def ann_assign(self, meta, c):
        name, tname, value = c
        return N.Assign(_iloc(meta), N.Name(_loc(name), str(name)), value, str(tname), _loc(tname))

    def aug_assign(self, meta, c):
        target, op, value = c
        return N.AugAssign(_loc(op), target, str(op)[:-1], value)

    def expr_stmt(self, meta, c):
        return N.ExprStmt(_iloc(meta), c[0])

    def pass_stmt(self, meta, c):
        return N.Pass(_iloc(meta))

    def break_stmt(self, meta, c):
        return N.Break(_iloc(meta))

    def continue_stmt(self, meta, c):
        return N.Continue(_iloc(meta))

    def return_stmt(self, meta, c):
        return N.Return(_iloc(meta), c[0])

    def if_stmt(self, meta, c):
        cond, then, *rest = c
        orelse: tuple = rest[-1] if rest and rest[-1] is not None else ()
        for el in reversed([r for r in rest[:-1]]):
            orelse = (N.If(el[0], el[1], el[2], orelse),)
        return N.If(_iloc(meta), cond, then, orelse)

    def elif_clause(self, meta, c):
        return (_iloc(meta), c[0], c[1])

    def else_clause(self, meta, c):
        return c[0]

    def while_stmt(self, meta, c):
        return N.While(_iloc(meta), c[0], c[1])

    def for_stmt(self, meta, c):
        var, it, body = c
        return N.For(_iloc(meta), str(var), it, body)

    # -- expressions
    def ternary(self, meta, c):
        return N.Ternary(_iloc(meta), c[1], c[0], c[2])

    def or_op(self, meta, c):
        return N.BoolOp(_iloc(meta), "or", c[0], c[1])

    def and_op(self, meta, c):
        return N.BoolOp(_iloc(meta), "and", c[0], c[1])

    def not_op(self, meta, c):
        return N.Unary(_iloc(meta), "not", c[0])

    def compare(self, meta, c):
        operands = tuple(c[0::2])
        ops = tuple(str(t) for t in c[1::2])
        return N.Compare(_loc(c[1]), ops, operands)

    def _bin(self, meta, c):
        left, tok, right = c  # located at the operator
        return N.BinOp(_loc(tok), str(tok), left, right)

    binop_or = binop_xor = binop_and = binop_shift = binop_add = binop_mul = _bin

    def unary(self, meta, c):
        return N.Unary(_loc(c[0]), str(c[0]), c[1])

    def _call(self, loc, func, args):
        args = tuple(args or ())
        pos = tuple(a for a in args if not isinstance(a, N.Keyword))
        kws = tuple(a for a in args if isinstance(a, N.Keyword))
        return N.Call(loc, func, pos, kws)

    def call(self, meta, c):
        func, args = c
        return self._call(getattr(func, "loc", _iloc(meta)), func, args)

    def arglist(self, meta, c):
        seen_kw = False
        for a in c:
            if isinstance(a, N.Keyword):
                seen_kw = True
            elif seen_kw:
                raise _LexError(a.loc, "positional argument follows keyword argument")
        return tuple(c)

    def kwarg(self, meta, c):
        return N.Keyword(_loc(c[0]), str(c[0]), c[1])

    def index(self, meta, c):
        base, subs = c
        return N.Index(base.loc, base, tuple(subs))

    def subscripts(self, meta, c):
        return tuple(s for s in c if s is not None)

    def slice(self, meta, c):
        return N.Slice(_iloc(meta), c[0], c[1])

    def attr(self, meta, c):
        return N.Attr(c[0].loc, c[0], str(c[1]))

    def name(self, meta, c):
        return N.Name(_loc(c[0]), str(c[0]))

    def int_lit(self, meta, c):
        return N.IntLit(_loc(c[0]), _parse_int(str(c[0])))

    def size_lit(self, meta, c):
        text = str(c[0]).replace("_", "")
        unit = 1024 if text.endswith("KiB") else 1024 * 1024
        return N.IntLit(_loc(c[0]), int(text[:-3]) * unit)

    def float_lit(self, meta, c):
        return N.FloatLit(_loc(c[0]), float(str(c[0]).replace("_", "")))

    def str_lit(self, meta, c):
        raw = str(c[0])[1:-1]
        loc = _loc(c[0])
        return N.StrLit(loc, _unescape(raw, loc))

    def true_lit(self, meta, c):
        return N.BoolLit(_iloc(meta), True)

    def false_lit(self, meta, c):
        return N.BoolLit(_iloc(meta), False)

    def tuple_lit(self, meta, c):
        first, rest = c
        return N.TupleLit(_iloc(meta), (first, *(rest or ())))

    def list_lit(self, meta, c):
        return N.ListLit(_iloc(meta), tuple(c[0] or ()))

    def expr_list(self, meta, c):
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
                raise _LexError(Loc(loc.line, loc.col + 1 + i),
                                   f"unknown escape sequence '\\{shown}' in a string; the escapes are "
                                   "\\n, \\t, \\r, \\\" and \\\\")
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)
