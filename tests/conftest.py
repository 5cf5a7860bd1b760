"""Shared fixtures. `--update-golden` rewrites tests/golden/*.cu from the current compiler."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*.tsr"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite the golden .cu files")
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (the long forms of the random generators)")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` run only where a CUDA driver and device are present, `multi_gpu` ones
    only where there are at least two devices, `torch` ones only where PyTorch is installed, `slow`
    ones (the long forms of random generators whose bounded forms always run) only with --slow."""
    from tessera.runtime.devices import cuda_status

    ok, why = cuda_status()
    count = int(why.split()[0]) if ok else 0  # "N CUDA device(s) found"
    skip = pytest.mark.skip(reason=f"needs a GPU: {why}")
    skip_multi = pytest.mark.skip(reason=f"needs two GPUs: {why if not ok else f'{count} found'}")
    skip_torch = pytest.mark.skip(reason="needs PyTorch (pip install torch)")
    has_torch = importlib.util.find_spec("torch") is not None
    skip_slow = pytest.mark.skip(reason="slow: run with --slow")
    for item in items:
        if "slow" in item.keywords and not config.getoption("--slow"):
            item.add_marker(skip_slow)
        if "gpu" in item.keywords and not ok:
            item.add_marker(skip)
        elif "multi_gpu" in item.keywords and count < 2:
            item.add_marker(skip_multi)
        elif "torch" in item.keywords and not has_torch:
            item.add_marker(skip_torch)


def session_cache(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The on-disk cache folder of the whole test run, shared by pytest-xdist's workers (each
    worker's base temporary folder lies in the run's): a kernel is built once per run, not once
    per worker (the cache takes concurrent writers)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "cache"


@pytest.fixture
def shared_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """One on-disk cache for the whole test run (`session_cache`: warm after the first build of a
    kernel), and the backend chosen by each test rather than by $TESSERA_BACKEND."""
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(session_cache(tmp_path_factory)))
    monkeypatch.delenv("TESSERA_BACKEND", raising=False)


@pytest.fixture
def fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> pathlib.Path:
    """A cold on-disk cache under tmp_path (its private fallback there too) and a clean record of
    the cache's once-per-process warnings; returns the cache root."""
    from tessera.runtime.cache import disk as cache_mod

    monkeypatch.setattr(cache_mod, "_warned", set())
    monkeypatch.setattr(cache_mod, "_resolved", {})
    monkeypatch.setattr(cache_mod, "private_cache_root", lambda: tmp_path / "private")
    root = tmp_path / "cache"
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(root))
    return root


def cache_warnings(record: list) -> list[str]:
    """The messages of the cache's warnings among `record` (from warnings.catch_warnings)."""
    from tessera.runtime.cache.disk import TesseraCacheWarning

    return [str(w.message) for w in record if issubclass(w.category, TesseraCacheWarning)]


def load_script(relpath: str, name: str) -> ModuleType:
    """A file of the repository that no package holds (setup.py, bench/*.py, scripts/*.py), loaded as
    module `name`, once (registered in sys.modules: dataclasses look their module up there)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / relpath)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def sample_of(kernel: str) -> str:
    """The sample file that defines `kernel` (a kernel with a case in samples/runner.py)."""
    return str(next(p for p in SAMPLES if f"def {kernel}(" in p.read_text() or f"def {kernel}[" in p.read_text()))


@pytest.fixture
def no_prebuilt_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    """No engine built at install time (an empty prebuilt folder): the engine's build, prefetch and
    cache are what a test of them exercises."""
    from tessera.runtime.host import build as host_build

    empty = tmp_path / "no-prebuilt-engine"
    empty.mkdir()
    monkeypatch.setattr(host_build, "prebuilt_dir", lambda: empty)
    monkeypatch.setattr(host_build, "_PRELUDES", {})


def skip_without_cxx() -> None:
    """Skip the calling test module where there is no C++ compiler for the CPU backend."""
    from tessera.base.errors import TesseraError
    from tessera.runtime.host import build as host_build

    try:
        host_build.find_cxx()
    except TesseraError:  # pragma: no cover - every supported machine has one
        pytest.skip("no C++ compiler", allow_module_level=True)


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The C names of the kernels launched on the CPU backend from now on in this test, in order
    (they still run): which variant really ran. Both the usual launch and a kernel's direct
    launcher end in `PreparedLaunch.run` of the kernel's entry point `tsr_launch_<C name>`."""
    from tessera.runtime.host.launch import PreparedLaunch

    calls: list[str] = []
    real = PreparedLaunch.run

    def spy(self, *a, **kw):  # type: ignore[no-untyped-def]
        calls.append(self.fn.__name__.removeprefix("tsr_launch_"))
        return real(self, *a, **kw)

    monkeypatch.setattr(PreparedLaunch, "run", spy)
    return calls


def record_runs(monkeypatch: pytest.MonkeyPatch, flag: str) -> list[list[str]]:
    """The C++ compiler commands with `flag` that `host_build._run` runs from now on in this test
    (they still run): "-c" for kernel-unit compiles, "-shared" for links."""
    from tessera.runtime.host import build as host_build

    seen: list[list[str]] = []
    run = host_build._run

    def recording(cmd: list[str], cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
        if flag in cmd:
            seen.append(cmd)
        return run(cmd, cwd)

    monkeypatch.setattr(host_build, "_run", recording)
    return seen


@pytest.fixture(scope="session", autouse=True)
def lean_link_never_fell_back():
    """At the end of the session: no library needed the full link (`host_build._link`); the tests
    that make the lean link fail restore the record they change."""
    yield
    from tessera.runtime.host import build as host_build

    assert not host_build._FULL_LINK_ONLY, "a kernel library could not be linked without the C++ runtime"
