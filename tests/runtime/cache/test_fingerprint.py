"""The compiler fingerprint in every cache key: what it covers, that it is computed once, and
that changing the compiler is seen through a warm cache."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("tessera", "tessera.transpile", "tessera.runtime", "tessera.grammar", "tessera.templates")


def _layout(root: Path, nested: bool) -> list[tuple[str, str | None]]:
    """A small package tree: subpackages inside tessera/ (a wheel) or beside it (editable)."""
    files = {"tessera": {"__init__.py": "v = 1\n", "api.py": "x = 1\n", "notes.txt": "not hashed\n"},
             "tessera.transpile": {"__init__.py": "", "cprinter.py": "RULE = 'a'\n"},
             "tessera.runtime": {"__init__.py": "", "host/tessera_host.h": "// prelude\n", "host/extra.cpp": "//\n"},
             "tessera.grammar": {"__init__.py": "", "tsr.lark": "start: NAME\n"},
             "tessera.templates": {"__init__.py": "", "module.cu.j2": "// Generated\n", "dev.cuh": "//\n"}}
    out = []
    for pkg, content in files.items():
        sub = pkg.split(".")[1:]
        top = root.joinpath("tessera", *sub) if nested else root.joinpath(sub[0] if sub else "tessera")
        for rel, text in content.items():
            (top / rel).parent.mkdir(parents=True, exist_ok=True)
            (top / rel).write_text(text)
        pycache = top / "__pycache__"
        pycache.mkdir(exist_ok=True)
        (pycache / "x.cpython-311.pyc").write_bytes(os.urandom(8))
        out.append((pkg, str(top)))
    return out


def test_fingerprint_covers_sources_grammar_templates_and_prelude(tmp_path: Path) -> None:
    from tessera.runtime.cache.fingerprint import fingerprint_of

    pkgs = _layout(tmp_path / "flat", nested=False)
    base = fingerprint_of(pkgs)
    assert base == fingerprint_of(pkgs) and len(base) == 64
    # The same files laid out as a wheel (subpackages nested): the same fingerprint.
    assert fingerprint_of(_layout(tmp_path / "wheel", nested=True)) == base
    top = {name: Path(d) for name, d in pkgs if d}
    for pkg, rel in [("tessera", "api.py"), ("tessera.transpile", "cprinter.py"), ("tessera.grammar", "tsr.lark"),
                     ("tessera.templates", "module.cu.j2"), ("tessera.templates", "dev.cuh"),
                     ("tessera.runtime", "host/tessera_host.h"), ("tessera.runtime", "host/extra.cpp")]:
        f = top[pkg] / rel
        old = f.read_bytes()
        f.write_bytes(old + b" ")
        assert fingerprint_of(pkgs) != base, f
        f.write_bytes(old)
    assert fingerprint_of(pkgs) == base
    (top["tessera"] / "notes.txt").write_text("changed")
    (top["tessera"] / "__pycache__" / "y.pyc").write_bytes(b"new")
    prebuilt = top["tessera.runtime"] / "host" / "prebuilt"  # the engine built at install time (setup.py)
    prebuilt.mkdir()
    (prebuilt / "engine-0.o").write_bytes(b"\x7fELF")
    (prebuilt / "engine-0.o.sha256").write_text("0" * 64 + "\n")
    (prebuilt / "prelude-0.hpp").write_text('#include "../tessera_host.h"\n')  # and the precompiled prelude
    (prebuilt / "prelude-0.hpp.gch").write_bytes(b"gpch")
    (prebuilt / "prelude-0.hpp.gch.sha256").write_text("0" * 64 + "\n")
    assert fingerprint_of(pkgs) == base
    (top["tessera.transpile"] / "new_pass.py").write_text("")
    assert fingerprint_of(pkgs) != base  # a new file counts, even empty
    (top["tessera.transpile"] / "new_pass.py").rename(top["tessera.transpile"] / "other_pass.py")
    renamed = fingerprint_of(pkgs)
    assert renamed != base and fingerprint_of([*pkgs[:4], ("tessera.templates", None)]) != renamed


def test_fingerprint_of_this_installation() -> None:
    from tessera.runtime.cache import fingerprint as fp

    dirs = dict(fp._package_dirs())
    assert set(dirs) == set(PACKAGES) and all(dirs.values())
    files = {f"{pkg}/{rel}" for pkg, top in dirs.items() for rel in fp._files(top, set())}
    for want in ("tessera/api.py", "tessera.transpile/render.py", "tessera.grammar/tsr.lark",
                 "tessera.templates/module.cu.j2", "tessera.templates/device/core.cuh",
                 "tessera.templates/tessera_copy.cuh", "tessera.runtime/host/tessera_host.h", "tessera.runtime/host/build.py"):
        assert want in files, want
    assert fp.fingerprint() == fp.fingerprint_of(fp._package_dirs())


def test_a_wheel_ships_every_template() -> None:
    """Every template file (the module template, every device header section) matches a
    package-data pattern, so a wheel holds it and an installed wheel's fingerprint covers it."""
    from tessera.runtime.cache.fingerprint import SUFFIXES

    tomllib = pytest.importorskip("tomllib")  # Python 3.11
    root = ROOT
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    templates = root / "templates"
    shipped = {p for pattern in patterns["tessera.templates"] for p in templates.glob(pattern)}
    files = {p for p in templates.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES) and p.suffix != ".py"}
    assert files and files <= shipped, sorted(str(p.relative_to(templates)) for p in files - shipped)


