"""Lark's contextual lexer, asking one scanner for all terminals first, and building a state's
own scanner only when that one is needed.

Lark's contextual lexer keeps a scanner per set of terminals the LALR parser accepts in a state,
each a regular expression compiled on first use: a first parse compiled 31 of them for the
sum_reduce sample (with their keyword checks, 15 ms of a cold `tessera.load`). This lexer asks
the root scanner (every terminal, compiled once) first and keeps its token when the parser
accepts that terminal here; otherwise it rewinds and asks the state's own scanner, as Lark's
lexer would have. The tokens are the same:

- Lark orders a scanner's terminals by the same key whatever the state (priority, then length,
  then name), and a scanner returns its first terminal that matches. If the root's first match
  W is accepted in the state, every terminal before W failed to match, those of the state
  included, so the state's scanner returns W too, with the same text.
- A name that spells a keyword becomes the keyword's terminal in both only where the keyword is
  a terminal of the scanner: the root turns `for` into FOR everywhere, which a state that takes a
  name but not FOR does not accept, so that state's scanner reads it (a NAME, as before).
- Ignored text (spaces, line continuations) is the same in every scanner (Lark adds the ignored
  terminals and the post-lexer's newline terminals to each state's set).

Lark's `ContextualLexer.__init__` also makes the lexer of every state's set of terminals up front
(85 sets for this grammar: about 1.3 ms of each process's first `_parser()`, 6.1 ms instead of
4.9). Here a state's lexer is made on the state's first fallback (one for the sum_reduce sample),
the lexer Lark would have made: the same terminals (Lark sorts them, whatever their order) and
configuration, whose `skip_validation` Lark sets when it loads tables, so making it later checks
nothing and raises nothing that Lark's would have raised earlier. States whose sets differ only in
ignored or post-lexer terminals, which Lark adds to every state's, share one. Parses on several
threads share the lexer: two may make the same state's lexer at once, and one of the two,
complete, is kept.

Lark's version is pinned by `tessera.frontend.parse_tables` (the tables are used only with the Lark they
were made by, and so is this lexer); `tests/frontend/test_root_first_lexer.py` compares the tokens with
Lark's own lexer on every sample and test program, errors included.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from copy import copy
from typing import Any

from lark import Token
from lark.common import LexerConf
from lark.exceptions import UnexpectedCharacters, UnexpectedToken
from lark.lexer import BasicLexer, ContextualLexer


class RootFirstLexer(ContextualLexer):
    """`ContextualLexer` with the root scanner tried first and the states' lexers made on first
    use (see the module docstring); given to Lark as its `ContextualLexer` plugin."""

    def __init__(self, conf: LexerConf, states: dict[int, Collection[str]], always_accept: Collection[str] = ()) -> None:
        # Not ContextualLexer.__init__, which makes every state's lexer now.
        self._conf = copy(conf)
        self._conf.terminals = list(conf.terminals)
        self.root_lexer = BasicLexer(self._conf)
        # What each state accepts: its terminals (with the ignored and the post-lexer's), and the
        # rules it goes to, which no token is named after. Equal sets are one object, the key of
        # the lexer made for them.
        extra = frozenset(conf.ignore).union(always_accept)
        shared: dict[frozenset[str], frozenset[str]] = {}
        self.accepts: dict[int, frozenset[str]] = {}
        for state, names in states.items():
            accepts = extra.union(names)
            self.accepts[state] = shared.setdefault(accepts, accepts)
        self.state_lexers: dict[frozenset[str], BasicLexer] = {}

    def _state_lexer(self, accepts: frozenset[str]) -> BasicLexer:
        """The lexer of the states that accept `accepts`, made on first use: inserted complete, so
        that a parse on another thread sees it whole or not at all."""
        lexer = self.state_lexers.get(accepts)
        if lexer is None:
            conf = copy(self._conf)
            by_name = conf.terminals_by_name
            conf.terminals = [by_name[name] for name in accepts if name in by_name]
            lexer = self.state_lexers.setdefault(accepts, BasicLexer(conf))
        return lexer

    def lex(self, lexer_state: Any, parser_state: Any) -> Iterator[Token]:
        root = self.root_lexer
        try:
            while True:
                accepts = self.accepts[parser_state.position]
                ctr = lexer_state.line_ctr
                saved = (ctr.char_pos, ctr.line, ctr.column, ctr.line_start_pos, lexer_state.last_token)
                try:
                    token = root.next_token(lexer_state, parser_state)
                    if token.type in accepts:
                        yield token
                        continue
                except UnexpectedCharacters:
                    pass
                ctr.char_pos, ctr.line, ctr.column, ctr.line_start_pos, lexer_state.last_token = saved
                yield self._state_lexer(accepts).next_token(lexer_state, parser_state)
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
