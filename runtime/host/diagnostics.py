"""A failed CPU-backend compile reported in terms of the `.tsr` program: each error the C++
compiler gives for an emitted line of ``kernel.cu`` becomes a diagnostic at the `.tsr` line
named by that line's ``// line N`` comment, instead of a dump of the compiler's output."""

from __future__ import annotations

import re

from tessera.base.errors import CompileError, Diagnostic, Loc

_ERROR = re.compile(r"^kernel\.cu:(\d+):(?:\d+:)? (?:fatal )?error: (.*)$")
_ANY_ERROR = re.compile(r"^[^:\n]+:\d+:(?:\d+:)? (?:fatal )?error: .*$")
_BUILD_DIR = re.compile(r"^\S*/(kernel\.cu|wrapper\.cpp):", re.M)
_TSR_LINE = re.compile(r"// line (\d+)\b")
_MAX_LINES = 10


def _tsr_line(cuda_lines: list[str], cu_line: int) -> int | None:
    if 1 <= cu_line <= len(cuda_lines):
        m = _TSR_LINE.search(cuda_lines[cu_line - 1])
        if m:
            return int(m.group(1))
    return None


def compile_failure(output: str, cuda_source: str) -> CompileError:
    """The CompileError for compiler `output` (stdout and stderr) on `cuda_source`.

    Errors on emitted lines that carry a ``// line N`` comment become located diagnostics
    (without a source: the caller attaches the `.tsr` file); if there are none, the error
    lines alone (no notes, no include traces) make up the text.
    """
    output = _BUILD_DIR.sub(r"\1:", output)  # the temporary build folder means nothing to the user
    cuda_lines = cuda_source.split("\n")
    diags: list[Diagnostic] = []
    for line in output.splitlines():
        m = _ERROR.match(line)
        if not m:
            continue
        tsr = _tsr_line(cuda_lines, int(m.group(1)))
        if tsr is None:
            continue
        d = Diagnostic(f"the C++ compiler rejected the code emitted for this line: {m.group(2)}", Loc(tsr, 1))
        if d not in diags:
            diags.append(d)
    if diags:
        return CompileError(diags[:_MAX_LINES])
    errors = [ln for ln in output.splitlines() if _ANY_ERROR.match(ln)][:_MAX_LINES] or output.splitlines()[:_MAX_LINES]
    return CompileError([], text="host C++ compilation failed:\n" + "\n".join(errors))
