"""NVRTC compile time of each sample's module with the device header sections it uses, against
the same module with every section (the whole header, as every module included it before the
header was split: tessera/transpile/header_parts.py).

For each ``samples/*.tsr`` (or the files given) and each architecture, both texts are compiled to
a cubin (``tessera.runtime.cuda.nvrtc.compile_cuda``, so ptxas runs too) after one warm-up each, then
``--repeat`` times, alternating between the two so that a slow spell of the machine hits both;
the median of each is reported with their ratio (every section / its sections: above 1 is the
saving). The first NVRTC call of the process (loading the library) is not counted. A report:
always exits 0.

    python bench/header_sections.py [--repeat N] [--arch sm_90 --arch sm_80] [FILE.tsr ...]
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time

from tessera.base.options import CompileOptions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def listed_sections(cuda: str) -> list[str]:
    """The header sections an emitted file includes (listed in its third line)."""
    line = next(ln for ln in cuda.splitlines() if ln.startswith("// Device header sections: "))
    return line.split(": ", 1)[1].split(", ")


def with_every_section(cuda: str) -> str:
    """`cuda` with its header sections replaced by every section, in the table's order."""
    from tessera.transpile.emit.header_parts import SECTIONS
    from tessera.transpile.render import device_header

    return cuda.replace(device_header(listed_sections(cuda)), device_header([s.name for s in SECTIONS]))


def medians(texts: tuple[str, str], arch: str, repeat: int) -> tuple[float, float]:
    """Median NVRTC seconds of each text, timed alternately after one warm-up each."""
    from tessera.runtime.cuda.nvrtc import compile_cuda

    times: tuple[list[float], list[float]] = ([], [])
    for text in texts:
        compile_cuda(text, arch=arch)
    for _ in range(max(1, repeat)):
        for text, out in zip(texts, times):
            t0 = time.perf_counter()
            compile_cuda(text, arch=arch)
            out.append(time.perf_counter() - t0)
    return statistics.median(times[0]), statistics.median(times[1])


def measure(path: str, arch: str, repeat: int) -> tuple[str, ...]:
    """One table row: sample, sections, both medians (ms) and their ratio."""
    from tessera.transpile.driver import compile_source, load_source

    name = os.path.relpath(path, ROOT) if path.startswith(ROOT) else path
    try:
        cuda = compile_source(load_source(path), options=CompileOptions(arch=arch)).cuda
        used = ", ".join(listed_sections(cuda))
        every, own = medians((with_every_section(cuda), cuda), arch, repeat)
    except Exception as e:  # noqa: BLE001 - a report: show the failure and go on
        return (name, f"failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:80]}", "-", "-", "-")
    return (name, used, f"{every * 1e3:.1f}", f"{own * 1e3:.1f}", f"{every / own:.2f}x")


def render(rows: list[tuple[str, ...]]) -> str:
    header = ("sample", "sections", "every ms", "own ms", "ratio")
    table = [header, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = []
    for k, r in enumerate(table):
        lines.append("  ".join([r[0].ljust(widths[0]), r[1].ljust(widths[1])]
                               + [c.rjust(w) for c, w in zip(r[2:], widths[2:])]).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", help="the .tsr files to measure (default: samples/*.tsr)")
    p.add_argument("--repeat", type=int, default=5, metavar="N", help="timed runs of each text (default 5)")
    p.add_argument("--arch", action="append", help="target architecture, repeatable (default sm_90 and sm_80)")
    args = p.parse_args(argv)
    paths = args.files or sorted(glob.glob(os.path.join(ROOT, "samples", "*.tsr")))
    try:
        from tessera.runtime.cuda.nvrtc import compile_cuda

        compile_cuda('extern "C" __global__ void warm_up() {}')  # loads NVRTC: not part of any figure
    except Exception as e:  # noqa: BLE001
        print(f"NVRTC is unavailable: {e}")
        return 0
    for arch in args.arch or ["sm_90", "sm_80"]:
        print(f"NVRTC to cubin for {arch}, median of {args.repeat}: every header section vs the module's own")
        print(render([measure(path, arch, args.repeat) for path in paths]))
        print()
    return 0


if __name__ == "__main__":
    try:
        main()
    except SystemExit as e:  # argparse errors and --help
        if e.code not in (0, None):
            print("header_sections: bad command line (see --help); nothing measured", file=sys.stderr)
    sys.exit(0)
