"""The CPU engine built when the package is installed (setup.py's `build_engine`, with the recipe
of runtime/host/recipe.py): the runtime links it when it was built for the same compiler and
sources and is intact, with no compile of its own; otherwise it builds the engine as before. The
install step writes it where an editable install or a wheel keeps it, and never fails."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import tessera
from tessera.base.errors import TesseraError
from tessera.runtime.host import build as host_build
from tessera.runtime.host import recipe as host_recipe
from tests.conftest import ROOT, load_script, skip_without_cxx

SUM_REDUCE = ROOT / "samples" / "sum_reduce.tsr"

skip_without_cxx()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prebuilt folder with the engine of this compiler and these sources, as an install makes it."""
    folder = tmp_path_factory.mktemp("prebuilt")
    line = host_recipe.install_engine(host_build.host_dir(), folder)
    assert line.startswith("tessera: prebuilt the CPU engine"), line
    return folder


@pytest.fixture
def prebuilt(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_cache: Path) -> Path:
    """A copy of `built` as the package's prebuilt folder, an empty cache, and a process that has
    neither the engine in memory nor a prefetch behind it."""
    folder = tmp_path / "prebuilt"
    shutil.copytree(built, folder)
    monkeypatch.setattr(host_build, "prebuilt_dir", lambda: folder)
    monkeypatch.setattr(host_build, "_ENGINES", {})
    monkeypatch.setattr(host_build, "_prefetched", False)
    return folder


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """The engine compiles this test starts (each still runs)."""
    started: list[tuple[str, ...]] = []

    class Counted(host_build._EngineBuild):
        def __init__(self, cxx: list[str]) -> None:
            started.append(tuple(cxx))
            super().__init__(cxx)

    monkeypatch.setattr(host_build, "_EngineBuild", Counted)
    return started


def _join_prefetch() -> None:
    for t in threading.enumerate():
        if t.name == "tessera-engine-build":
            t.join(60)


def _sum_reduce_runs() -> None:
    """samples/sum_reduce.tsr loaded and launched (every group sums all of x), checked against NumPy."""
    x = np.random.default_rng(3).integers(-50, 50, 5000).astype(np.float32)
    out = np.zeros(6, np.float32)
    tessera.load(str(SUM_REDUCE), backend="cpu").sum_reduce(x, out)
    assert np.array_equal(out, np.full(6, x.sum(dtype=np.float64), np.float32))


def _key() -> str:
    return host_recipe.engine_key(host_build.find_cxx(), host_build.host_dir())


