"""tessera/frontend/root_first_lexer.py gives the parser exactly the tokens Lark's contextual lexer gives,
and the same errors: on every sample and test program, each cut short at many points, and every
program of the diagnostics catalog (syntax errors, keywords used as names, stray characters)."""

from __future__ import annotations

import concurrent.futures
import glob
import os
import threading
from collections.abc import Callable

import lark
import pytest
from lark import Lark, Token
from lark.exceptions import UnexpectedInput
from lark.lexer import ContextualLexer

from tessera.frontend import parse_tables, parser, root_first_lexer
from tessera.frontend.build_ir import Build, LexError
from tessera.frontend.root_first_lexer import RootFirstLexer
from tests.conftest import ROOT
from tests.transpile.checks.test_diagnostics import CATALOG

pytestmark = pytest.mark.skipif(lark.__version__ != parse_tables.LARK_VERSION,
                                reason=f"the lexer is used with Lark {parse_tables.LARK_VERSION} only")


def _fields(t: Token) -> tuple[object, ...]:
    return (t.type, str(t), t.start_pos, t.line, t.column, t.end_pos, t.end_line, t.end_column)


def _recording(base: type[ContextualLexer], tokens: Callable[[], list[tuple[object, ...]]]) -> type[ContextualLexer]:
    """`base`, appending each token it gives to the list `tokens()` returns."""
    class Recording(base):  # type: ignore[misc, valid-type]
        def lex(self, lexer_state, parser_state):
            for t in super().lex(lexer_state, parser_state):
                tokens().append(_fields(t))
                yield t
    return Recording


def _load(lexer: type[ContextualLexer]) -> Lark:
    tables = parse_tables.TABLES
    return Lark._load_from_dict(tables["data"], tables["memo"], postlex=parser.TsrIndenter(), transformer=Build(),
                                _plugins={"ContextualLexer": lexer})


def _outcome(p: Lark, text: str) -> object:
    try:
        p.parse(text)
        return "parsed"  # the tokens decide the tree
    except (UnexpectedInput, LexError, RecursionError) as e:
        return (type(e).__name__, str(e), getattr(e, "line", None), getattr(e, "column", None),
                sorted(getattr(e, "expected", None) or ()))


_PARSERS: dict[type, tuple[Lark, list[tuple[object, ...]]]] = {}


def _run(lexer: type[ContextualLexer], text: str) -> tuple[list[tuple[object, ...]], object]:
    if lexer not in _PARSERS:
        tokens: list[tuple[object, ...]] = []
        _PARSERS[lexer] = (_load(_recording(lexer, lambda: tokens)), tokens)
    p, tokens = _PARSERS[lexer]
    tokens.clear()
    outcome = _outcome(p, text)
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
    return [text if text.endswith("\n") else text + "\n" for text in texts]


def test_same_tokens_and_errors_as_larks_lexer(covered_sample):
    texts = _texts()
    errors = 0
    for text in covered_sample(texts, 10):
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


def test_a_first_parse_makes_few_lexers():
    # What it is for: Lark's lexer makes one for each of the states' 85 sets of terminals when the
    # parser is loaded, and compiles a scanner for each state a parse meets (31 for this sample).
    with open(os.path.join(ROOT, "samples", "sum_reduce.tsr"), encoding="utf-8") as f:
        text = f.read()
    p = _load(RootFirstLexer)
    lexer = p.parser.lexer.lexer
    assert lexer.state_lexers == {}
    p.parse(text)
    assert 1 <= len(lexer.state_lexers) <= 3


def test_a_lexer_made_twice_at_once_is_kept_once(monkeypatch):
    # Two threads' first fallbacks in the same states: the one to finish second uses the first's.
    lexer = _load(RootFirstLexer).parser.lexer.lexer
    accepts = next(iter(lexer.accepts.values()))
    made, first = root_first_lexer.BasicLexer, []

    def racing(conf):
        if not first:  # the other thread makes and inserts its lexer while this one is being made
            first.append(None)
            first.append(lexer._state_lexer(accepts))
        return made(conf)

    monkeypatch.setattr(root_first_lexer, "BasicLexer", racing)
    assert lexer._state_lexer(accepts) is first[1] is lexer.state_lexers[accepts]


def test_each_states_lexer_has_the_terminals_of_larks_in_its_order():
    # Scanners try the terminals in this order: then every state's scanner is Lark's, those of the
    # states no program here reaches included.
    theirs = _load(ContextualLexer).parser.lexer.lexer
    ours = _load(RootFirstLexer).parser.lexer.lexer
    assert theirs.lexers.keys() == ours.accepts.keys()
    for state, lexer in theirs.lexers.items():
        mine = ours._state_lexer(ours.accepts[state])
        assert [t.name for t in mine.terminals] == [t.name for t in lexer.terminals], state
        assert (mine.ignore_types, mine.newline_types) == (lexer.ignore_types, lexer.newline_types), state
    assert len(ours.state_lexers) <= len({id(x) for x in theirs.lexers.values()})


def test_first_parses_on_many_threads_at_once():
    # Eight threads share one parser from its first parse on: each gets Lark's tokens and errors.
    texts = _texts()[::3]
    expected = [_run(ContextualLexer, text) for text in texts]
    local = threading.local()
    shared = _load(_recording(RootFirstLexer, lambda: local.tokens))

    def run_all(_: int) -> list[tuple[list[tuple[object, ...]], object]]:
        out = []
        for text in texts:
            local.tokens = []
            outcome = _outcome(shared, text)
            out.append((local.tokens, outcome))
        return out

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run_all, range(8)))
    assert all(r == expected for r in results)
    # The threads did make lexers: exactly those that one thread parsing the same texts makes (how
    # many depends on the corpus, which grows with the samples and the catalog).
    alone = _load(RootFirstLexer)
    for text in texts:
        _outcome(alone, text)
    made = shared.parser.lexer.lexer.state_lexers
    assert made.keys() == alone.parser.lexer.lexer.state_lexers.keys() and len(made) >= 5
