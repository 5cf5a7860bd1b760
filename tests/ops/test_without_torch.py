"""Tessera without PyTorch (an optional dependency: `tessera-tsr[torch]`): the package and its
operators import, `tessera.ops.torch` says what to install, and the test modules that read every
module of the package (tests/base/test_irnode.py) and the PyTorch operators' tests
(tests/ops/test_torch_ops.py) collect, their PyTorch tests skipped with a reason. PyTorch is hidden
from a child interpreter (`sys.modules["torch"] = None`: every `import torch` there fails), so this
runs where it is installed too."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT

CHILD = """
import sys
sys.modules["torch"] = None
import tessera
import tessera.ops
assert callable(tessera.ops.matmul)
try:
    import tessera.ops.torch
except ModuleNotFoundError as e:
    print("refused:", e, "| name:", e.name)
import pytest
sys.exit(pytest.main(["-q", "-rs", "-p", "no:cacheprovider", "-k", "pytorch",
                      "tests/base/test_irnode.py", "tests/ops/test_torch_ops.py"]))
"""


def test_without_pytorch_tessera_imports_and_its_tests_collect_and_skip() -> None:
    p = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert 'refused: tessera.ops.torch needs PyTorch 2.4 or newer: pip install "tessera-tsr[torch]" | name: torch' in out
    assert "ERROR" not in out and not re.search(r"\b\d+ errors?\b", out), out  # no collection error
    # the test of the modules that import PyTorch skips, naming why; the others of the module ran
    assert "SKIPPED [1] tests/base/test_irnode.py" in out and "needs PyTorch" in out, out
    assert "could not import 'torch'" in out, out  # test_torch_ops.py: importorskip's reason
    assert " passed" in out, out
