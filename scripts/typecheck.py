#!/usr/bin/env python3
"""Type-check the `tessera` package with mypy and the configuration in pyproject.toml.

The package is assembled from several source folders (`[tool.setuptools.package-dir]`:
`tessera.transpile` lives in transpile/, `tessera.runtime` in runtime/, ...), which mypy's own
file discovery cannot map to module names. So this gives mypy the sources itself: every `.py`
file of every mapped folder, each with the module name it has once installed (the same mapping
setuptools applies), through mypy's build API. Reports carry the files' paths in the repository.
Exits with 0 when mypy finds nothing, 1 otherwise.

    python scripts/typecheck.py [extra mypy options]
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def package_dirs(pyproject: Path) -> dict[str, str]:
    """Package name -> source folder (relative to the repository), from setuptools' package-dir."""
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    return dict(config["tool"]["setuptools"]["package-dir"])


def module_files(dirs: dict[str, str]) -> dict[str, Path]:
    """Module name -> source file (relative to the repository) of every module of the package."""
    folders = {(ROOT / folder).resolve(): name for name, folder in dirs.items()}
    out: dict[str, Path] = {}
    for top, package in folders.items():
        for path in sorted(top.rglob("*.py")):
            # A file under a folder that another package is mapped to belongs to that package.
            owner = max((f for f in folders if path.is_relative_to(f)), key=lambda f: len(f.parts))
            if owner != top or "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(top).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([package, *parts])] = path.relative_to(ROOT)
    return out


def main(argv: list[str]) -> int:
    from mypy.build import build
    from mypy.errors import CompileError
    from mypy.main import process_options
    from mypy.modulefinder import BuildSource

    pyproject = ROOT / "pyproject.toml"
    files = module_files(package_dirs(pyproject))
    # process_options reads the configuration; its own source list (this script) is replaced.
    _, options = process_options(["--config-file", str(pyproject), "--cache-dir", str(ROOT / ".mypy_cache"),
                                  *argv, __file__])
    sources = [BuildSource(str(path), module) for module, path in sorted(files.items())]
    try:
        result = build(sources, options)
        messages = result.errors
    except CompileError as e:  # a blocking error (a syntax error, say)
        messages = e.messages
    for line in messages:
        print(line)
    errors = sum(1 for m in messages if ": error:" in m)
    if errors:
        where = len({m.split(":", 1)[0] for m in messages if ": error:" in m})
        print(f"Found {errors} error{'s' * (errors != 1)} in {where} file{'s' * (where != 1)} "
              f"(checked {len(sources)} source files)")
        return 1
    print(f"Success: no issues found in {len(sources)} source files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
