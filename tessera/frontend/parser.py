"""Parsing: source text to the IR of `tessera.frontend.nodes`.

Owns the Lark parser (LALR with an indentation post-lexer), the input limits checked
before and while lexing (tessera/base/limits.py), and the translation of Lark's exceptions
into located diagnostics; `build_ir` turns the tree into nodes.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import threading
from collections.abc import Iterator
from typing import Any

import lark
from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.indenter import Indenter

from tessera.base.errors import CompileError, Diagnostic, Loc, SourceFile
from tessera.base.limits import MAX_LINE_CHARS, MAX_NAME_CHARS, MAX_SOURCE_BYTES, MAX_TOKENS, source_too_large
from tessera.base.package_dir import package_dir
from tessera.frontend import nodes as N
from tessera.frontend.build_ir import Build, LexError

KEYWORDS = frozenset(["def", "const", "mut", "if", "elif", "else", "while", "for", "in", "break", "continue", "return", "pass", "and", "or", "not", "True", "False"])


class TsrIndenter(Indenter):
    """Lark's indenter, with its per-parse state kept per thread: one parser serves every thread
    (Lark's own parse state is per call; the post-lexer is the one shared object)."""

    NL_type = "_NL"
    NL_PART_type = "_NLPART"
    OPEN_PAREN_types = ["LPAR", "LSQB"]
    CLOSE_PAREN_types = ["RPAR", "RSQB"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8
    always_accept = (NL_type, NL_PART_type)

    def __init__(self) -> None:
        self._local = threading.local()
        super().__init__()

    def _state(self, name: str) -> Any:
        return getattr(self._local, name)

    paren_level = property(lambda self: self._state("paren_level"),
                           lambda self, v: setattr(self._local, "paren_level", v))
    indent_level = property(lambda self: self._state("indent_level"),
                            lambda self, v: setattr(self._local, "indent_level", v))
    open_brackets = property(lambda self: getattr(self._local, "open_brackets", None),
                             lambda self, v: setattr(self._local, "open_brackets", v))
    keyword_names = property(lambda self: getattr(self._local, "keyword_names", None),
                             lambda self, v: setattr(self._local, "keyword_names", v))

    def process(self, stream):
        self.open_brackets = []
        self.keyword_names = []
        return super().process(_join_newlines(_within_limits(stream)))

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
            raise LexError(Loc(line, indent_str.index("\t") + 1),
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
                raise LexError(Loc(line, indent + 1),
                                   "unindent does not match any outer indentation level")


def _within_limits(stream: Iterator[Token]) -> Iterator[Token]:
    """The tokens, refusing more than MAX_TOKENS of them and names longer than MAX_NAME_CHARS."""
    for count, token in enumerate(stream, 1):
        if count > MAX_TOKENS:
            raise LexError(Loc(token.line or 1, token.column or 1),
                           f"program is too large: more than {MAX_TOKENS} tokens")
        if token.type == "NAME" and len(token) > MAX_NAME_CHARS:
            raise LexError(Loc(token.line or 1, token.column or 1),
                           f"name is too long: {len(token)} characters (the limit is {MAX_NAME_CHARS})")
        yield token


def _join_newlines(stream: Iterator[Token]) -> Iterator[Token]:
    """The stream with each run of _NLPART pieces joined to the _NL that ends it (the grammar
    splits a long run of blank lines into pieces; the indenter needs it whole)."""
    parts: list[Token] = []
    for token in stream:
        if token.type == TsrIndenter.NL_PART_type:
            parts.append(token)
            continue
        if parts and token.type == TsrIndenter.NL_type:
            first = parts[0]
            token = Token(token.type, "".join(parts) + token, start_pos=first.start_pos, line=first.line,
                          column=first.column, end_line=token.end_line, end_column=token.end_column,
                          end_pos=token.end_pos)
        elif parts:  # cannot happen (a piece matches only where more blank lines follow): a syntax error
            yield from parts
        parts = []
        yield token


def grammar_text() -> str:
    return (package_dir("tessera.grammar") / "tsr.lark").read_text("utf-8")


def grammar_key(grammar: str) -> str:
    """The SHA-256 of the grammar text, the key the committed tables are stored under (here, not
    in the generator, so that loading the tables does not import the generator)."""
    return hashlib.sha256(grammar.encode("utf-8")).hexdigest()


def build_parser(grammar: str) -> Lark:
    """The parser built from the grammar text (LALR construction: 75-120 ms)."""
    # The tree builder runs as the parser reduces: no parse tree is built and then walked.
    return Lark(grammar, parser="lalr", postlex=TsrIndenter(), maybe_placeholders=True, cache=False,
                transformer=Build())


@functools.lru_cache(maxsize=1)
def _parser() -> Lark:
    """The parser, from the committed tables (tessera/frontend/parse_tables.py) when they were generated
    from this grammar by this Lark (with the lexer of tessera/frontend/root_first_lexer.py, checked with
    that Lark), else built from the grammar."""
    from tessera.frontend import parse_tables

    grammar = grammar_text()
    if grammar_key(grammar) == parse_tables.GRAMMAR_SHA256 and lark.__version__ == parse_tables.LARK_VERSION:
        from tessera.frontend.root_first_lexer import RootFirstLexer

        tables = parse_tables.TABLES
        return Lark._load_from_dict(tables["data"], tables["memo"], postlex=TsrIndenter(), transformer=Build(),
                                    _plugins={"ContextualLexer": RootFirstLexer})
    return build_parser(grammar)


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
        pos = err.pos_in_stream or 0
        ch = src.text[pos] if pos < len(src.text) else "?"
        if ch == "\t":
            msg = "unexpected tab"
        elif ch == "'":
            rest = src.text[pos + 1:pos + 6]
            special = next((w for w in ("-inf'", "inf'", "nan'") if rest.startswith(w)), None)
            negated = src.text[:pos].rstrip().endswith("-float(")
            word = ("-" if negated else "") + (special or "")[:-1]
            msg = ("unexpected character \"'\": .tsr strings use double quotes" if special is None else
                   f"unexpected character \"'\": write {word} for {'-' if negated else ''}float('{special[:-1]}'): "
                   ".tsr has the float constants inf and nan")
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
            return Diagnostic(f"'{opened}' was never closed", Loc(opened.line or 1, opened.column or 1))
        kw = _keyword_before(tok)
        if kw is not None:
            return Diagnostic(f"unexpected keyword '{kw}'", Loc(kw.line or 1, kw.column or 1))
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


def _check_size(src: SourceFile) -> None:
    """Refuse a source over the size limit, or with a line over the length limit, before lexing."""
    if len(src.text) > MAX_SOURCE_BYTES:
        raise source_too_large(src.path)
    long_line = _LONG_LINE.search(src.text)
    if long_line is not None:
        n = src.text.count("\n", 0, long_line.start()) + 1
        end = src.text.find("\n", long_line.start())
        length = (end if end >= 0 else len(src.text)) - long_line.start()
        raise CompileError([Diagnostic(f"line is too long: {length} characters (the limit is {MAX_LINE_CHARS})",
                                       Loc(n, MAX_LINE_CHARS + 1))], src)


# Anchored at line starts, so that the search is linear (unanchored, it would rescan each long line
# from every position in it).
_LONG_LINE = re.compile(f"^[^\n]{{{MAX_LINE_CHARS + 1}}}", re.MULTILINE)


def decode_source(data: bytes, path: str) -> SourceFile:
    """Decode UTF-8 source bytes; a bad byte or a NUL is a located error."""
    if len(data) > MAX_SOURCE_BYTES:
        raise source_too_large(path)
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


def _keyword_names() -> list[Diagnostic]:
    """Keywords the contextual lexer took as names where only a name fits (`def = 3`): every token
    of a successful parse is in the program, so those the post-lexer saw are the ones."""
    found = getattr(_parser().options.postlex, "keyword_names", None) or []
    return [Diagnostic(f"'{t}' is a keyword and cannot be used as a name", Loc(t.line or 1, t.column or 1))
            for t in sorted(found, key=lambda t: (t.line or 0, t.column or 0))]


def parse(src: SourceFile) -> N.Module:
    _check_size(src)
    text = src.text if src.text.endswith("\n") else src.text + "\n"
    try:
        module = _parser().parse(text)
        bad = _keyword_names()
        if bad:
            raise CompileError(bad, src)
        assert isinstance(module, N.Module)
        return dataclasses.replace(module, path=src.path)
    except LexError as e:
        raise CompileError([Diagnostic(e.message, e.loc)], src) from None
    except UnexpectedInput as e:
        raise CompileError([_syntax_error(e, src)], src) from None


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
