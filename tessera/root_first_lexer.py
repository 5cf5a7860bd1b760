"""Lark's contextual lexer, asking one scanner for all terminals first.

Lark's contextual lexer keeps a scanner per set of terminals the LALR parser accepts in a state,
each a regular expression compiled on first use: a first parse compiled 31 of them for the
sum_reduce sample (with their keyword checks, 15 ms of a cold `tessera.load`). This lexer asks
the root scanner (every terminal, compiled once) first and keeps its token when the parser
accepts that terminal here; otherwise it rewinds and asks the state's own scanner, as Lark's
lexer would have. The tokens are the same:

- Lark orders a scanner's terminals by the same key whatever the state (priority, then length),
  and a scanner returns its first terminal that matches. If the root's first match W is accepted
  in the state, every terminal before W failed to match, those of the state included, so the
  state's scanner returns W too, with the same text.
- A name that spells a keyword becomes the keyword's terminal in both only where the keyword is
  a terminal of the scanner: the root turns `for` into FOR everywhere, which a state that takes a
  name but not FOR does not accept, so that state's scanner reads it (a NAME, as before).
- Ignored text (spaces, line continuations) is the same in every scanner (Lark adds the ignored
  terminals and the post-lexer's newline terminals to each state's set).

Lark's version is pinned by `tessera.parse_tables` (the tables are used only with the Lark they
were made by, and so is this lexer); `tests/test_root_first_lexer.py` compares the tokens with
Lark's own lexer on every sample and test program, errors included.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from lark import Token
from lark.exceptions import UnexpectedCharacters, UnexpectedToken
from lark.lexer import BasicLexer, ContextualLexer


class RootFirstLexer(ContextualLexer):
    """`ContextualLexer` with the root scanner tried first (see the module docstring); given to
    Lark as its `ContextualLexer` plugin."""

    def lex(self, lexer_state: Any, parser_state: Any) -> Iterator[Token]:
        root = self.root_lexer
        accepted: dict[int, frozenset[str]] = {}
        try:
            while True:
                lexer = self.lexers[parser_state.position]
                names = accepted.get(id(lexer))
                if names is None:
                    names = accepted[id(lexer)] = frozenset(t.name for t in cast(BasicLexer, lexer).terminals)
                ctr = lexer_state.line_ctr
                saved = (ctr.char_pos, ctr.line, ctr.column, ctr.line_start_pos, lexer_state.last_token)
                try:
                    token = root.next_token(lexer_state, parser_state)
                    if token.type in names:
                        yield token
                        continue
                except UnexpectedCharacters:
                    pass
                ctr.char_pos, ctr.line, ctr.column, ctr.line_start_pos, lexer_state.last_token = saved
                yield lexer.next_token(lexer_state, parser_state)
        except EOFError:
            pass
        except UnexpectedCharacters as e:
            # As Lark's lexer: a terminal the grammar has but this state does not take is
            # reported as an unexpected token.
            try:
                last_token = lexer_state.last_token
                token = root.next_token(lexer_state, parser_state)
                raise UnexpectedToken(token, e.allowed, state=parser_state, token_history=[last_token],
                                      terminals_by_name=root.terminals_by_name) from None
            except UnexpectedCharacters:
                raise e from None