def test_the_prebuilt_engine_is_used_when_its_key_matches(prebuilt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[object] = []

    def no_compile(cxx: list[str]) -> None:
        compiled.append(cxx)
        raise TesseraError("the engine was compiled")

    monkeypatch.setattr(host_build, "_EngineBuild", no_compile)
    host_build.prefetch_engine()  # finds it: starts no compile
    assert host_build._STARTED == {}
    _join_prefetch()
    _sum_reduce_runs()
    assert compiled == []
    assert host_build.engine_object(host_build.find_cxx()) == host_recipe.read_prebuilt(prebuilt, _key())


def test_another_spelling_of_the_compiler_builds_its_own_engine(prebuilt: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                compiles: list[tuple[str, ...]]) -> None:
    real = os.path.realpath(shutil.which(host_build.find_cxx()[0]) or "")
    link = tmp_path / "bin" / Path(real).name
    link.parent.mkdir()
    link.symlink_to(real)
    key = _key()
    monkeypatch.setenv("CXX", str(link))
    assert _key() != key  # the compiler's identity includes its command
    host_build.prefetch_engine()
    _join_prefetch()
    _sum_reduce_runs()
    assert compiles == [(str(link),)]


def test_changed_sources_build_their_own_engine(prebuilt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                compiles: list[tuple[str, ...]]) -> None:
    host = tmp_path / "host"
    shutil.copytree(host_build.host_dir(), host, ignore=shutil.ignore_patterns(host_recipe.PREBUILT))
    with (host / "engine.cpp").open("a") as f:
        f.write("// changed\n")
    key = _key()
    monkeypatch.setattr(host_build, "host_dir", lambda: host)
    assert _key() != key
    assert host_build.engine_object(host_build.find_cxx())[:4] == b"\x7fELF"
    assert len(compiles) == 1


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "no checksum", "a folder"])
def test_a_damaged_prebuilt_engine_is_ignored(prebuilt: Path, damage: str, compiles: list[tuple[str, ...]]) -> None:
    obj, checksum = host_recipe.prebuilt_files(prebuilt, _key())
    data = obj.read_bytes()
    if damage == "flipped byte":
        obj.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    elif damage == "truncated":
        obj.write_bytes(data[: len(data) // 2])
    elif damage == "no checksum":
        checksum.unlink()
    else:
        obj.unlink()
        obj.mkdir()
    assert host_recipe.read_prebuilt(prebuilt, _key()) is None
    host_build.prefetch_engine()  # the prefetch compiles it, as without a prebuilt engine
    assert len(compiles) == 1
    _join_prefetch()
    _sum_reduce_runs()
    assert len(compiles) == 1


def _setup_module() -> ModuleType:
    return load_script("setup.py", "tessera_setup")  # defines the commands; setup() runs only as a script


def _command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, editable: bool) -> tuple[Any, Path]:
    """setup.py's build_engine for a package folder under tmp_path (its runtime/host sources)
    and its build_lib; returns the command and the project's host folder."""
    from setuptools.dist import Distribution

    project = tmp_path / "project"
    (project / "runtime" / "host").mkdir(parents=True)
    for path in host_recipe.host_sources(host_build.host_dir()):
        shutil.copy(path, project / "runtime" / "host")
    monkeypatch.chdir(project)
    dist = Distribution({"name": "t", "packages": ["tessera.runtime"], "package_dir": {"tessera.runtime": "runtime"},
                         "cmdclass": {"build_engine": _setup_module().build_engine}})
    cmd = dist.get_command_obj("build_engine")
    cmd.build_lib = str(tmp_path / "build-lib")
    cmd.editable_mode = editable
    cmd.ensure_finalized()
    return cmd, project / "runtime" / "host"


def test_build_engine_writes_into_the_sources_for_an_editable_install(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    cmd, host = _command(tmp_path, monkeypatch, editable=True)
    old = host / host_recipe.PREBUILT / ("engine-" + "0" * 64 + ".o")
    old.parent.mkdir()
    old.write_bytes(b"an older engine")
    old.with_name(old.name + ".sha256").write_text("0" * 64 + "\n")
    cmd.run()
    assert capsys.readouterr().out.startswith("tessera: prebuilt the CPU engine")
    key = host_recipe.engine_key(host_build.find_cxx(), host)
    obj, checksum = host_recipe.prebuilt_files(host / host_recipe.PREBUILT, key)
    engine_files = sorted(p for p in (host / host_recipe.PREBUILT).iterdir() if p.name.startswith("engine-"))
    assert engine_files == [obj, checksum]  # the older ones removed
    prelude = host_recipe.prelude_files(host / host_recipe.PREBUILT, host_recipe.prelude_key(host_build.find_cxx(), host))
    assert (host_recipe.read_prebuilt(obj.parent, key) or b"")[:4] == b"\x7fELF"
    built = tmp_path / "build-lib" / "tessera" / "runtime" / "host" / host_recipe.PREBUILT
    assert cmd.get_output_mapping() == {
        str(built / p.name): str(p.relative_to(tmp_path / "project")) for p in (obj, checksum, *prelude)}
    assert not built.exists()


def test_build_engine_writes_into_build_lib_for_a_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    cmd, host = _command(tmp_path, monkeypatch, editable=False)
    cmd.run()
    assert capsys.readouterr().out.startswith("tessera: prebuilt the CPU engine")
    built = tmp_path / "build-lib" / "tessera" / "runtime" / "host" / host_recipe.PREBUILT
    key = host_recipe.engine_key(host_build.find_cxx(), host)
    assert host_recipe.read_prebuilt(built, key) is not None
    prelude = host_recipe.prelude_files(built, host_recipe.prelude_key(host_build.find_cxx(), host))
    assert cmd.get_outputs() == [str(p) for p in (*host_recipe.prebuilt_files(built, key), *prelude)]
    assert cmd.get_output_mapping() == {}
    assert not (host / host_recipe.PREBUILT).exists()


@pytest.mark.parametrize("problem", ["no compiler", "a failing compile", "an unwritable folder"])
def test_build_engine_never_fails_the_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str], problem: str) -> None:
    cmd, host = _command(tmp_path, monkeypatch, editable=True)
    if problem == "no compiler":
        monkeypatch.setenv("CXX", "/nonexistent/c++")
    elif problem == "a failing compile":
        failing = tmp_path / "failing-c++"
        failing.write_text("#!/bin/sh\necho 'error: no engine today' >&2\nexit 1\n")
        failing.chmod(0o755)
        monkeypatch.setenv("CXX", str(failing))
    else:
        (host / host_recipe.PREBUILT).write_text("a file where the folder goes")
    cmd.run()
    out = capsys.readouterr().out
    engine, prelude = out.splitlines()
    assert engine.startswith("tessera: the CPU engine was not prebuilt (") and engine.endswith(
        "it is compiled on first use instead"), out
    assert prelude.startswith("tessera: the CPU prelude was not precompiled ("), out
    if problem == "a failing compile":
        assert "error: no engine today" in out
    assert cmd.get_outputs() == [] and cmd.get_output_mapping() == {}
