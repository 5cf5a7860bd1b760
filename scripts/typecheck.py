#!/usr/bin/env python3
"""Type-check the `tessera` package with mypy and the configuration in pyproject.toml.

The package is assembled from several source folders (`[tool.setuptools.package-dir]`:
`tessera.transpile` lives in transpile/, ...), a layout mypy cannot resolve from the source tree
and whose editable-install import hook it cannot follow. So this lays the package out as it is
installed, in a temporary tree of symbolic links to the sources, runs `mypy -p tessera` there and
prints mypy's report with the paths of the sources in the repository. Exits with mypy's status.

    python scripts/typecheck.py [extra mypy options]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "tessera"


def package_dirs(pyproject: Path) -> dict[str, str]:
    """Package name -> source folder (relative to the repository), from setuptools' package-dir."""
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    return dict(config["tool"]["setuptools"]["package-dir"])


def link_tree(dest: Path, dirs: dict[str, str]) -> dict[str, str]:
    """Lay out `PACKAGE` under `dest` with links to the sources. Returns the prefixes that turn a
    path in the tree back into a path in the repository (longest first)."""
    top = dest / PACKAGE
    top.mkdir()
    for src in (ROOT / dirs[PACKAGE]).glob("*.py"):
        (top / src.name).symlink_to(src)
    for sub in (ROOT / dirs[PACKAGE]).glob("*/__init__.py"):  # subpackages inside tessera/ (tessera.dist)
        (top / sub.parent.name).symlink_to(sub.parent, target_is_directory=True)
    prefixes = {}
    for name, folder in dirs.items():
        if name == PACKAGE:
            continue
        parent, _, leaf = name.rpartition(".")
        if parent != PACKAGE:
            raise SystemExit(f"typecheck: cannot lay out the nested package {name!r}")
        (top / leaf).symlink_to(ROOT / folder, target_is_directory=True)
        prefixes[f"{PACKAGE}/{leaf}/"] = f"{folder}/"
    prefixes[f"{PACKAGE}/"] = f"{dirs[PACKAGE]}/"
    return prefixes


def repo_path(line: str, prefixes: dict[str, str]) -> str:
    for tree_prefix, repo_prefix in prefixes.items():
        if line.startswith(tree_prefix):
            return repo_prefix + line[len(tree_prefix):]
    return line


def main(argv: list[str]) -> int:
    pyproject = ROOT / "pyproject.toml"
    with tempfile.TemporaryDirectory(prefix="tessera-mypy-") as tmp:
        prefixes = link_tree(Path(tmp), package_dirs(pyproject))
        cmd = [sys.executable, "-m", "mypy", "--config-file", str(pyproject),
               "--cache-dir", str(ROOT / ".mypy_cache"), *argv, "-p", PACKAGE]
        env = {**os.environ, "MYPY_FORCE_COLOR": "0"}
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, check=False)
    for line in proc.stdout.splitlines():
        print(repo_path(line, prefixes))
    sys.stderr.write(proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
