"""The user's process survives the CPU backend: large frames get large enough fiber stacks, a
stack overflow is a LaunchError, a launch that never ends can be interrupted (Ctrl-C) or timed
out, aliasing arguments are refused where the kernel assumes none, and a failed host build is
reported at the .tsr line."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tessera
from tessera.base.errors import CompileError, LaunchError, SourceFile
from tessera.base.kernel_info import kernels_from_json, kernels_to_json
from tessera.base.options import CompileOptions
from tessera.runtime.host.build import build_shared_library
from tessera.transpile.driver import compile_source
from tests.conftest import ROOT, session_cache

pytestmark = pytest.mark.usefixtures("shared_cache")


PROGRAM = """
@device
def depth(n: i32) -> i32:
    if n <= 0:
        return 0
    x = depth(n - 1)
    return (x ^ (x >> 1)) + n

@kernel tile[(32,)]
def big_frames(out: mut f64[n]):
    t = tile_linear_id()
    a = tregs(f64[4096], 1.0)
    b = tregs(f64[4096], 2.0)
    for i in range(4096):
        a[i] = a[i] + b[(i * 7 + t) % 4096] * f64(i % 3)
    out[t] = a[t] + a[4095 - t]

@kernel tile[(32,)]
def recurse(out: mut i32[n], d: i32):
    t = tile_linear_id()
    out[t] = depth(d + t)

@kernel tile[(64,)]
def spin(out: mut i32[n]):
    t = tile_linear_id()
    while True:
        out[t] += 1

@kernel tile[(64,)]
def add_one(x: f32[n], y: mut f32[n]):
    t = global_linear_id()
    if t < n:
        y[t] = x[t] + 1.0
"""


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TESSERA_CACHE_DIR", str(session_cache(tmp_path_factory)))
        yield tessera.compile(PROGRAM, backend="cpu")


def _depth(n: int) -> int:
    x = 0
    for k in range(1, n + 1):
        x = (x ^ (x >> 1)) + k
    return x


def test_two_large_register_arrays_get_a_large_enough_stack(mod) -> None:
    out = np.zeros(32)
    mod.big_frames(out, grid=1)
    a = 1.0 + 2.0 * (np.arange(4096) % 3)
    assert np.array_equal(out, a[np.arange(32)] + a[4095 - np.arange(32)])


def test_unbounded_recursion_is_a_launch_error_and_the_library_stays_usable(mod) -> None:
    out = np.zeros(32, np.int32)
    mod.recurse(out, 50, grid=1)
    assert out.tolist() == [_depth(50 + t) for t in range(32)]
    for _ in range(2):
        with pytest.raises(LaunchError, match=r"^recurse: stack overflow: the tile used more than its \d+ KiB stack"):
            mod.recurse(out, 10**8, grid=4)
    mod.recurse(out, 7, grid=1)
    assert out.tolist() == [_depth(7 + t) for t in range(32)]


def _signal_state(pid: int) -> str:
    """What a child that did not stop after SIGINT was doing: each thread's signal masks and
    state from /proc, and its stacks where gdb is installed (a failing test's message)."""
    lines = []
    for task in sorted(os.listdir(f"/proc/{pid}/task")):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
            with open(f"/proc/{pid}/task/{task}/wchan") as f:
                wchan = f.read()
        except OSError:
            continue
        keys = ("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")
        lines.append(f"thread {task} wchan={wchan} " + " ".join(f"{k}={status.get(k)}" for k in keys))
    with open("/proc/thread-self/status") as f:
        lines += [f"this test's thread: {line.strip()}" for line in f if line.startswith(("SigBlk", "SigIgn"))]
    if shutil.which("gdb"):
        gdb = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 12"],
                             capture_output=True, text=True, timeout=60)
        lines.append(gdb.stdout[-6000:])
    return "\n".join(lines)


