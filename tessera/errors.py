"""Errors and diagnostics: one located diagnostic type and one renderer.

Every problem in a user's program becomes a `Diagnostic` with a `Loc`; the
renderer prints ``path:line:col: error: message``, the source line with a
gutter, and a caret under the column, then any notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class Loc:
    """A 1-based source position (line, column)."""

    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        return f"{self.line}:{self.col}"



@dataclass(frozen=True)
class Note:
    message: str
    loc: Loc | None = None


@dataclass(frozen=True)
class Diagnostic:
    message: str
    loc: Loc
    severity: str = "error"
    notes: tuple[Note, ...] = ()


@dataclass(frozen=True)
class SourceFile:
    """A named source text; `line(n)` returns the 1-based line n without its newline."""

    path: str
    text: str
    lines: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Lines end at "\n" only, as the lexer counts them (str.splitlines would also split at
        # "\r", "\f", "\x1c", U+2028 and others, and then show the wrong line under a diagnostic).
        lines = self.text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        object.__setattr__(self, "lines", tuple(ln[:-1] if ln.endswith("\r") else ln for ln in lines))

    def line(self, n: int) -> str:
        return self.lines[n - 1] if 1 <= n <= len(self.lines) else ""


def _printable(line: str) -> str:
    # Control characters in hostile input must not garble the terminal.
    return "".join(ch if ch.isprintable() or ch == " " else "?" for ch in line)


def render_one(d: Diagnostic, src: SourceFile | None) -> str:
    path = src.path if src else "<input>"
    out = [f"{path}:{d.loc.line}:{d.loc.col}: {d.severity}: {d.message}"]
    if src and d.loc.line >= 1:
        text = _printable(src.line(d.loc.line).replace("\t", " "))
        gutter = f"{d.loc.line:>4} | "
        out.append(gutter + text)
        caret_col = max(1, min(d.loc.col, len(text) + 1))
        out.append(" " * (len(gutter) - 2) + "| " + " " * (caret_col - 1) + "^")
    for note in d.notes:
        if note.loc is not None:
            out.append(f"{path}:{note.loc.line}:{note.loc.col}: note: {note.message}")
        else:
            out.append(f"      = note: {note.message}")
    return "\n".join(out)


def render(diags: tuple[Diagnostic, ...] | list[Diagnostic], src: SourceFile | None) -> str:
    return "\n".join(render_one(d, src) for d in diags)


class TesseraError(Exception):
    """Base class of every error Tessera raises on purpose."""


class CompileError(TesseraError):
    """A program (or the CUDA C emitted from it) did not compile; carries the diagnostics."""

    def __init__(self, diagnostics: tuple[Diagnostic, ...] | list[Diagnostic],
                 source: SourceFile | None = None, text: str | None = None) -> None:
        self.diagnostics = tuple(diagnostics)
        self.source = source
        self.text = text if text is not None else render(self.diagnostics, source)
        super().__init__(self.text)


class LaunchError(TesseraError):
    """A kernel launch was refused (bad arguments) or failed while running."""


class InternalCompilerError(TesseraError):
    """A bug in Tessera itself, never the user's fault."""


class DiagnosticSink:
    """Collects diagnostics so that several independent errors are reported in one run."""

    def __init__(self, source: SourceFile) -> None:
        self.source = source
        self.items: list[Diagnostic] = []

    def error(self, loc: Loc, message: str, *notes: Note) -> None:
        d = Diagnostic(message, loc, "error", tuple(notes))
        if d not in self.items:
            self.items.append(d)

    @property
    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.items)

    def raise_if_errors(self) -> None:
        if self.has_errors:
            ordered = sorted(self.items, key=lambda d: (d.loc.line, d.loc.col))
            raise CompileError(ordered, self.source)
