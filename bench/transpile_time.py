"""Transpile time versus NVRTC time for every sample program.

For each ``samples/*.tsr`` (or the files given on the command line) this measures, in one
process:

* **transpile** -- ``tessera.transpile.driver.compile_source`` on the already-read source (parse,
  type check, cooperation and shared-memory passes, CUDA C emission). No file I/O is timed.
* **NVRTC** -- ``tessera.runtime.cuda.nvrtc.compile_cuda`` of the emitted CUDA C for the target
  architecture (default ``sm_90``), producing a cubin, so ptxas runs too. This is what a launch
  from Python pays on top of the transpiler, and what ``tesserac --check`` runs.

Each is timed with ``time.perf_counter`` after one warm-up call, and the best of ``--repeat``
runs is reported. The parser (Lark grammar) and the Jinja templates are built on the first
call and cached, and the first NVRTC call loads the library and finds the CUDA headers; those
one-time costs are not in the best-of numbers, so the first call of each (the *cold* call) is
reported separately, above the table, together with the first call per sample.

The goal is that transpiling costs less than 10% of the NVRTC compile that follows it:
``transpile / NVRTC < 10%`` for every sample. The script is a report: it always exits 0, and a
sample that fails to compile is shown as such in the table.

    python bench/transpile_time.py [--repeat N] [--arch sm_90] [FILE.tsr ...]
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from tessera.base.options import CompileOptions

GOAL = 0.10  # transpile time as a fraction of NVRTC time
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Row:
    sample: str
    first_transpile: float | None = None  # seconds; the first call for this sample
    transpile: float | None = None  # seconds; best of the repeats
    first_nvrtc: float | None = None
    nvrtc: float | None = None
    error: str | None = None


def _timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """Best wall time of `repeat` calls, after one warm-up call."""
    fn()
    return min(_timed(fn)[0] for _ in range(max(1, repeat)))


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:100]


def measure(path: str, arch: str, repeat: int, cold: dict[str, tuple[str, float]]) -> Row:
    from tessera.transpile.driver import compile_source, load_source

    row = Row(os.path.relpath(path, ROOT) if path.startswith(ROOT) else path)
    try:
        src = load_source(path)
    except OSError as e:
        row.error = f"cannot read: {e.strerror}"
        return row
    try:
        row.first_transpile, result = _timed(lambda: compile_source(src, options=CompileOptions(arch=arch)))
        cold.setdefault("transpile", (row.sample, row.first_transpile))
        row.transpile = best_of(lambda: compile_source(src, options=CompileOptions(arch=arch)), repeat)
    except Exception as e:  # noqa: BLE001 - a report: show the failure and go on
        row.error = f"transpile failed: {_one_line(e)}"
        return row
    cuda = result.cuda
    name = os.path.splitext(os.path.basename(path))[0] + ".cu"
    try:
        from tessera.runtime.cuda.nvrtc import compile_cuda

        row.first_nvrtc, _ = _timed(lambda: compile_cuda(cuda, name=name, arch=arch))
        cold.setdefault("nvrtc", (row.sample, row.first_nvrtc))
        row.nvrtc = best_of(lambda: compile_cuda(cuda, name=name, arch=arch), repeat)
    except Exception as e:  # noqa: BLE001
        row.error = f"NVRTC failed: {_one_line(e)}"
    return row


def _ms(t: float | None) -> str:
    return "-" if t is None else f"{t * 1e3:.2f}"


def render(rows: list[Row], arch: str, repeat: int, cold: dict[str, tuple[str, float]]) -> str:
    out = [f"transpile vs NVRTC ({arch}, cubin with ptxas), best of {repeat} after a warm-up; "
           f"goal: transpile < {GOAL:.0%} of NVRTC"]
    if "transpile" in cold:
        s, t = cold["transpile"]
        out.append(f"cold first transpile call (builds and caches the parser and templates): {_ms(t)} ms ({s})")
    if "nvrtc" in cold:
        s, t = cold["nvrtc"]
        out.append(f"cold first NVRTC call (loads NVRTC, finds the CUDA headers): {_ms(t)} ms ({s})")
    out.append("")
    header = ("sample", "transpile ms", "first ms", "NVRTC ms", "first ms", "ratio", "goal")
    table = [header]
    met = measured = 0
    for r in rows:
        if r.transpile is not None and r.nvrtc is not None and r.nvrtc > 0:
            ratio = r.transpile / r.nvrtc
            ok = ratio < GOAL
            measured += 1
            met += ok
            verdict, ratio_text = ("yes" if ok else "NO"), f"{ratio:.1%}"
        else:
            verdict, ratio_text = "n/a", "-"
        table.append((r.sample, _ms(r.transpile), _ms(r.first_transpile), _ms(r.nvrtc), _ms(r.first_nvrtc),
                      ratio_text, verdict))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for i, row in enumerate(table):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        out.append("  ".join(cells).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    errors = [r for r in rows if r.error]
    if errors:
        out.append("")
        out.extend(f"{r.sample}: {r.error}" for r in errors)
    out.append("")
    out.append(f"goal met by {met} of {measured} measured sample(s)"
               + (f"; {len(errors)} could not be measured" if errors else ""))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", help="the .tsr files to measure (default: samples/*.tsr)")
    p.add_argument("--repeat", type=int, default=5, metavar="N",
                   help="timed runs per measurement, the best is reported (default 5)")
    p.add_argument("--arch", default="sm_90", help="target architecture (default sm_90)")
    args = p.parse_args(argv)
    paths = args.files or sorted(glob.glob(os.path.join(ROOT, "samples", "*.tsr")))
    if not paths:
        print(f"no samples found under {os.path.join(ROOT, 'samples')}")
        return 0
    cold: dict[str, tuple[str, float]] = {}
    rows = []
    for path in paths:
        try:
            rows.append(measure(path, args.arch, args.repeat, cold))
        except Exception as e:  # noqa: BLE001 - e.g. the compiler cannot be imported
            rows.append(Row(path, error=_one_line(e)))
    print(render(rows, args.arch, args.repeat, cold))
    return 0


if __name__ == "__main__":
    try:
        main()
    except SystemExit as e:  # argparse errors and --help
        if e.code not in (0, None):
            print("transpile_time: bad command line (see --help); nothing measured", file=sys.stderr)
    sys.exit(0)