def _communicate(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child did not stop after SIGINT:\n{_signal_state(proc.pid)}")


CHILD = textwrap.dedent("""
    import sys, time, numpy as np, tessera
    mod = tessera.compile(sys.argv[1], backend="cpu")
    out = np.zeros(64, np.int32)
    mod.add_one(np.zeros(64, np.float32), np.zeros(64, np.float32), grid=1)  # built and loaded
    print("ready", flush=True)
    t0 = time.monotonic()
    try:
        if sys.argv[2] == "overflow":
            mod.recurse(out, 10**8, grid=2)
        elif sys.argv[2] == "spin-timeout":
            mod.spin(out, grid=4, timeout=3)
        else:
            mod.spin(out, grid=4)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", round(time.monotonic() - t0, 1))
    except tessera.LaunchError as e:
        print("LaunchError", e)
    y = np.zeros(64, np.float32)
    mod.add_one(np.ones(64, np.float32), y, grid=1)
    print("still alive", y[0])
""")


def _sigint_default() -> None:
    """A child starts as from a terminal, SIGINT at its default action, so that Python installs its
    handler: a test run started in the background (a shell's `cmd &`, or nohup) has SIGINT ignored,
    and an ignored signal stays ignored in every process started from it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _sigint_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _child(mode: str, sigint=_sigint_default) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, PROGRAM, mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=dict(os.environ), preexec_fn=sigint)


def test_stack_overflow_in_a_subprocess_does_not_kill_it() -> None:
    proc = _child("overflow")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert lines[0] == "ready" and lines[1].startswith("LaunchError recurse: stack overflow"), out
    assert lines[2] == "still alive 2.0"


def _interrupted(proc: subprocess.Popen, after: float = 2.0) -> str:
    """SIGINT to the child `after` seconds after it printed "ready" (well inside its endless launch,
    also when it runs slowly under coverage); its output once it has exited with status 0."""
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(after)
        proc.send_signal(signal.SIGINT)
        out, err = _communicate(proc, 60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    return out


def test_ctrl_c_stops_a_launch_that_never_reaches_a_barrier() -> None:
    out = _interrupted(_child("spin"))
    lines = out.splitlines()
    assert lines[0].startswith("KeyboardInterrupt") and float(lines[0].split()[1]) < 10, out
    assert lines[1] == "still alive 2.0"


def test_an_ignored_sigint_leaves_the_launch_to_its_timeout() -> None:
    """SIGINT ignored in the process (as under nohup or a shell's `&`): Ctrl-C does not stop the
    launch, as it would not stop Python code; the launch's timeout still does."""
    out = _interrupted(_child("spin-timeout", sigint=_sigint_ignored), after=1.0)
    lines = out.splitlines()
    assert lines[0].startswith("LaunchError spin: the launch did not finish within the timeout of 3 s"), out
    assert lines[1] == "still alive 2.0"


def test_a_sigint_pending_in_python_stops_the_launch_before_it_starts(mod, monkeypatch) -> None:
    """A SIGINT that reached Python's handler after Python last looked, just before the launch read
    the count, is handled before the launch starts (PyErr_CheckSignals raises KeyboardInterrupt):
    stand-ins for that pending SIGINT and for Python's handler in place."""
    from tessera.runtime.host import launch

    def pending() -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(launch, "_check_signals", pending)
    monkeypatch.setattr(launch, "_sigint_handler", lambda: signal.default_int_handler)
    out = np.zeros(64, np.int32)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        mod.spin(out, grid=4, timeout=5)
    assert time.monotonic() - t0 < 4 and not out.any()
    launch._front[0].unwatch()  # Python's handler back in front, as before the test
    launch._front[0] = None


TWO_LIBRARIES = """
import time, numpy as np, tessera
a = tessera.compile("@kernel tile[(32,)]\\ndef k(y: mut f32[n]):\\n    y[tile_linear_id()] = 1.0\\n", backend="cpu")
b = tessera.compile("@kernel tile[(64,)]\\ndef spin(out: mut i32[n]):\\n    t = tile_linear_id()\\n"
                    "    while True:\\n        out[t] += 1\\n", backend="cpu")
a.k(np.zeros(32, np.float32), grid=1)  # a's launch has had its SIGINT handler in front
print("ready", flush=True)
try:
    b.spin(np.zeros(64, np.int32), grid=2)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
a.k(np.zeros(32, np.float32), grid=1)
print("still alive", flush=True)
"""


def test_ctrl_c_stops_a_launch_of_a_second_library() -> None:
    """Each kernel library has its own SIGINT handler: the one whose launch runs is in front."""
    out = _interrupted(subprocess.Popen([sys.executable, "-c", TWO_LIBRARIES], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, cwd=ROOT, env=dict(os.environ),
                                        preexec_fn=_sigint_default))
    assert out.split() == ["KeyboardInterrupt", "still", "alive"], out


HANDLER_STAYS = """
import os, signal, threading, time, numpy as np, tessera
src = "@kernel tile[(64,)]\\ndef spin(out: mut i32[n]):\\n    t = tile_linear_id()\\n    while True:\\n        out[t] += 1\\n"
a = tessera.compile(src + "\\n@kernel tile[(32,)]\\ndef k(y: mut f32[n]):\\n    y[tile_linear_id()] = 1.0\\n",
                    backend="cpu")
b = tessera.compile("@kernel tile[(32,)]\\ndef k(y: mut f32[n]):\\n    y[tile_linear_id()] = 2.0\\n", backend="cpu")
def ctrl_c(after):
    threading.Timer(after, os.kill, (os.getpid(), signal.SIGINT)).start()
def spin(what):
    ctrl_c(1.0)
    try:
        a.spin(np.zeros(64, np.int32), grid=2)
    except KeyboardInterrupt:
        print(what, flush=True)
for _ in range(3):
    a.k(np.zeros(32, np.float32), grid=1)
b.k(np.zeros(32, np.float32), grid=1)  # b's handler in front: a's goes back first
spin("after-another-library")
signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's handler replaces a's
spin("after-signal.signal")
ctrl_c(0.5)
try:
    time.sleep(60)
except KeyboardInterrupt:
    print("between-launches", flush=True)
a.k(np.zeros(32, np.float32), grid=1)
print("still-alive", flush=True)
"""


def test_ctrl_c_stops_launches_while_the_handler_stays_in_front() -> None:
    """A library's SIGINT handler stays in front between its launches (one sigaction a launch):
    Ctrl-C still stops a launch after another library's launch and after Python's handler was set
    again, and between launches it raises KeyboardInterrupt as Python's handler does."""
    proc = subprocess.Popen([sys.executable, "-c", HANDLER_STAYS], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env=dict(os.environ), preexec_fn=_sigint_default)
    try:
        out, err = _communicate(proc, 180)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.split() == ["after-another-library", "after-signal.signal", "between-launches", "still-alive"], out


def test_timeout_cancels_an_endless_launch(mod) -> None:
    out = np.zeros(64, np.int32)
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=r"^spin: the launch did not finish within the timeout of 0.3 s"):
        mod.spin(out, grid=3, timeout=0.3)
    assert time.monotonic() - t0 < 10
    y = np.zeros(64, np.float32)
    mod.add_one(np.ones(64, np.float32), y, grid=1, timeout=30)
    assert y[0] == 2.0


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "1", True])
def test_timeout_must_be_a_positive_number(mod, bad) -> None:
    with pytest.raises(LaunchError, match="timeout must be a positive number"):
        mod.add_one(np.ones(64, np.float32), np.zeros(64, np.float32), grid=1, timeout=bad)


