"""Errors and diagnostics: one located diagnostic type and one renderer.

Every problem in a user's program becomes a `Diagnostic` with a `Loc`; the
renderer prints ``path:line:col: error: message``, the source line with a
gutter (only around the column when the line is long) and a caret under the
column, then any notes. A diagnostic at line 0 is about the whole file. The sink
keeps the first MAX_ERRORS errors of a compile and counts the rest.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tessera.base.irnode import ir_node

# Distinct errors kept and shown for one compile; the rest are counted.
MAX_ERRORS = 100


@dataclass(frozen=True, order=True)
class Loc:
    """A 1-based source position (line, column)."""

    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        return f"{self.line}:{self.col}"


@ir_node
class Note:
    message: str
    loc: Loc | None = None


@ir_node
class Diagnostic:
    message: str
    loc: Loc
    severity: str = "error"
    notes: tuple[Note, ...] = ()


@ir_node
class SourceFile:
    """A named source text; `line(n)` returns the 1-based line n without its newline."""

    path: str
    text: str

    @functools.cached_property
    def lines(self) -> tuple[str, ...]:
        # Split only when a diagnostic needs a line: a file of millions of short lines would
        # otherwise hold a string per line for the whole compile.
        # Lines end at "\n" only, as the lexer counts them (str.splitlines would also split at
        # "\r", "\f", "\x1c", U+2028 and others, and then show the wrong line under a diagnostic).
        lines = self.text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if "\r" in self.text:
            lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
        return tuple(lines)

    def line(self, n: int) -> str:
        return self.lines[n - 1] if 1 <= n <= len(self.lines) else ""


# Columns shown on each side of the caret when a source line is too long to show whole.
WINDOW = 60


def _printable(line: str) -> str:
    # Control characters in hostile input must not garble the terminal; one character for one
    # keeps the caret under its column.
    return "".join(ch if ch.isprintable() or ch == " " else "?" for ch in line.replace("\t", " "))


def source_window(line: str, col: int) -> tuple[str, int]:
    """The part of `line` shown under a diagnostic (all of it, or 2 * WINDOW characters around
    column `col` with '...' where it was cut) and the caret's 0-based position in that text."""
    caret = max(0, min(col - 1, len(line)))
    if len(line) <= 2 * WINDOW:
        return _printable(line), caret
    start = max(0, min(caret - WINDOW, len(line) - 2 * WINDOW))
    end = start + 2 * WINDOW
    head = "..." if start > 0 else ""
    tail = "..." if end < len(line) else ""
    return head + _printable(line[start:end]) + tail, caret - start + len(head)


def render_one(d: Diagnostic, src: SourceFile | None) -> str:
    path = _printable(src.path) if src else "<input>"
    where = f"{path}:{d.loc.line}:{d.loc.col}" if d.loc.line >= 1 else path  # line 0: the whole file
    out = [f"{where}: {d.severity}: {d.message}"]
    if src and d.loc.line >= 1:
        shown, caret = source_window(src.line(d.loc.line), d.loc.col)
        gutter = f"{d.loc.line:>4} | "
        out.append(gutter + shown)
        out.append(" " * (len(gutter) - 2) + "| " + " " * caret + "^")
    for note in d.notes:
        if note.loc is not None:
            out.append(f"{path}:{note.loc.line}:{note.loc.col}: note: {note.message}")
        else:
            out.append(f"      = note: {note.message}")
    return "\n".join(out)


def render(diags: tuple[Diagnostic, ...] | list[Diagnostic], src: SourceFile | None, suppressed: int = 0) -> str:
    text = "\n".join(render_one(d, src) for d in diags)
    if suppressed:
        path = _printable(src.path) if src else "<input>"
        text += (f"\n{path}: note: too many errors: {suppressed} more not shown "
                 f"(at most {MAX_ERRORS} are reported)")
    return text


class TesseraError(Exception):
    """Base class of every error Tessera raises on purpose."""


class CompileError(TesseraError):
    """A program (or the CUDA C emitted from it) did not compile; carries the diagnostics."""

    def __init__(self, diagnostics: tuple[Diagnostic, ...] | list[Diagnostic],
                 source: SourceFile | None = None, text: str | None = None, suppressed: int = 0) -> None:
        self.diagnostics = tuple(diagnostics)
        self.source = source
        self.suppressed = suppressed  # errors found beyond MAX_ERRORS, counted but not kept
        self.text = text if text is not None else render(self.diagnostics, source, suppressed)
        super().__init__(self.text)


class LaunchError(TesseraError):
    """A kernel launch was refused (bad arguments) or failed while running."""


class DistError(TesseraError):
    """The processes of a distributed job disagree (shapes, dtypes, layouts, the mesh), or a
    layout disagrees with a collective; raised on every process of the operation (`tessera.dist`)."""


class InternalCompilerError(TesseraError):
    """A bug in Tessera itself, never the user's fault."""


class DiagnosticSink:
    """Collects diagnostics so that several independent errors are reported in one run. The
    first MAX_ERRORS distinct ones are kept; later ones are only counted, as compilers do."""

    def __init__(self, source: SourceFile) -> None:
        self.source = source
        self.items: list[Diagnostic] = []
        self.suppressed = 0
        self._seen: set[Diagnostic] = set()

    def error(self, loc: Loc, message: str, *notes: Note) -> None:
        self.add(Diagnostic(message, loc, "error", tuple(notes)))

    def add(self, d: Diagnostic) -> None:
        if d in self._seen:
            return
        self._seen.add(d)
        if len(self.items) < MAX_ERRORS:
            self.items.append(d)
        else:
            self.suppressed += 1

    @property
    def full(self) -> bool:
        """No more errors will be shown (later ones are only counted)."""
        return len(self.items) >= MAX_ERRORS

    def merge(self, other: DiagnosticSink) -> None:
        """Take over what `other` collected (a scratch sink whose run turned out to be the real one)."""
        for d in other.items:
            self.add(d)
        self.suppressed += other.suppressed

    @property
    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.items)

    def raise_if_errors(self) -> None:
        if self.has_errors:
            ordered = sorted(self.items, key=lambda d: (d.loc.line, d.loc.col))
            raise CompileError(ordered, self.source, suppressed=self.suppressed)
