"""TESSERA_CPU_CLONES (runtime/host/clones.py): with "host", a region-mode kernel with a loop is
compiled once, for the clone this CPU picks, into a library with no dispatch, that computes the
same bytes as the library with both clones (the default, "all"); the two are cached apart, as
libraries and as variants; another value is an error naming the variable. The test suite sets
"host" for every other test (tests/conftest.py)."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera.base.errors import SourceFile, TesseraError
from tessera.base.options import CompileOptions
from tessera.runtime.host import clones
from tessera.runtime.host.library import cached_library
from tessera.transpile.driver import compile_source

pytestmark = pytest.mark.usefixtures("shared_cache")

STRIDE = """
@kernel tile[(64,)]
def stride(x: f32[n], y: mut f32[n]):
    t = tile_linear_id()
    for i in range(t, n, 64):
        y[i] = x[i] * 0.75 + tanh(x[i])
"""


def _built(mode: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[bytes, set[str], str]:
    """(y's bytes, the library's symbols, the variant's key) with TESSERA_CPU_CLONES=mode."""
    monkeypatch.setenv(clones.ENV, mode)
    mod = tessera.compile(STRIDE, backend="cpu")
    x = np.linspace(-4, 4, 1000, dtype=np.float32)
    y = np.zeros_like(x)
    mod["stride"](x, y, grid=2)
    variant = mod.variant(None, {})
    path = cached_library(variant.library_key)
    assert path is not None
    lib = tmp_path / f"lib-{mode}.so"  # the cache's path is a pinned descriptor's
    lib.write_bytes(path.read_bytes())
    nm = subprocess.run(["nm", str(lib)], capture_output=True, text=True, check=True).stdout
    return y.tobytes(), {line.split()[-1] for line in nm.splitlines() if line.strip()}, variant.spec.key()


@pytest.mark.skipif(shutil.which("nm") is None, reason="reads the library's symbols with nm")
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or platform.system() != "Linux",
                    reason="the AVX2 clones are x86-64 glibc's")
def test_host_compiles_one_clone_with_the_same_results_and_its_own_keys(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    c = compile_source(SourceFile("k.tsr", STRIDE), options=CompileOptions(cpu_regions=True)).cuda
    assert "TSR_VECTOR_CLONES stride(" in c
    both, both_symbols, both_key = _built("all", monkeypatch, tmp_path)
    one, one_symbols, one_key = _built("host", monkeypatch, tmp_path)
    assert both == one
    assert "stride.resolver" in both_symbols and "stride.default" in both_symbols
    assert not {s for s in one_symbols if s.startswith("stride.")}, one_symbols  # one function, no dispatch
    assert "stride" in one_symbols
    assert one_key != both_key
    monkeypatch.delenv(clones.ENV)
    assert _built("", monkeypatch, tmp_path)[2] == both_key  # unset is "all"


def test_host_uses_avx2_only_where_the_cpu_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(clones.ENV, "all")
    assert clones.wrapper_prefix() == ""
    monkeypatch.setenv(clones.ENV, "host")
    prefix = clones.wrapper_prefix()
    assert prefix.startswith("#if defined(TSR_CLONES_OK)") and prefix.endswith("#endif\n")
    has = platform.system() == "Linux" and "avx2" in Path("/proc/cpuinfo").read_text().split()
    assert ('target("avx2")' in prefix) is has


@pytest.mark.parametrize("value", ["none", "AVX2", "host,all"])
def test_another_value_is_an_error_naming_the_variable(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(clones.ENV, value)
    with pytest.raises(TesseraError, match=f"TESSERA_CPU_CLONES must be one of all, host, not '{value}'"):
        tessera.compile(STRIDE, backend="cpu")["stride"](np.ones(64, np.float32), np.ones(64, np.float32))
