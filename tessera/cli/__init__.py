"""The command line: `tesserac` and `python -m tessera` are the same dispatcher.

    tesserac [compile] FILE.tsr [options]   transpile (the default command; `tesserac FILE.tsr --help`)
    tesserac tune FILE.tsr --kernel K ...   judge a kernel's @autotune space (cli/tune.py)
    tesserac cache info|clear               show or empty the compile caches (cli/cache.py)

Each command is a module with `run(argv) -> int`. Exit status: 0 success, 1 errors in the program
or its use, 2 a bad command line, 70 an internal compiler error, 130 interrupted; never a traceback.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {"compile": "tessera.cli.compile", "tune": "tessera.cli.tune", "cache": "tessera.cli.cache"}
EXIT_ICE = 70


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    name = args[0] if args and args[0] in COMMANDS else "compile"
    if args and args[0] in COMMANDS:
        args = args[1:]
    try:
        code = importlib.import_module(COMMANDS[name]).run(args)
    except KeyboardInterrupt:
        code = 130
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001 - never a traceback for the user
        print(f"tesserac: internal compiler error: {type(e).__name__}: {e}", file=sys.stderr)
        code = EXIT_ICE
    sys.exit(code)