def test_fingerprint_is_computed_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.runtime.cache import fingerprint as fp

    calls = []
    real = fp.fingerprint_of
    monkeypatch.setattr(fp, "_value", None)
    monkeypatch.setattr(fp, "fingerprint_of", lambda pkgs: calls.append(1) or real(pkgs))
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(fp.fingerprint())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(set(results)) == 1 and len(results) == 8


def test_cache_info_shows_the_fingerprint(tmp_path: Path) -> None:
    from tessera.runtime.cache.fingerprint import fingerprint

    env = dict(os.environ, TESSERA_CACHE_DIR=str(tmp_path / "c"))
    out = subprocess.run([sys.executable, "-m", "tessera", "cache", "info"], env=env, check=True,
                         capture_output=True, text=True).stdout
    assert f"compiler fingerprint: {fingerprint()}" in out


# ---- a changed compiler, a warm cache ----------------------------------------------------------

KERNEL = "@kernel tile[(32,)]\ndef k(y: mut f32[n]):\n    y[tile_linear_id()] = 2.5\n"
RUN = textwrap.dedent(
    """
    import json, sys
    import numpy as np, tessera
    import tessera.transpile, tessera.runtime, tessera.templates
    y = np.zeros(32, np.float32)
    tessera.load(sys.argv[1], backend="cpu").k(y, grid=1)
    print(json.dumps({"sum": float(y.sum()), "compiled": "tessera.frontend.parser" in sys.modules,
                      "from": [m.__file__ for m in (tessera, tessera.transpile, tessera.runtime, tessera.templates)]}))
    """
)


def _copy_installed_package(dest: Path) -> Path:
    """tessera and its subpackages, found through importlib, copied into dest/tessera/..."""
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.submodule_search_locations, name
        sub = name.split(".")[1:]
        shutil.copytree(spec.submodule_search_locations[0], dest.joinpath("tessera", *sub), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return dest / "tessera"


def _libraries_with(cache: Path, marker: bytes) -> list[Path]:
    return [p for p in cache.rglob("*.so") if marker in p.read_bytes()]


def test_a_changed_compiler_is_seen_through_a_warm_cache(tmp_path: Path) -> None:
    """A changed template, host prelude, then printer rule: each is compiled in, never served stale."""
    pkg = _copy_installed_package(tmp_path / "site")
    sample = tmp_path / "k.tsr"
    sample.write_text(KERNEL)
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"), TESSERA_CACHE_DIR=str(cache))

    def run(total: float = 80.0) -> dict:
        proc = subprocess.run([sys.executable, "-c", RUN, str(sample)], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["sum"] == total and all(f.startswith(str(pkg)) for f in out["from"]), out
        return out

    assert run()["compiled"]
    assert not run()["compiled"]  # warm: nothing parsed

    def mark(path: Path, marker: str) -> bytes:
        # A string the library keeps (`used`), so the built library shows which text it came from.
        line = f'static const char tsr_marker_{marker}[] __attribute__((used)) = "tsr-marker-{marker}";\n'
        path.write_text(line + path.read_text())
        return f"tsr-marker-{marker}".encode()

    template = mark(pkg / "templates" / "module.cu.j2", "template")
    assert run()["compiled"]
    assert len(_libraries_with(cache, template)) == 1
    assert not run()["compiled"]

    prelude = mark(pkg / "runtime" / "host" / "tessera_host.h", "prelude")
    assert run()["compiled"]
    assert len(_libraries_with(cache, prelude)) == 1

    # A printer rule: float literals printed twice their value. The next run prints the new C.
    printer = pkg / "transpile" / "emit" / "exprs.py"
    rule = "        text = c_literal(e.value, e.dtype)\n"
    assert rule in printer.read_text()
    printer.write_text(printer.read_text().replace(
        rule, "        text = c_literal(e.value * 2 if isinstance(e.value, float) else e.value, e.dtype)\n"))
    assert run(160.0)["compiled"]
    assert not run(160.0)["compiled"]
