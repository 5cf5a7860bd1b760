"""Parse time grows linearly with long left-associative chains (docs/language.md, "Limits": compile
time stays proportional to the size of the input). Building a chain of `and`/`or` located each new
node by walking down to the chain's leftmost token, so 20,000 `and` terms took 224 s to reach their
"nested too deeply" error; now a boolean operator's or a conditional's node is located at its start
when built, and the walk stops there."""

from __future__ import annotations

import contextlib
import time

import pytest

from tessera.base.errors import CompileError, SourceFile
from tessera.frontend.parser import parse

HEAD = "@kernel tile[(64,)]\ndef k(x: f32[n], o: mut f32[n]):\n"


def _parse_seconds(text: str) -> float:
    start = time.perf_counter()
    with contextlib.suppress(CompileError):  # a chain this deep may be refused; the parse is what is timed
        parse(SourceFile("chain.tsr", text))
    return time.perf_counter() - start


@pytest.mark.parametrize("joint, term", [(" and ", "x[0] > 0.0"), (" or ", "x[0] > 0.0"),
                                         (" if x[0] > 0.0 else ", "1.0")])
def test_long_chains_parse_in_linear_time(joint: str, term: str) -> None:
    def text(n: int) -> str:
        return HEAD + "    b = " + joint.join([term] * n) + "\n"

    _parse_seconds(text(10))  # the parser's tables load once
    small = min(_parse_seconds(text(500)) for _ in range(3))
    large = _parse_seconds(text(8000))
    # 16 times the terms: linear is ~16x; the quadratic walk was over 100x.
    assert large < 48 * small + 0.5, (small, large)
