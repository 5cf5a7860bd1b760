"""Shared fixtures. `--update-golden` rewrites tests/golden/*.cu from the current compiler."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Callable
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*.tsr"))

# The CPU backend compiles a region-mode kernel with a loop once, for the clone this CPU picks
# (runtime/host/clones.py: the same code runs, in half the compiler's time), unless the run asks for
# both; the tests of the clones themselves ask for both (TESSERA_CPU_CLONES=all).
os.environ.setdefault("TESSERA_CPU_CLONES", "host")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite the golden .cu files")
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (the long forms of the random generators)")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


# The longest tests (10-75 s of CPU each on a machine without a GPU: nvcc and NVRTC compiles of large
# kernels, mypy, random generators), longest first: they run first, so that pytest-xdist's workers do not end
# the run with one of them still running while the others have nothing left to take.
RUN_FIRST = (
    "tests/runtime/cuda/test_cuda_backend.py::test_eight_processes_compile_the_same_kernels_with_a_cold_cache",
    "tests/transpile/test_samples.py::test_nvcc_compiles_every_sample_without_warnings",
    "tests/transpile/test_threads.py::test_600_compiles_from_16_threads",
    "tests/test_quality.py::test_mypy_reports_no_errors",
    "tests/transpile/cpu/test_cpu_region_hoist_random.py::test_random_uniform_locals_and_guards",
    "tests/language/tensor_cores/test_fdiv.py::test_a_dividing_fragment_statement_costs_no_call_and_few_registers",
    "tests/language/test_pipelines_in_loops.py::"
    "test_random_pipelines_with_barriers_and_shared_stages_match_the_model_and_plain_loops",
    "tests/language/test_shared_reuse_random.py::test_reuse_gives_the_results_of_no_reuse_and_overlaps_no_live_arrays",
    "tests/language/tensor_cores/test_frag_device_functions.py::test_device_function_forms_compile_with_nvrtc_without_spills",
    "tests/language/hopper/test_tma_copies.py::test_the_samples_machine_code_for_sm_90a",
    "tests/language/hopper/test_tma_copies.py::test_generated_pipelines_match_the_model_and_sm_90",
    "tests/language/test_semantics.py::test_integer_expressions_match_c_semantics",
    "tests/language/test_scalar_folding.py::test_random_scalar_expressions_fold_as_they_compute",
    "tests/language/test_pipelines_in_loops.py::test_random_pipeline_programs_in_loops_and_conditions_match_the_model",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` run only where a CUDA driver and device are present, `multi_gpu` ones
    only where there are at least two devices, `torch` ones only where PyTorch is installed, `slow`
    ones (the long forms of random generators whose bounded forms always run) only with --slow; the
    tests of RUN_FIRST first, in its order."""
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
    first = [item for item in items if item.nodeid.split("[")[0] in RUN_FIRST]
    firsts = set(map(id, first))
    first.sort(key=lambda item: RUN_FIRST.index(item.nodeid.split("[")[0]))
    items[:] = first + [item for item in items if id(item) not in firsts]


def session_cache(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The on-disk cache folder of the whole test run, shared by pytest-xdist's workers (each
    worker's base temporary folder lies in the run's): a kernel is built once per run, not once
    per worker (the cache takes concurrent writers)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "cache"


CPU_MODES = ("regions", "fibers", "check_bounds")


@contextlib.contextmanager
def cpu_mode_module(source: str, mode: str, path: str, tmp_path_factory: pytest.TempPathFactory):
    """`source` compiled for the CPU backend in one of `CPU_MODES` (region mode, fiber mode, region
    mode with check_bounds) through the run's shared cache; the mode's environment stays set while
    the module is in use (a module-scoped fixture yields inside this)."""
    import tessera

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TESSERA_CACHE_DIR", str(session_cache(tmp_path_factory)))
        mp.delenv("TESSERA_BACKEND", raising=False)
        mp.setenv("TESSERA_CPU_REGIONS", "0" if mode == "fibers" else "1")
        yield tessera.compile(source, backend="cpu", check_bounds=mode == "check_bounds", path=path)


@pytest.fixture
def shared_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """One on-disk cache for the whole test run (`session_cache`: warm after the first build of a
    kernel), and the backend chosen by each test rather than by $TESSERA_BACKEND."""
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(session_cache(tmp_path_factory)))
    monkeypatch.delenv("TESSERA_BACKEND", raising=False)


