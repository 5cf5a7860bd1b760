"""The committed LALR tables (tessera/parse_tables.py) and the start-up path of `tesserac`: the
tables are what the generator writes now, a parser loaded from them gives the same trees and the
same syntax errors as one built from the grammar, and the compiler path does not import NumPy."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from tessera import parse_tables, parser
from tessera.errors import CompileError, SourceFile
from tessera.parse_tables_gen import TABLES_PATH, grammar_key, tables_source

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "*.tsr")))


def test_committed_tables_are_current():
    with open(TABLES_PATH, encoding="utf-8") as f:
        committed = f.read()
    assert committed == tables_source(), "run `python -m tessera.parse_tables_gen` and commit the result"


def test_tables_are_used_only_for_their_grammar():
    assert grammar_key(parser.grammar_text()) == parse_tables.GRAMMAR_SHA256
    parser._parser.cache_clear()
    try:
        assert parser._parser().source_path == "<deserialized>"  # loaded from the tables, not built
    finally:
        parser._parser.cache_clear()


def _outcome(text: str) -> object:
    try:
        return parser.parse(SourceFile("t.tsr", text))
    except CompileError as e:
        return [(d.message, d.loc) for d in e.diagnostics]


def test_tables_parse_as_the_grammar_does(monkeypatch):
    # Every sample whole, and cut short at many points (syntax errors from many parser states).
    texts = []
    for path in SAMPLES:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        texts.append(text)
        texts.extend(text[:cut] for cut in range(40, len(text), 211))
    from_tables = [_outcome(t) for t in texts]
    built = parser.build_parser(parser.grammar_text())
    monkeypatch.setattr(parser, "_parser", lambda: built)
    assert [_outcome(t) for t in texts] == from_tables
    assert sum(isinstance(o, list) for o in from_tables) > 20  # the cuts did reach the error paths


@pytest.mark.parametrize("sample", ["matmul.tsr", "softmax.tsr"])
def test_tesserac_does_not_import_numpy(sample, tmp_path):
    code = ("import sys\nfrom tessera.cli import run\n"
            f"rc = run([{os.path.join(ROOT, 'samples', sample)!r}, '--emit', 'cuda', '-o', {str(tmp_path / 'o.cu')!r}])\n"
            "print(rc, 'numpy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "False"]
    assert (tmp_path / "o.cu").read_text().startswith("//")
