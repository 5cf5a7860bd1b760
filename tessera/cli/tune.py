"""`tesserac tune FILE --kernel K --shape M=4096 ... --arch sm_90`: the command line of the
autotuner's report (tessera/autotune/report.py), which judges a kernel's search space without
running anything."""

from __future__ import annotations

import argparse
import sys

from tessera.autotune.report import report
from tessera.base.errors import CompileError, InternalCompilerError, TesseraError
from tessera.base.options import ARCHS
from tessera.cli.compile import EXIT_ERROR, compile_failure, parse_defines


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tesserac tune", description="Judge a kernel's @autotune space for a "
                                "launch's shapes: candidates, pruning with reasons, the cost model's ranking.")
    p.add_argument("input", help="the .tsr source file")
    p.add_argument("--kernel", required=True, metavar="NAME")
    p.add_argument("--shape", action="append", default=[], metavar="SYM=VALUE", help="a shape symbol's value")
    p.add_argument("--arch", default="sm_90", metavar="SM", help=f"one of {', '.join(ARCHS)} (default sm_90)")
    p.add_argument("--grid", action="append", default=[], metavar="EXPR",
                   help="a grid axis as an expression of shape symbols and const parameters (x first)")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="fix a const parameter (a tuned one is then not searched)")
    return p


def run(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.arch not in ARCHS:
        parser.error(f"--arch must be one of {', '.join(ARCHS)}")
    shapes: dict[str, int] = {}
    for item in args.shape:
        name, _, value = item.partition("=")
        if not name.isidentifier() or not value.strip().isdigit() or not 1 <= int(value) < 2**31:
            parser.error(f"--shape expects SYM=VALUE with a value from 1 to 2**31-1, got {item[:40]!r}")
        shapes[name] = int(value)
    if len(args.grid) > 3:
        parser.error("--grid is given at most 3 times (x, y, z)")
    defines = parse_defines(args.defines, parser.error)
    try:
        print(report(args.input, args.kernel, args.arch, shapes, args.grid, defines), end="")
        return 0
    except (CompileError, InternalCompilerError) as e:
        return compile_failure(e)
    except (TesseraError, ValueError) as e:
        print(f"tesserac tune: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as e:
        print(f"tesserac tune: error: cannot read {args.input!r}: {e.strerror}", file=sys.stderr)
        return EXIT_ERROR