def test_overlapping_arrays_are_refused_naming_both_parameters(mod) -> None:
    a = np.zeros(256, np.float32)
    with pytest.raises(LaunchError, match=r"^add_one\(\): parameters 'x' and 'y' overlap in memory and 'y' is mut"):
        mod.add_one(a, a, grid=4)
    with pytest.raises(LaunchError, match="parameters 'x' and 'y' overlap"):
        mod.add_one(a[0:128], a[64:192], grid=2)  # views of one base array
    mod.add_one(a[0:128], a[128:256], grid=2)  # adjacent, disjoint views are fine
    assert np.array_equal(a, np.r_[np.zeros(128), np.ones(128)])


def test_restrict_false_allows_aliasing_and_survives_a_warm_cache() -> None:
    text = "@kernel tile[(64,)]\ndef inc(x: f32[n], y: mut f32[n]):\n    t = global_linear_id()\n" \
           "    if t < n:\n        y[t] = x[t] + 1.0\n"
    result = compile_source(SourceFile("inc.tsr", text), options=CompileOptions(restrict=False))
    assert "__restrict__" not in result.cuda and result.kernels[0].restrict is False
    assert kernels_from_json(kernels_to_json(result.kernels)) == result.kernels
    assert "__restrict__" in compile_source(SourceFile("inc.tsr", text)).cuda
    for _ in range(2):  # the second module comes from the warm cache
        a = np.arange(128, dtype=np.float32)
        tessera.compile(text, backend="cpu", restrict=False).inc(a, a, grid=2)
        assert np.array_equal(a, np.arange(128) + 1)
        with pytest.raises(LaunchError, match="overlap"):
            tessera.compile(text, backend="cpu").inc(a, a, grid=2)
    with pytest.raises(tessera.TesseraError, match="restrict= must be True or False"):
        tessera.compile(text, backend="cpu", restrict="no")


