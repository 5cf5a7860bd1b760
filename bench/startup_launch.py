"""Start-up and launch overhead of the CPU backend (issue 12), each figure next to its baseline
measured in the same run (fresh subprocesses, alternating; medians and ranges of --runs):

* **tesserac** -- `tesserac SAMPLE --emit cuda -o TMP` per sample, vs `python -c "import numpy"`
  (goal: <= 0.25 s);
* **cold load** -- a process that imports tessera, loads `samples/sum_reduce.tsr` and launches it
  once with an empty cache (a new `TESSERA_CACHE_DIR` each run), vs `import numpy` (goal: <= 3x):
  as users get it, with the engine object and the precompiled prelude built when the package was
  installed (run after `pip install -e .`; a line says so when the engine is not there), and with a
  compiler they were not built for (`CXX` set to a link to the same compiler in a temporary folder:
  another compiler identity, so the first load compiles the engine, and the kernel unit the
  prelude, too); each with the C++ compiler's share (the engine object,
  the kernel unit, which starts while Python transpiles, the link) from one probe run;
* **launch** -- a launch of a one-group, 32-tile kernel through the Python API (`k[1](x)`), vs a
  ctypes call of an empty C function built here with the same compiler (goal: <= 15 us), and
  vs Warp's CPU launch of a 32-thread kernel when `warp` is installed (skipped otherwise); then
  the same kernel on 8 groups (`tessera-8`: the engine's worker threads take part, one per CPU).

With `--baseline REV` (a git revision of this repository, e.g. the commit before a change), the
launch script also runs with that revision's sources (`git archive`), alternating with the current
ones (3 rounds each), and both sets of figures are printed.

Every process runs with a bytecode cache in a temporary `PYTHONPYCACHEPREFIX` (filled by one
untimed run), as an installed package would have.

    python bench/startup_launch.py [--runs N] [--baseline REV] [--launch-only]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ("matmul.tsr", "softmax.tsr", "sgemm_pipelined.tsr")
TINY = "@kernel tile[(32,)]\ndef tiny(x: mut f32[n]):\n    i = tile_linear_id()\n    if i < n:\n        x[i] = x[i] + 1.0\n"

COLD = f"""\
import numpy as np, tessera
m = tessera.load({str(ROOT / 'samples' / 'sum_reduce.tsr')!r}, backend="cpu")
out = np.zeros(8, np.float32)
m.sum_reduce(np.ones(4096, np.float32), out)
assert (out == 4096).all()
"""

# Each compiler process from its start to its end (subprocess.run, and the engine's compile, which
# the prefetch starts with Popen and waits for on its thread); for the kernel unit's compiler, which
# the prefetch starts before its source exists (runtime/host/unit.py), also from its source's coming.
PROBE = "import os, subprocess, time\n_init, _comm = subprocess.Popen.__init__, subprocess.Popen.communicate\n" \
    "def init(self, *a, **k):\n    self.tsr_t = time.perf_counter(); _init(self, *a, **k)\n" \
    "def comm(self, input=None, *a, **k):\n    t = time.perf_counter(); r = _comm(self, input, *a, **k)\n" \
    "    if getattr(self, 'tsr_seen', False):\n        return r\n    self.tsr_seen = True\n" \
    "    fed = ' (%.3f after its source came)' % (time.perf_counter() - t) if input else ''\n" \
    "    cmd = [os.path.basename(str(self.args[0])), *self.args[1:]]\n" \
    "    print('STEP %.3f%s %s' % (time.perf_counter() - self.tsr_t, fed, ' '.join(str(c) for c in cmd)))\n" \
    "    return r\nsubprocess.Popen.__init__, subprocess.Popen.communicate = init, comm\n" + COLD

LAUNCH = """\
import ctypes, time, numpy as np, tessera
m = tessera.compile({tiny!r}, backend="cpu")
x = np.zeros(32, np.float32)
x8 = np.zeros(8 * 32, np.float32)
k = m.tiny
k[1](x)
k[8](x8)
empty = ctypes.CDLL({so!r}).tsr_empty
empty.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
p = ctypes.c_void_p(x.ctypes.data)
def tsr():
    k[1](x)
