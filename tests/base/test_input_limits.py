"""Absurd inputs (tessera/base/limits.py): time and memory stay bounded by the size of the input, and
an input over a limit gets an error that names it. Before, 5 MB of blank lines took 3 GB and
34 s and a 2 MB string literal 1.5 GB, in Python's regex engine, which spent memory on every
repetition of a group in the newline and string tokens; a file such as /dev/zero was read forever.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import tessera
import tessera.frontend.parser
from tessera.base.limits import MAX_LINE_CHARS, MAX_SOURCE_BYTES
from tessera.cli.compile import run

KERNEL = "@kernel tile[(32,)]\ndef k(out: mut f32[n]):\n    out[0] = 1.0\n"

# Runs tesserac in a fresh interpreter and reports its exit status, the CPU seconds the compile took
# (CPU time, not wall time: other processes on the machine do not count) and the process's peak
# resident memory (imports included).
_MEASURE = textwrap.dedent("""
    import contextlib, io, resource, sys, time
    from tessera.cli.compile import run
    err = io.StringIO()
    t = time.process_time()
    with contextlib.redirect_stderr(err):
        status = run(sys.argv[1:])
    seconds = time.process_time() - t
    try:  # this process's own peak: ru_maxrss also counts what the parent had when it forked
        with open("/proc/self/status") as f:
            peak_mb = next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:")) / 1024
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak_mb = peak / 2**20 if sys.platform == "darwin" else peak / 1024
    print(status, seconds, peak_mb)
    print(err.getvalue()[:2000])
