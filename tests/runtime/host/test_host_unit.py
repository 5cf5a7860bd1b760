"""The kernel unit's compiler started before its source exists (`tessera.runtime.host.unit`): the
first build takes it; whatever goes wrong with it, the unit is compiled as before, with the same
results and the same errors; an unused one is killed and leaves nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera.runtime.host import build as host_build
from tessera.runtime.host import library as cpu
from tessera.runtime.host import unit as host_unit
from tests.conftest import record_runs, skip_without_cxx

skip_without_cxx()

KERNEL = """\
@kernel tile[(64,)]
def twice(x: f32[n], y: mut f32[n]):
    i = global_linear_id()
    if i < n:
        y[i] = 2.0 * x[i] + {c}
"""
BROKEN_CU = "int tsr_broken() {\n    return undeclared_name;  // line 7\n}\n"
WRAPPER = '#include "kernel.cu"\n'


@pytest.fixture
def units(monkeypatch: pytest.MonkeyPatch, fresh_cache: Path) -> list[list[str]]:
    """No unit waiting, none discarded; returns the kernel-unit compiles `_run` starts (not the unit's)."""
    host_unit.discard()
    monkeypatch.setattr(host_unit, "_closed", [False])
    compiles = record_runs(monkeypatch, "-c")
    yield compiles
    host_unit.discard()


def _runs(c: int) -> None:
    x = np.arange(300, dtype=np.float32)
    y = np.zeros_like(x)
    tessera.compile(KERNEL.format(c=f"{c}.0"), backend="cpu").twice[5](x, y)
    np.testing.assert_array_equal(y, 2 * x + c)


def _start(command: object = None) -> host_unit.StartedUnit:
    """A unit started as in a new process (none started yet, no build yet)."""
    host_unit._closed[0] = False
    cxx = host_build.find_cxx()
    if command is None:
        host_build.start_unit(cxx)
    else:
        host_unit.start(cxx, command)  # type: ignore[arg-type]
    assert host_unit._UNIT, "the unit did not start"
    return host_unit._UNIT[0]


def test_the_first_build_takes_the_started_unit(units: list[list[str]]) -> None:
    unit = _start()
    _runs(1)
    assert not host_unit._UNIT and units == []  # compiled by the unit, not anew
    assert unit.proc.returncode == 0 and not unit.folder.exists()
    host_build.start_unit(host_build.find_cxx())
    assert not host_unit._UNIT  # none is started after the first build
    _runs(2)  # the next build compiles as before
    assert len(units) == 1


def test_a_unit_that_failed_before_its_source_came_is_replaced(units: list[list[str]]) -> None:
    _start(lambda folder, main: [sys.executable, "-c", "raise SystemExit(3)"]).proc.wait()
    _runs(3)
    assert len(units) == 1 and not host_unit._UNIT


def _empty_include(folder: Path, main: Path) -> list[str]:
    """The unit's command, its main file including an empty file instead of the pipe (a compiler
    that reads nothing from a pipe)."""
    main.write_text(host_unit.MAIN_TEXT.replace("/dev/stdin", "/dev/null"))
    return host_build.kernel_command(host_build.find_cxx(), main, folder / "kernel.o",
                                     host_build.stub_headers(folder / "stubs"), ("-iquote", str(folder)))


def test_a_compiler_that_reads_nothing_from_the_pipe_stops_at_the_units_error() -> None:
    unit = host_unit.StartedUnit(host_build.find_cxx(), _empty_include)
    try:
        (unit.folder / "kernel.cu").write_text('extern "C" int tsr_one() { return 1; }\n')
        outcome = unit.finish(WRAPPER)
    finally:
        unit.discard()
    assert outcome is not None and outcome.returncode != 0
    assert "the kernel unit was not read from the pipe" in outcome.stderr
    assert not unit.folder.exists()


def test_such_a_unit_is_replaced_by_a_compile_as_before(units: list[list[str]]) -> None:
    _start(_empty_include)  # it fails before or after the build takes it, depending on timing
    _runs(4)
    assert len(units) == 1 and not host_unit._UNIT  # compiled anew, and the results are right


def test_a_compile_error_in_the_unit_is_reported_as_without_it(units: list[list[str]], tmp_path: Path) -> None:
    with pytest.raises(tessera.CompileError) as without:
        host_build.build_shared_library(BROKEN_CU, WRAPPER, tmp_path / "a.so")
    _start()
    with pytest.raises(tessera.CompileError) as with_unit:
        host_build.build_shared_library(BROKEN_CU, WRAPPER, tmp_path / "b.so")
    assert str(with_unit.value) == str(without.value)
    assert "undeclared_name" in str(without.value)
    assert not host_unit._UNIT and len(units) == 2


def test_other_flags_do_not_take_the_unit(units: list[list[str]], tmp_path: Path) -> None:
    _start()
    cu = "extern \"C\" int tsr_one() { return 1; }\n"
    host_build.build_shared_library(cu, WRAPPER, tmp_path / "a.so", extra_flags=("-DTSR_TEST_FLAG=1",))
    assert len(units) == 1 and "-DTSR_TEST_FLAG=1" in units[0]
    assert host_unit._UNIT  # still waiting for a build with the usual flags


def test_a_library_from_the_cache_kills_the_unit(units: list[list[str]]) -> None:
    module = tessera.compile(KERNEL.format(c="5.0"), backend="cpu")
    x = np.arange(300, dtype=np.float32)
    module.twice[5](x, np.zeros_like(x))  # built and cached (no unit was waiting)
    unit = _start()
    assert cpu.cached_library(module._plain["twice"][0].library_key) is not None
    assert not host_unit._UNIT and unit.proc.returncode is not None and not unit.folder.exists()
    host_unit.start(host_build.find_cxx(), lambda folder, main: ["true"])
    assert not host_unit._UNIT  # none is started after that


def test_a_unit_nobody_takes_is_killed_after_a_while(units: list[list[str]],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_unit, "IDLE_SECONDS", 0.2)
    unit = _start()
    unit.proc.wait(timeout=30)
    for _ in range(100):
        if not host_unit._UNIT and not unit.folder.exists():
            break
        time.sleep(0.05)
    assert not host_unit._UNIT and not unit.folder.exists()


def test_a_process_that_never_builds_leaves_no_compiler_and_no_folder(tmp_path: Path) -> None:
    code = ("from tessera.runtime.host import build, library, unit\n"
            "build.start_unit(build.find_cxx())\n"
            "u = unit._UNIT[0]\nprint(u.folder, u.proc.pid)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    folder, pid = out.stdout.split()
    assert not Path(folder).exists()
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def test_a_forked_child_does_not_hold_the_unit_open(units: list[list[str]]) -> None:
    # The child holds copies of the unit's pipes; unless it closes them, the compiler never reads
    # end of file and the parent's build waits for as long as the child lives.
    unit = _start()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        time.sleep(20)
        os._exit(0)
    try:
        start = time.perf_counter()
        _runs(6)
        assert time.perf_counter() - start < 15 and units == [] and unit.proc.returncode == 0
        unit = _start()
        start = time.perf_counter()
        host_unit.discard()
        assert time.perf_counter() - start < 15 and not unit.folder.exists()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_taken_unit_stops_its_idle_timer(units: list[list[str]]) -> None:
    unit = _start()
    assert unit.timer is not None and unit.timer.is_alive()
    _runs(7)
    unit.timer.join(5)
    assert not unit.timer.is_alive()


def test_no_unit_for_a_compiler_behind_ccache(units: list[list[str]]) -> None:
    host_unit._closed[0] = False
    host_build.start_unit(["/usr/bin/ccache", *host_build.find_cxx()])
    assert not host_unit._UNIT
