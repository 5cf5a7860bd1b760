"""The lean link of CPU kernel libraries (`host_build._link`): the C libraries only, no C++ runtime,
with the compiler's default libraries as the fallback where that link fails."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera.runtime.host import build as host_build
from tessera.runtime.host import recipe as host_recipe
from tests.conftest import record_runs, skip_without_cxx

skip_without_cxx()

KERNEL = """\
@kernel tile[(64,)]
def scale(x: f32[n], y: mut f32[n], a: f32):
    i = global_linear_id()
    if i < n:
        y[i] = a * sin(x[i])
"""

# What an object needs from libstdc++ or its unwinder when it uses new/delete, exceptions or a
# thread-safe local static (mangled operator new/delete, the personality routine, the guards).
CXX_RUNTIME = ("_Znw", "_Zna", "_Zdl", "_Zda", "__gxx_personality", "__cxa_", "_Unwind_", "_ZSt")


def _links(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The link commands of this test (the compiler runs as usual), no compiler known to need the full link."""
    monkeypatch.setattr(host_build, "_FULL_LINK_ONLY", set())
    return record_runs(monkeypatch, "-shared")


def _scale_runs(source: str = KERNEL) -> None:
    """`source` (KERNEL or a variant of it) compiled, linked, launched and checked against NumPy."""
    x = np.linspace(-3, 3, 200, dtype=np.float32)
    y = np.zeros_like(x)
    tessera.compile(source, backend="cpu").scale[4](x, y, np.float32(2))
    expected = 2 * np.sin(x) if "a * sin" in source else 2 + np.sin(x)
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)


def _needed(library: Path) -> list[str]:
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("no readelf")
    out = subprocess.run([readelf, "-d", str(library)], capture_output=True, text=True, check=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def test_a_library_is_linked_without_the_cpp_runtime(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    links = _links(monkeypatch)
    _scale_runs()
    assert len(links) == 1 and set(host_build.LEAN_LINK) <= set(links[0])
    (library,) = fresh_cache.rglob("*.so")
    needed = _needed(library)
    assert not [n for n in needed if "stdc++" in n or "gcc_s" in n], needed
    assert any(n.startswith("libm.") for n in needed), needed  # sinf: the lean link keeps libm


def test_the_engine_needs_nothing_from_the_cpp_runtime(tmp_path: Path) -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm")
    obj = tmp_path / "engine.o"
    subprocess.run(host_recipe.engine_command(host_build.find_cxx(), host_build.host_dir(), obj), check=True)
    undefined = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True, check=True).stdout.split()
    assert not [s for s in undefined if s.startswith(CXX_RUNTIME)], undefined


def test_a_failed_lean_link_falls_back_to_the_default_libraries(fresh_cache: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    links = _links(monkeypatch)
    monkeypatch.setattr(host_build, "LEAN_LIBS", ("-ltessera_no_such_library",))
    _scale_runs()
    assert len(links) == 2 and "-ltessera_no_such_library" in links[0]
    assert not set(host_build.LEAN_LINK) & set(links[1])
    assert tuple(host_build.find_cxx()) in host_build._FULL_LINK_ONLY
    # The next library of this compiler goes straight to the full link.
    _scale_runs(KERNEL.replace("a * sin", "a + sin"))
    assert len(links) == 3 and not set(host_build.LEAN_LINK) & set(links[2])


def test_a_library_that_cannot_link_reports_the_full_links_error(fresh_cache: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_build, "_FULL_LINK_ONLY", set())
    real = host_build._run

    def failing(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        return real([*cmd, "-ltessera_no_such_library"] if "-shared" in cmd else cmd, cwd)

    monkeypatch.setattr(host_build, "_run", failing)
    with pytest.raises(tessera.CompileError, match="linking the CPU kernel library failed") as err:
        _scale_runs()
    assert "tessera_no_such_library" in str(err.value)
    assert tuple(host_build.find_cxx()) not in host_build._FULL_LINK_ONLY  # both links failed