""")


def _measure(*argv: str) -> tuple[int, float, float, str]:
    p = subprocess.run([sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    head, _, err = p.stdout.partition("\n")
    status, seconds, peak = head.split()
    return int(status), float(seconds), float(peak), err


def test_megabytes_of_blank_lines_take_bounded_time_and_memory(tmp_path) -> None:
    path = tmp_path / "blank.tsr"
    # 3.5 MB, just under the size limit: blank lines, indented blank lines and comment lines
    path.write_text("\n" * 3_000_000 + "   \n# c\n" * 100_000 + KERNEL)
    status, seconds, peak, err = _measure(str(path), "-o", str(tmp_path / "blank.cu"))
    assert status == 0, err
    assert seconds < 10 and peak < 300, (seconds, peak)
    assert "__global__" in (tmp_path / "blank.cu").read_text()


def test_a_megabyte_string_literal_takes_bounded_time_and_memory(tmp_path) -> None:
    path = tmp_path / "s.tsr"
    # escapes are the worst case for the string token; the line stays under the line limit
    path.write_text(KERNEL + '    tprint("' + "\\n" * 500_000 + '")\n')
    status, seconds, peak, err = _measure(str(path), "-o", str(tmp_path / "s.cu"))
    assert status == 1
    assert err.startswith(f"{path}:4:12: error: string literal is too long: 1000000 characters (the limit is 65536)")
    assert seconds < 10 and peak < 300, (seconds, peak)


def test_a_source_over_the_size_limit_is_refused(tmp_path, capsys) -> None:
    path = tmp_path / "big.tsr"
    path.write_text("\n" * 5_000_000 + KERNEL)
    assert run([str(path), "-o", str(tmp_path / "big.cu")]) == 1
    err = capsys.readouterr().err
    assert err == f"{path}: error: source file is too large: the limit is {MAX_SOURCE_BYTES} bytes (4 MiB)\n"


def test_an_endless_input_is_read_only_up_to_the_limit(tmp_path) -> None:
    p = subprocess.run([sys.executable, "-m", "tessera", "/dev/zero", "-o", str(tmp_path / "z.cu")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert p.stderr.startswith("/dev/zero: error: source file is too large")


def test_the_python_interface_has_the_same_limits() -> None:
    with pytest.raises(tessera.CompileError, match="source file is too large"):
        tessera.load("/dev/zero", backend="cpu")
    with pytest.raises(tessera.CompileError, match="source file is too large"):
        tessera.compile("#" * (MAX_SOURCE_BYTES + 1), backend="cpu")


def test_a_line_over_the_length_limit_is_refused_and_shown_in_part(tmp_path, capsys) -> None:
    path = tmp_path / "long.tsr"
    path.write_text(KERNEL + "# " + "x" * MAX_LINE_CHARS + "\n")
    assert run([str(path), "-o", str(tmp_path / "long.cu")]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"{path}:4:{MAX_LINE_CHARS + 1}: error: line is too long: {MAX_LINE_CHARS + 2} characters " \
                       f"(the limit is {MAX_LINE_CHARS})"
    # the last 120 characters: the column (the first past the limit) is the line's second last
    assert lines[1] == "   4 | ..." + "x" * 120
    assert lines[2] == "     | " + " " * (3 + 118) + "^"


def test_too_many_tokens(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(tessera.frontend.parser, "MAX_TOKENS", 20)
    path = tmp_path / "t.tsr"
    path.write_text("const T: i32[12] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]\n")
    assert run([str(path), "-o", str(tmp_path / "t.cu")]) == 1
    # token 21 is the ',' after the 6: const T : i32 [ 12 ] = [ then 1 , 2 , ... 6 ,
    assert capsys.readouterr().err.startswith(f"{path}:1:37: error: program is too large: more than 20 tokens")


@pytest.mark.parametrize("text,line,col,message", [
    ("const " + "a" * 256 + " = 1\n", 1, 7, "name is too long: 256 characters (the limit is 255)"),
    (KERNEL + '    tprint("' + "x" * 65537 + '")\n', 4, 12, "string literal is too long: 65537 characters"),
], ids=["name", "string"])
def test_over_a_token_limit(text: str, line: int, col: int, message: str, tmp_path, capsys) -> None:
    path = tmp_path / "t.tsr"
    path.write_text(text)
    assert run([str(path), "-o", str(tmp_path / "t.cu")]) == 1
    assert capsys.readouterr().err.startswith(f"{path}:{line}:{col}: error: {message}")


def test_names_and_strings_at_the_limits_compile(tmp_path, capsys) -> None:
    path = tmp_path / "ok.tsr"
    name = "n" * 255
    path.write_text(f"const {name} = 1\n" + KERNEL + f'    tprint("{"x" * 65536}")\n    out[1] = f32({name})\n')
    assert run([str(path), "-o", str(tmp_path / "ok.cu")]) == 0, capsys.readouterr().err


# ---- runs of blank lines longer than one newline token (the grammar splits them in pieces of 1000
# lines, which the post-lexer joins again): lines, indentation and diagnostics stay right

@pytest.mark.parametrize("blank", ["\n", "   \n", "    # a comment\n", "# c\r\n", "\t \f\n"], ids=repr)
def test_long_blank_runs_inside_a_block(blank: str, tmp_path, capsys) -> None:
    run_of = blank * 2500
    text = "@kernel tile[(32,)]\ndef k(out: mut f32[n]):\n    out[0] = 1.0\n" + run_of + \
        "    if out[0] > 0.0:\n" + run_of + "        out[1] = 2.0\n" + run_of + "    out[2] = undefined\n"
    path = tmp_path / "b.tsr"
    path.write_bytes(text.encode())
    assert run([str(path), "-o", str(tmp_path / "b.cu")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:{3 * 2500 + 6}:14: error: undefined name 'undefined'"), err[:300]


def test_an_error_after_a_long_blank_run_is_located(tmp_path, capsys) -> None:
    path = tmp_path / "e.tsr"
    path.write_text("const A = 1 +  # unfinished\n" + "\n" * 3000 + "const B = 2\n")
    assert run([str(path), "-o", str(tmp_path / "e.cu")]) == 1
    assert capsys.readouterr().err.startswith(f"{path}:1:14: error: unexpected end of line")
    path.write_text("@kernel tile[(32,)]\ndef k(out: mut f32[n]):\n    out[0] = 1.0\n" + "\n" * 3000 + "      out[1] = 1.0\n")
    assert run([str(path), "-o", str(tmp_path / "e.cu")]) == 1
    assert capsys.readouterr().err.startswith(f"{path}:3004:7: error: unexpected indent")