@pytest.fixture
def one_build_per_c(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU backend builds emitted C with the default target in its first line (`// Generated by
    tesserac ... for sm_80. Do not edit.`, a comment): one program compiled for several targets whose
    C is otherwise the same (every sample for sm_80 and sm_90, most for sm_90a too) is one library,
    built once and then found in the cache, instead of one g++ build per target."""
    from tessera.base.options import CompileOptions
    from tessera.runtime.host import library

    real = library.build_library
    default = CompileOptions().arch

    def build(cuda: str, kernels):  # type: ignore[no-untyped-def]
        first, rest = cuda.split("\n", 1)
        return real(re.sub(r" for sm_[0-9]+a?\. Do not edit\.$", f" for {default}. Do not edit.", first) + "\n" + rest,
                    kernels)

    monkeypatch.setattr(library, "build_library", build)


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


# A random generator's examples past its first COVERED_EXAMPLES run with coverage paused (`--cov`):
# their lines are the ones the first examples reached, and the tracer made them 2-3 times slower.
COVERED_EXAMPLES = 30


def pause_coverage() -> Callable[[], None] | None:
    """Stop every running coverage measurement (under pytest-xdist a worker runs two, one above the
    other: stopping only the upper one, as pytest-cov's `no_cover` does, hands the tracer to the
    lower); returns what starts them again in their order, or None where none was running."""
    try:
        from coverage import Coverage
    except ImportError:  # pragma: no cover - pytest-cov brings coverage
        return None
    stopped = []
    while (cov := Coverage.current()) is not None:
        cov.stop()
        stopped.append(cov)

    def resume() -> None:
        for cov in reversed(stopped):
            cov.start()

    return resume if stopped else None


@contextlib.contextmanager
def coverage_paused():  # type: ignore[no-untyped-def]
    """Coverage paused (`pause_coverage`) inside the block and measured again after it: for many
    repetitions of work whose lines the test has measured once already (threads started inside the
    block are not traced either)."""
    resume = pause_coverage()
    try:
        yield
    finally:
        if resume is not None:
            resume()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    """A Hypothesis test (`@given`) under `--cov` measures coverage for its first COVERED_EXAMPLES
    examples only; every example still runs and checks what it checks."""
    handle = getattr(getattr(item, "obj", None), "hypothesis", None)
    if handle is None:
        yield
        return
    inner, seen, resume = handle.inner_test, [0], [None]

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen[0] += 1
        if seen[0] == COVERED_EXAMPLES + 1:
            resume[0] = pause_coverage()
        return inner(*args, **kwargs)

    handle.inner_test = counted
    try:
        yield
    finally:
        handle.inner_test = inner
        if resume[0] is not None:
            resume[0]()


@pytest.fixture
def covered_sample():  # type: ignore[no-untyped-def]
    """`covered_sample(items, every)`: the items, one in `every` of them (the first, then each
    every-th) taken with coverage measured (`--cov`) and the others with it paused: a test looping
    over many cases of the same kind measures the lines its spread of cases reaches, without the
    tracer's 2-3x on each of them. Every item is still taken; coverage is measured again once the
    items are all taken (or at the end of the test)."""
    paused: list[Callable[[], None] | None] = [None]

    def resume() -> None:
        if paused[0] is not None:
            paused[0]()
            paused[0] = None

    def sample(items, every: int):  # type: ignore[no-untyped-def]
        for i, item in enumerate(items):
            if i % every == 0:
                resume()
            elif paused[0] is None:
                paused[0] = pause_coverage()
            yield item
        resume()

    yield sample
    resume()


@pytest.fixture(autouse=True)
def tessera_environment_restored():
    """Each test leaves the TESSERA_* environment variables as it found them (a test that sets one
    uses monkeypatch or a fixture such as `shared_cache`): a variable left behind changes what the
    later tests of the worker do, the cache they use for one."""
    before = {k: v for k, v in os.environ.items() if k.startswith("TESSERA_")}
    yield
    after = {k: v for k, v in os.environ.items() if k.startswith("TESSERA_")}
    if after != before:
        for k in after.keys() - before.keys():
            del os.environ[k]
        os.environ.update(before)
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        pytest.fail(f"the test left the environment changed: {', '.join(changed)}")


@pytest.fixture(scope="session", autouse=True)
def lean_link_never_fell_back():
    """At the end of the session: no library needed the full link (`host_build._link`); the tests
    that make the lean link fail restore the record they change."""
    yield
    from tessera.runtime.host import build as host_build

    assert not host_build._FULL_LINK_ONLY, "a kernel library could not be linked without the C++ runtime"
