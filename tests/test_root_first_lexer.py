"""tessera/root_first_lexer.py gives the parser exactly the tokens Lark's contextual lexer gives,
and the same errors: on every sample and test program, each cut short at many points, and every
program of the diagnostics catalog (syntax errors, keywords used as names, stray characters)."""

from __future__ import annotations

import glob
import os

import lark
import pytest
from lark import Lark
from lark.exceptions import UnexpectedInput
from lark.lexer import ContextualLexer

from tessera import parse_tables, parser
from tessera.build_ir import Build, LexError
from tessera.root_first_lexer import RootFirstLexer
from tests.test_diagnostics import CATALOG

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(lark.__version__ != parse_tables.LARK_VERSION,
                                reason=f"the lexer is used with Lark {parse_tables.LARK_VERSION} only")


def _recording(base: type[ContextualLexer], tokens: list[tuple[object, ...]]) -> type[ContextualLexer]:
    class Recording(base):  # type: ignore[misc, valid-type]
        def lex(self, lexer_state, parser_state):
            for t in super().lex(lexer_state, parser_state):
                tokens.append((t.type, str(t), t.start_pos, t.line, t.column, t.end_pos, t.end_line, t.end_column))
                yield t
    return Recording


_PARSERS: dict[type, tuple[Lark, list[tuple[object, ...]]]] = {}


def _run(lexer: type[ContextualLexer], text: str) -> tuple[list[tuple[object, ...]], object]:
    if lexer not in _PARSERS:
        tokens: list[tuple[object, ...]] = []
        tables = parse_tables.TABLES
        _PARSERS[lexer] = (Lark._load_from_dict(tables["data"], tables["memo"], postlex=parser.TsrIndenter(),
                                                transformer=Build(),
                                                _plugins={"ContextualLexer": _recording(lexer, tokens)}), tokens)
    p, tokens = _PARSERS[lexer]
    tokens.clear()
    try:
        p.parse(text)
        outcome: object = "parsed"  # the tokens decide the tree
    except (UnexpectedInput, LexError, RecursionError) as e:
        outcome = (type(e).__name__, str(e), getattr(e, "line", None), getattr(e, "column", None),
                   sorted(getattr(e, "expected", None) or ()))
    return list(tokens), outcome


def _texts() -> list[str]:
    texts = []
    files = sorted(glob.glob(os.path.join(ROOT, "samples", "*.tsr")) + glob.glob(os.path.join(ROOT, "tests", "**", "*.tsr"),
                                                                               recursive=True))
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        texts.append(text)
        texts.extend(text[:cut] for cut in range(30, len(text), 97))
    texts += [c.source for c in CATALOG if isinstance(c.source, str)]
    return texts


def test_same_tokens_and_errors_as_larks_lexer():
    texts = _texts()
    errors = 0
    for text in texts:
        text = text if text.endswith("\n") else text + "\n"
        ours, theirs = _run(RootFirstLexer, text), _run(ContextualLexer, text)
        assert ours == theirs, text
        errors += isinstance(ours[1], tuple)
    assert len(texts) > 300 and errors > 100  # the cuts and the catalog reach the error paths


def test_keyword_spelled_name_is_read_as_a_name_where_the_keyword_is_not_accepted():
    tokens, _ = _run(RootFirstLexer, "@kernel tile[(32,)]\ndef k(if: f32):\n    pass\n")
    assert ("NAME", "if") in [t[:2] for t in tokens]


def test_the_parser_uses_it():
    parser._parser.cache_clear()
    try:
        assert isinstance(parser._parser().parser.lexer.lexer, RootFirstLexer)
    finally:
        parser._parser.cache_clear()


def test_a_first_parse_compiles_few_scanners():
    # What it is for: Lark's lexer compiles a scanner per parser state met (31 for this sample).
    with open(os.path.join(ROOT, "samples", "sum_reduce.tsr"), encoding="utf-8") as f:
        text = f.read()
    tables = parse_tables.TABLES
    p = Lark._load_from_dict(tables["data"], tables["memo"], postlex=parser.TsrIndenter(), transformer=Build(),
                             _plugins={"ContextualLexer": RootFirstLexer})
    p.parse(text)
    lexer = p.parser.lexer.lexer
    built = {id(x) for x in lexer.lexers.values() if x._scanner is not None}
    assert len(built) <= 3
