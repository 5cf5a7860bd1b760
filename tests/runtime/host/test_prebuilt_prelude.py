"""The CPU prelude precompiled when the package is installed (runtime/host/recipe.py's
`install_prelude`, run by setup.py's `build_engine`): the kernel unit force-includes it when it was
made by the same compiler, for the same flags and sources, and is intact (GCC then reads the .gch,
as its -H output shows), and tessera_host.h otherwise; kernels give the same results either way,
and the install step never fails."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera.runtime.host import build as host_build
from tessera.runtime.host import recipe as host_recipe
from tests.conftest import skip_without_cxx

KERNEL = """
@kernel tile[(32,)]
def scale(x: f32[n], y: mut f32[n], a: f32):
    i = tile_linear_id()
    if i < n:
        y[i] = x[i] * a + 1.0
"""

skip_without_cxx()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the host folder with its prelude precompiled into host/prebuilt, as an install makes it."""
    host = tmp_path_factory.mktemp("pkg") / "host"
    shutil.copytree(host_build.host_dir(), host, ignore=shutil.ignore_patterns(host_recipe.PREBUILT))
    line = host_recipe.install_prelude(host, host / host_recipe.PREBUILT)
    assert line.startswith("tessera: precompiled the CPU prelude"), line
    return host


@pytest.fixture
def host(made: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_cache: Path) -> Path:
    """A copy of `made` as the package's host folder, an empty cache, no prelude chosen yet."""
    folder = tmp_path / "host"
    shutil.copytree(made, folder)
    monkeypatch.setattr(host_build, "host_dir", lambda: folder)
    monkeypatch.setattr(host_build, "prebuilt_dir", lambda: folder / host_recipe.PREBUILT)
    monkeypatch.setattr(host_build, "_PRELUDES", {})
    return folder


def _gch(host: Path) -> Path:
    return host_recipe.prelude_files(host / host_recipe.PREBUILT,
                                     host_recipe.prelude_key(host_build.find_cxx(), host))[1]


def _headers_read(tmp_path: Path) -> str:
    """GCC's -H report of the headers a kernel unit reads ('!' before a precompiled one it uses)."""
    src = tmp_path / "unit.cpp"
    src.write_text("__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n")
    cmd = host_build.kernel_command(host_build.find_cxx(), src, tmp_path / "unit.o",
                                    host_build.stub_headers(tmp_path / "stubs"), ["-H", "-Winvalid-pch"])
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def _run_kernel() -> None:
    mod = tessera.compile(KERNEL, backend="cpu")
    x = np.arange(32, dtype=np.float32)
    y = np.zeros_like(x)
    mod.scale[1](x, y, np.float32(3.0))
    np.testing.assert_array_equal(y, x * np.float32(3.0) + np.float32(1.0))


def test_kernel_unit_reads_the_precompiled_prelude(host: Path, tmp_path: Path):
    assert host_build.prelude_header(host_build.find_cxx()).parent == host / host_recipe.PREBUILT
    report = _headers_read(tmp_path)
    assert f"! {_gch(host)}" in report
    assert "invalid" not in report
    _run_kernel()


def test_the_installed_package_has_it():
    # The package this suite runs was installed by `pip install -e .`, which ran build_engine.
    host_build._PRELUDES.clear()
    assert host_build.prelude_header(host_build.find_cxx()) != host_build.host_header_path()


@pytest.mark.parametrize("damage", ["flipped", "truncated", "no checksum", "stub edited"])
def test_a_damaged_prelude_is_not_used(damage: str, host: Path, tmp_path: Path):
    gch = _gch(host)
    if damage == "flipped":
        data = bytearray(gch.read_bytes())
        data[len(data) // 2] ^= 0xFF
        gch.write_bytes(bytes(data))
    elif damage == "truncated":
        gch.write_bytes(gch.read_bytes()[:1000])
    elif damage == "no checksum":
        Path(f"{gch}.sha256").unlink()
    else:
        gch.with_suffix("").write_text('#include "elsewhere.h"\n')
    assert host_build.prelude_header(host_build.find_cxx()) == host / "tessera_host.h"
    assert ".gch" not in _headers_read(tmp_path)
    _run_kernel()


def test_changed_sources_are_not_served_the_old_prelude(host: Path):
    header = host / "host_math.h"
    header.write_text(header.read_text() + "\n// edited after the install\n")
    assert host_build.prelude_header(host_build.find_cxx()) == host / "tessera_host.h"


def test_another_compiler_spelling_is_not_served_it(host: Path, monkeypatch: pytest.MonkeyPatch):
    default = host_build.find_cxx()
    real = str(Path(shutil.which(default[0]) or default[0]).resolve())
    if [real] == default:
        pytest.skip("the compiler is already named by its real path")
    monkeypatch.setenv("CXX", real)
    assert host_build.prelude_header(host_build.find_cxx()) == host / "tessera_host.h"


def test_no_compiler_prints_a_line_and_does_not_raise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    line = host_recipe.install_prelude(host_build.host_dir(), tmp_path / "prebuilt")
    assert line.startswith("tessera: the CPU prelude was not precompiled") and "no-such-c++" in line


def test_a_failing_compile_prints_a_line(tmp_path: Path):
    host = tmp_path / "host"
    shutil.copytree(host_build.host_dir(), host, ignore=shutil.ignore_patterns(host_recipe.PREBUILT))
    (host / "host_math.h").write_text("this is not C++\n")
    line = host_recipe.install_prelude(host, host / host_recipe.PREBUILT)
    assert line.startswith("tessera: the CPU prelude was not precompiled") and "exited with" in line
    assert not list((host / host_recipe.PREBUILT).glob("prelude-*"))


def test_a_new_install_replaces_the_old_files(made: Path, tmp_path: Path):
    host = tmp_path / "host"
    shutil.copytree(made, host)
    old = sorted(p.name for p in (host / host_recipe.PREBUILT).glob("prelude-*"))
    (host / "host_math.h").write_text((host / "host_math.h").read_text() + "\n// a new version\n")
    host_recipe.install_prelude(host, host / host_recipe.PREBUILT)
    new = sorted(p.name for p in (host / host_recipe.PREBUILT).glob("prelude-*"))
    assert len(new) == 3 and not set(old) & set(new)