def test_a_host_build_failure_is_reported_at_the_tsr_line(tmp_path) -> None:
    cuda = ('extern "C" __global__ void broken(float* x) {  // line 3: group 32\n'
            "    x[0] = 1.0f;  // line 4\n"
            "    x[1] = undefined_name;  // line 5\n"
            "}\n")
    with pytest.raises(CompileError) as info:
        build_shared_library(cuda, '#include "kernel.cu"\n', tmp_path / "bad.so")
    (diag,) = info.value.diagnostics
    assert diag.loc.line == 5 and "undefined_name" in diag.message
    assert "kernel.cu" not in str(info.value) and "wrapper.cpp" not in str(info.value)


def test_the_front_cache_is_keyed_on_the_runtime_sources(monkeypatch) -> None:
    """A warm start must not load a library built against another prelude or engine (its
    launch ABI may differ): the front cache key includes the compiler's fingerprint, which covers
    the runtime's sources."""
    from tessera.runtime.cache import fingerprint
    from tessera.runtime.host import library as cpu

    text = "@kernel tile[(32,)]\ndef k(y: mut f32[n]):\n    y[tile_linear_id()] = 3.0\n"
    y = np.zeros(32, np.float32)
    tessera.compile(text, backend="cpu").k(y, grid=1)
    builds = []
    real = cpu.build_library
    monkeypatch.setattr(cpu, "build_library", lambda *a: builds.append(a) or real(*a))
    tessera.compile(text, backend="cpu").k(y, grid=1)
    assert builds == []  # warm
    monkeypatch.setattr(fingerprint, "_value", "another runtime")
    y[:] = 0
    tessera.compile(text, backend="cpu").k(y, grid=1)
    assert builds and y[0] == 3.0  # compiled again (the library itself may come from its cache)


@pytest.mark.parametrize("flags", [[], ["-X", "faulthandler"]])
def test_other_faults_keep_their_default_behaviour(flags) -> None:
    """The engine's SIGSEGV handler takes only faults in a fiber's guard page: any other
    segmentation fault still kills the process (after Python's faulthandler, if enabled)."""
    code = ("import ctypes, numpy as np, tessera\n"
            "m = tessera.compile('@kernel tile[(32,)]\\ndef k(y: mut f32[n]):\\n    y[0] = 1.0\\n', backend='cpu')\n"
            "m.k(np.zeros(32, np.float32), grid=1)\n"
            "print('launched', flush=True)\n"
            "ctypes.string_at(16)\n")
    proc = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.stdout == "launched\n"
    assert proc.returncode == -signal.SIGSEGV, proc.stderr
    assert ("Fatal Python error: Segmentation fault" in proc.stderr) == bool(flags)
