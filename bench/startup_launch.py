"""Start-up and launch overhead of the CPU backend (issue 12), each figure next to its baseline
measured in the same run (fresh subprocesses, alternating; medians and ranges of --runs):

* **tesserac** -- `tesserac SAMPLE --emit cuda -o TMP` per sample, vs `python -c "import numpy"`
  (goal: <= 0.25 s);
* **cold load** -- a process that imports tessera, loads `samples/sum_reduce.tsr` and launches it
  once with an empty cache (a new `TESSERA_CACHE_DIR` each run), vs `import numpy` (goal: <= 3x),
  with the C++ compiler's share (the engine object, the kernel unit, the link) from one probe run;
* **launch** -- a launch of a one-group, 32-tile kernel through the Python API (`k[1](x)`), vs a
  ctypes call of an empty C function built here with the same compiler (goal: <= 15 us), and
  vs Warp's CPU launch of a 32-thread kernel when `warp` is installed (skipped otherwise); then
  the same kernel on 8 groups (`tessera-8`: the engine's worker threads take part, one per CPU).

Every process runs with a bytecode cache in a temporary `PYTHONPYCACHEPREFIX` (filled by one
untimed run), as an installed package would have.

    python bench/startup_launch.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
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

PROBE = "import subprocess, time\n_run = subprocess.run\n" \
    "def run(cmd, *a, **k):\n    t = time.perf_counter(); r = _run(cmd, *a, **k)\n" \
    "    print('STEP %.3f %s' % (time.perf_counter() - t, ' '.join(str(c) for c in cmd)[:60]))\n    return r\n" \
    "subprocess.run = run\n" + COLD

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
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="tessera-bench-") as tmp:
        env = dict(os.environ, PYTHONPYCACHEPREFIX=str(Path(tmp) / "pyc"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        numpy_cmd = [py, "-c", "import numpy"]
        tesserac = [py, "-m", "tessera.cli"]
        out = str(Path(tmp) / "o.cu")
        _time(numpy_cmd, env)
        print("tesserac FILE --emit cuda (goal <= 0.25 s), vs `import numpy`:")
        for sample in SAMPLES:
            cmd = [*tesserac, str(ROOT / "samples" / sample), "--emit", "cuda", "-o", out]
            _time(cmd, env)
            base, ours = [], []
            for _ in range(args.runs):
                base.append(_time(numpy_cmd, env))
                ours.append(_time(cmd, env))
            print(f"  {sample:22s} {_fmt(ours)}   import numpy {_fmt(base)}   "
                  f"ratio {statistics.median(ours) / statistics.median(base):.2f}x")
        base, ours = [], []
        for i in range(args.runs):
            cold_env = dict(env, TESSERA_CACHE_DIR=str(Path(tmp) / f"cache{i}"))
            base.append(_time(numpy_cmd, env))
            ours.append(_time([py, "-c", COLD], cold_env))
        print(f"cold first load + launch, empty cache (goal <= 3x): {_fmt(ours)}   import numpy {_fmt(base)}   "
              f"ratio {statistics.median(ours) / statistics.median(base):.2f}x")
        probe_env = dict(env, TESSERA_CACHE_DIR=str(Path(tmp) / "cache-probe"))
        steps = subprocess.run([py, "-c", PROBE], env=probe_env, check=True, capture_output=True, text=True).stdout
        for line in steps.splitlines():
            if line.startswith("STEP"):
                print("   C++ compiler:", line[5:])
        so = Path(tmp) / "empty.so"
        (Path(tmp) / "empty.c").write_text("void tsr_empty(void* a, void* b) { (void)a; (void)b; }\n")
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", str(Path(tmp) / "empty.c"), "-o", str(so)], check=True)
        script = Path(tmp) / "launch.py"  # a file, not -c: Warp reads its kernels' source
        script.write_text(LAUNCH.format(tiny=TINY, so=str(so)))
        lines = subprocess.run([py, str(script)], env=dict(env, TESSERA_CACHE_DIR=str(Path(tmp) / "cache-probe")),
                               check=True, capture_output=True, text=True).stdout.split("\n")
        figures = {ln.split()[1]: float(ln.split()[2]) for ln in lines if ln.startswith("FIG ")}
        print("launch of a 32-tile kernel through the Python API, 1 group (goal <= 15 us) and 8 groups (tessera-8), "
              "median of 5 x 2000:")
        for name, us in figures.items():
            print(f"  {name:8s} {us:7.1f} us   {us / figures['ctypes']:.1f}x the ctypes call of an empty C function")
        if "warp" not in figures:
            print("  warp     (not installed: skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
