"""The catalog of located errors' shared parts (tests/transpile/checks/test_diagnostics.py and the
other catalogs of malformed programs): a `Case` (a program, where its first error is, fragments of
the message and a note), `kern` to write a kernel around a body, and `check_catalog_case`, which
compiles a case with the real `tesserac` command line in-process and checks the located error, the
source line under it and the caret.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from tessera.cli.compile import run

HEAD = "@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n], m: i32):\n"


MAP_HEAD = "@kernel tile[(128,)] vectorize({w})\ndef k(x: f32[n], out: mut f32[n], m: i32):\n"


def kern(body: str, head: str = HEAD) -> str:
    """A kernel whose body (dedented, then indented by 4) starts on line 3 (with the default head)."""
    return head + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"


@dataclass(frozen=True)
class Case:
    id: str
    source: str | bytes
    line: int
    col: int
    message: str | tuple[str, ...]       # fragments of the first diagnostic's message
    args: tuple[str, ...] = ()
    note: str | None = None              # a fragment of a note under it


def _fragments(m: str | tuple[str, ...]) -> tuple[str, ...]:
    return (m,) if isinstance(m, str) else m


def write_source(tmp_path, source: str | bytes):
    path = tmp_path / "case.tsr"
    path.write_bytes(source if isinstance(source, bytes) else source.encode("utf-8"))
    return path


def _source_line(source: str | bytes, n: int) -> str:
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    lines = text.split("\n")
    line = lines[n - 1] if n - 1 < len(lines) else ""
    return "".join(ch if ch.isprintable() or ch == " " else "?" for ch in line.replace("\t", " "))


def check_catalog_case(case: Case, tmp_path, capsys) -> None:
    """Compile `case` with tesserac: exit status 1, no output, and its located error (the message's
    fragments, the note if any) with the source line and a caret under the column."""
    path = write_source(tmp_path, case.source)
    out = tmp_path / "case.cu"
    code = run([str(path), "-o", str(out), *case.args])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal compiler error" not in err, err
    assert code == 1, err
    assert not out.exists()
    lines = err.splitlines()
    first = lines[0]
    prefix = f"{path}:{case.line}:{case.col}: error: "
    assert first.startswith(prefix), f"expected {prefix!r}, got:\n{err}"
    for fragment in _fragments(case.message):
        assert fragment in first, f"{fragment!r} not in {first!r}"
    if case.note is not None:
        assert case.note in err, err
    # The source line under it (a window of it when it is long), with a gutter, then a caret under
    # the column.
    check_source_and_caret(lines[1], lines[2], case.line, case.col, _source_line(case.source, case.line), err)


def check_source_and_caret(text: str, caret: str, line: int, col: int, full: str, err: str) -> None:
    gutter = f"{line:>4} | "
    assert text.startswith(gutter), err
    shown = text[len(gutter):]
    assert caret.endswith("^") and caret.index("|") == len(gutter) - 2, err
    at = caret.index("^") - len(gutter)  # the caret's position in `shown`
    want = min(col, len(full) + 1) - 1   # ... and in the full line
    if len(full) <= 120:
        assert shown == full and at == want, err
        return
    # A long line shows 120 characters around the column, '...' marking each cut side.
    head = 3 if shown.startswith("...") else 0
    tail = 3 if shown.endswith("...") else 0
    window = shown[head:len(shown) - tail]
    start = want - (at - head)
    assert len(window) == 120 and full[start:start + 120] == window, err  # the caret is under column `col`
    assert (start > 0) == bool(head) and (start + 120 < len(full)) == bool(tail), err