def tsr8():
    k[8](x8)
def raw():
    empty(p, p)
fns = {{"tessera": tsr, "tessera-8": tsr8, "ctypes": raw}}
try:
    import warp as wp
    wp.config.quiet = True
    wp.init()
    @wp.kernel
    def wk(a: wp.array(dtype=float)):
        i = wp.tid()
        a[i] = a[i] + 1.0
    wa = wp.zeros(32, dtype=float, device="cpu")
    wp.launch(wk, dim=32, inputs=[wa], device="cpu")
    fns["warp"] = lambda: wp.launch(wk, dim=32, inputs=[wa], device="cpu")
except ImportError:
    pass
for name, fn in fns.items():
    best = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(2000):
            fn()
        best.append((time.perf_counter() - t) / 2000 * 1e6)
    print("FIG", name, sorted(best)[2])
"""


def _time(argv: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - t


def _fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} s ({min(xs):.3f}-{max(xs):.3f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--baseline", metavar="REV", help="also time the launches with this git revision's sources")
    ap.add_argument("--launch-only", action="store_true", help="only the launch figures")
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="tessera-bench-") as tmp:
        env = dict(os.environ, PYTHONPYCACHEPREFIX=str(Path(tmp) / "pyc"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        if not args.launch_only:
            _startup(args.runs, py, env, tmp)
        _launches(py, env, tmp, args.baseline)
    return 0


def _baseline_tree(rev: str, tmp: str) -> Path:
    """REV's sources laid out as an importable `tessera`: each subpackage that its pyproject.toml
    maps to a folder of its own (`[tool.setuptools.package-dir]`) linked into the package."""
    import tomllib

    dest = Path(tmp) / "baseline"
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    mapped = tomllib.loads((dest / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for name, folder in mapped.items():
        if name != "tessera" and name.startswith("tessera."):
            (dest / "tessera" / name.split(".", 1)[1]).symlink_to(dest / folder)
    return dest


def _startup(runs: int, py: str, env: dict[str, str], tmp: str) -> None:
    numpy_cmd = [py, "-c", "import numpy"]
    tesserac = [py, "-m", "tessera.cli.compile"]
    out = str(Path(tmp) / "o.cu")
    _time(numpy_cmd, env)
    print("tesserac FILE --emit cuda (goal <= 0.25 s), vs `import numpy`:")
    for sample in SAMPLES:
        cmd = [*tesserac, str(ROOT / "samples" / sample), "--emit", "cuda", "-o", out]
        _time(cmd, env)
        base, ours = [], []
        for _ in range(runs):
            base.append(_time(numpy_cmd, env))
            ours.append(_time(cmd, env))
        print(f"  {sample:22s} {_fmt(ours)}   import numpy {_fmt(base)}   "
              f"ratio {statistics.median(ours) / statistics.median(base):.2f}x")
    other = _other_spelling(tmp)
    cases = {"engine and prelude built at install": env,
             f"engine and prelude not built for CXX={other}": dict(env, CXX=other)}
    base = []
    cold: dict[str, list[float]] = {label: [] for label in cases}
    for i in range(runs):
        base.append(_time(numpy_cmd, env))
        for n, (label, case_env) in enumerate(cases.items()):
            cold[label].append(_time([py, "-c", COLD], dict(case_env, TESSERA_CACHE_DIR=str(Path(tmp) / f"cache{n}-{i}"))))
    print(f"cold first load + launch, empty cache (goal <= 3x), vs `import numpy` {_fmt(base)}:")
    if not _prebuilt():
        print("  (no engine was built at install time for this compiler: `pip install -e .` builds it)")
    for n, (label, case_env) in enumerate(cases.items()):
        print(f"  {label}: {_fmt(cold[label])}   ratio {statistics.median(cold[label]) / statistics.median(base):.2f}x")
        probe_env = dict(case_env, TESSERA_CACHE_DIR=str(Path(tmp) / f"cache-probe{n}"))
        steps = subprocess.run([py, "-c", PROBE], env=probe_env, check=True, capture_output=True, text=True).stdout
        for line in steps.splitlines():
            # not the linker probe (host_build.linker), reaped long after it ended
            if line.startswith("STEP") and not line.endswith("-Wl,--version"):
                print("     C++ compiler:", line[5:110])


def _prebuilt() -> bool:
    """Whether the engine was built at install time for this compiler and these sources."""
    from tessera.runtime.host import build as host_build
    from tessera.runtime.host import recipe as host_recipe

    key = host_recipe.engine_key(host_build.find_cxx(), host_build.host_dir())
    return host_recipe.read_prebuilt(host_build.prebuilt_dir(), key) is not None


def _other_spelling(tmp: str) -> str:
    """The C++ compiler as a link to it in `tmp`: the same compiler, another identity (its command
    is part of it), for which no engine was built at install time."""
    from tessera.runtime.host.build import find_cxx

    cxx = find_cxx()
    real = os.path.realpath(shutil.which(cxx[0]) or cxx[0])
    link = Path(tmp) / "cxx" / Path(real).name
    link.parent.mkdir()
    link.symlink_to(real)
    return shlex.join([str(link), *cxx[1:]])


def _launch_figures(py: str, env: dict[str, str], script: Path) -> dict[str, float]:
    lines = subprocess.run([py, str(script)], env=env, check=True, capture_output=True, text=True).stdout.split("\n")
    return {ln.split()[1]: float(ln.split()[2]) for ln in lines if ln.startswith("FIG ")}


def _launches(py: str, env: dict[str, str], tmp: str, baseline: str | None) -> None:
    so = Path(tmp) / "empty.so"
    (Path(tmp) / "empty.c").write_text("void tsr_empty(void* a, void* b) { (void)a; (void)b; }\n")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", str(Path(tmp) / "empty.c"), "-o", str(so)], check=True)
    script = Path(tmp) / "launch.py"  # a file, not -c: Warp reads its kernels' source
    script.write_text(LAUNCH.format(tiny=TINY, so=str(so)))
    env = dict(env, TESSERA_CACHE_DIR=str(Path(tmp) / "cache-probe"))
    print("launch of a 32-tile kernel through the Python API, 1 group (goal <= 15 us) and 8 groups (tessera-8), "
          "median of 5 x 2000:")
    if baseline is None:
        figures = _launch_figures(py, env, script)
        for name, us in figures.items():
            print(f"  {name:8s} {us:7.1f} us   {us / figures['ctypes']:.1f}x the ctypes call of an empty C function")
        if "warp" not in figures:
            print("  warp     (not installed: skipped)")
        return
    base_env = dict(env, PYTHONPATH=str(_baseline_tree(baseline, tmp)))
    ours: dict[str, list[float]] = {}
    base: dict[str, list[float]] = {}
    for _ in range(3):
        for into, run_env in ((base, base_env), (ours, env)):
            for name, us in _launch_figures(py, run_env, script).items():
                into.setdefault(name, []).append(us)
    for name in ("tessera", "tessera-8"):
        o, b = ours[name], base[name]
        print(f"  {name:9s} {statistics.median(o):6.1f} us ({min(o):.1f}-{max(o):.1f})   {baseline}: "
              f"{statistics.median(b):6.1f} us ({min(b):.1f}-{max(b):.1f})   ratio {statistics.median(o) / statistics.median(b):.2f}")
    for name in ("ctypes", "warp"):
        if name in ours:
            print(f"  {name:9s} {statistics.median(ours[name]):6.1f} us ({min(ours[name]):.1f}-{max(ours[name]):.1f})")
    if "warp" not in ours:
        print("  warp      (not installed: skipped)")


if __name__ == "__main__":
    sys.exit(main())
