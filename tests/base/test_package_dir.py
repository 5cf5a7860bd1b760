"""tessera/base/package_dir.py finds the folder of each of Tessera's packages where importlib.resources
does (an editable install maps each to its own source folder), and a package on sys.path as a
normal install lays it out; the CPU backend still says so when its host files are missing."""

from __future__ import annotations

import importlib.resources
import sys
from pathlib import Path

import pytest

from tessera.base.errors import TesseraError
from tessera.base.package_dir import package_dir
from tessera.runtime.cache.fingerprint import PACKAGES
from tessera.runtime.host import build as host_build


@pytest.mark.parametrize("name", PACKAGES)
def test_the_folder_importlib_resources_gives(name: str) -> None:
    assert package_dir(name) == Path(str(importlib.resources.files(name)))


def test_a_package_laid_out_as_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "site" / "tsr_probe_pkg"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "tsr_probe_pkg", raising=False)
    assert package_dir("tsr_probe_pkg") == folder


def test_the_files_are_read_from_it() -> None:
    from tessera.frontend.parser import grammar_text
    from tessera.transpile.emit.template import NAME, template_text

    assert grammar_text() == (package_dir("tessera.grammar") / "tsr.lark").read_text("utf-8")
    assert template_text(NAME) == (package_dir("tessera.templates") / NAME).read_text("utf-8")
    assert host_build.host_dir() == package_dir("tessera.runtime") / "host"


def test_missing_host_files_are_a_tessera_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "engine.cpp").write_text("")
    monkeypatch.setattr(host_build, "package_dir", lambda name: tmp_path)
    with pytest.raises(TesseraError, match="prelude or engine is missing from"):
        host_build.host_dir()
