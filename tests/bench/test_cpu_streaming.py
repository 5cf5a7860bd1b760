"""bench/cpu_streaming.py: its kernels compute what NumPy does (small shapes, both CPU modes), and
without Warp its Warp rows say why they are skipped."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tessera
from tests.conftest import load_script

pytestmark = pytest.mark.usefixtures("shared_cache")
bench = load_script("bench/cpu_streaming.py", "cpu_streaming")


@pytest.mark.parametrize("regions", ["1", "0"])
def test_the_kernels_match_numpy(regions: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_CPU_REGIONS", regions)
    m = tessera.compile(bench.TSR, backend="cpu")
    rng = np.random.default_rng(1)
    x = rng.standard_normal(5000).astype(np.float32)
    part = np.zeros(bench.GROUPS, np.float32)
    m.block_reduce(x, part, grid=bench.GROUPS)
    assert np.isclose(part.sum(dtype=np.float64), x.sum(dtype=np.float64), rtol=1e-4, atol=1e-3)
    a, b = rng.standard_normal((3, 70)).astype(np.float32), rng.standard_normal((3, 70)).astype(np.float32)
    y = np.zeros_like(a)
    m.bias_gelu(a, b, y)
    assert np.allclose(y, bench.gelu_ref(a, b), rtol=1e-5, atol=1e-6)
    x2 = rng.standard_normal((4, 300)).astype(np.float32)
    y2 = np.zeros_like(x2)
    m.layernorm(x2, y2, 1e-5, grid=4)
    assert np.allclose(y2, bench.ln_ref(x2), rtol=1e-4, atol=1e-4)
    from tessera import ops

    w, b = rng.standard_normal(300).astype(np.float32), rng.standard_normal(300).astype(np.float32)
    assert np.allclose(ops.layer_norm(x2, w, b), bench.ln_ref(x2) * w + b, rtol=1e-4, atol=1e-4)
    assert "ops.layer_norm 1024^2" in bench.numpy_rows(bench.data(np.random.default_rng(0)), 1)


def test_without_warp_its_rows_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "warp", None)  # `import warp` raises ImportError
    why = bench.warp_rows({}, 1)
    assert isinstance(why, str) and "pip install warp-lang" in why
