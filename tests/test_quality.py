"""The developers' guide's static checks, as tests: ruff reports nothing on the repository and
mypy (scripts/typecheck.py, configured in pyproject.toml) reports no error in the package."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_ruff_reports_nothing() -> None:
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(ROOT)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_mypy_reports_no_errors() -> None:
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "typecheck.py")], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("Success: no issues found"), p.stdout
