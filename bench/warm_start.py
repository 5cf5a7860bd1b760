"""Warm start: a fresh Python process that runs a cached Tessera kernel, versus `import numpy`.

Side by side, alternating, in fresh subprocesses (``sys.executable``), this times the wall
clock of:

* **numpy** -- ``python -c "import numpy"``: the floor; every Tessera program pays it.
* **tessera** -- a process that imports tessera, ``tessera.load("samples/sum_reduce.tsr",
  backend="cpu")`` and launches ``sum_reduce`` once on 4096 floats, with a warm cache: a
  temporary ``TESSERA_CACHE_DIR`` that one untimed run filled first.

It prints the median of ``--runs`` runs of each and tessera / numpy (and, less sensitive to other
load on the machine, the ratio of the minimums).  **Goal: at most 1.5x**,
i.e. a warm start reads metadata and dlopens the cached library without parsing or
transpiling anything.  One more, untimed, run of each reports which heavy modules were
imported (``lark``, ``jinja2``, ``tessera.frontend.parser``, ``tessera.transpile.driver``, ``cuda`` and their
submodules) -- **the goal is none**; a module that ``import numpy`` alone also has (a ``.pth``
file can import one at interpreter start-up) is shown as such -- and where the warm process
spends its time (import numpy, import tessera, load, launch).

The same is measured a second time with a bytecode cache for every module
(``PYTHONPYCACHEPREFIX`` pointed at a temporary folder, ``PYTHONDONTWRITEBYTECODE`` unset), which
matters where the environment sets ``PYTHONDONTWRITEBYTECODE=1`` and the package is installed
editable: there each process compiles Tessera's sources from scratch.  The repository is not
written to.

If a ratio is above the goal (or with ``--importtime``), ``python -X importtime`` of the warm
process shows which imports dominate: the slowest top-level imports (cumulative) and the
modules with the most self time, next to the same for ``import numpy``.

The script is a report and exits 0; it exits 1 only if the warm process fails or computes a
wrong sum.  It does not use Numba.

    python bench/warm_start.py [--runs N] [--importtime]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL = 1.5
ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "sum_reduce.tsr"
HEAVY = ("lark", "jinja2", "tessera.frontend.parser", "tessera.transpile.driver", "cuda")

NUMPY_CODE = "import numpy"
TESSERA_CODE = f"""\
import numpy as np
import tessera
m = tessera.load({str(SAMPLE)!r}, backend="cpu")
out = np.zeros(8, np.float32)
m.sum_reduce(np.ones(4096, np.float32), out)
"""

# The untimed probe: the same work, with phase timings, a result check and the module list.
PROBE_CODE = f"""\
import json, sys, time
t0 = time.perf_counter()
import numpy as np
t1 = time.perf_counter()
phases = {{"import numpy": t1 - t0}}
if {{tessera}}:
    import tessera
    t2 = time.perf_counter()
    m = tessera.load({str(SAMPLE)!r}, backend="cpu")
    t3 = time.perf_counter()
    out = np.zeros(8, np.float32)
    m.sum_reduce(np.ones(4096, np.float32), out)
    t4 = time.perf_counter()
    phases.update({{"import tessera": t2 - t1, "tessera.load (warm cache)": t3 - t2, "first launch": t4 - t3}})
    phases["ok"] = bool((out == 4096).all())
heavy = {{h: sorted(k for k in sys.modules if k == h or k.startswith(h + ".")) for h in {HEAVY!r}}}
tessera_mods = sorted(k for k in sys.modules if k == "tessera" or k.startswith("tessera."))
print(json.dumps({{"phases": phases, "heavy": heavy, "tessera": tessera_mods}}))
"""


def child_env(cache_dir: str, pycache_prefix: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["TESSERA_CACHE_DIR"] = cache_dir
    for var in ("TESSERA_BACKEND", "PYTHONPROFILEIMPORTTIME", "PYTHONPYCACHEPREFIX"):
        env.pop(var, None)
    if pycache_prefix is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache_prefix
    return env


def run_child(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - t0, proc


def require_ok(what: str, proc: subprocess.CompletedProcess) -> None:
    if proc.returncode != 0:
        print(f"FAILED: the {what} process exited with status {proc.returncode}:\n{proc.stderr.strip()}")
        sys.exit(1)


def measure(env: dict[str, str], runs: int) -> tuple[float, float, list[float], list[float]]:
    """(median numpy s, median tessera s, all numpy, all tessera); untimed warm-up runs first."""
    for code in (TESSERA_CODE, NUMPY_CODE):  # fill the Tessera cache (and any bytecode cache)
        _, proc = run_child(["-c", code], env)
        require_ok("warm-up", proc)
    t_np, t_ts = [], []
    for i in range(runs):
        order = ((NUMPY_CODE, t_np), (TESSERA_CODE, t_ts))
        for code, sink in order if i % 2 == 0 else order[::-1]:
            t, proc = run_child(["-c", code], env)
            require_ok("timed", proc)
            sink.append(t)
    return statistics.median(t_np), statistics.median(t_ts), t_np, t_ts


def probe(env: dict[str, str], tessera: bool) -> dict:
    _, proc = run_child(["-c", PROBE_CODE.replace("{tessera}", str(tessera))], env)
    require_ok("probe", proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def parse_importtime(stderr: str) -> list[tuple[int, int, int, str]]:
    """(self us, cumulative us, depth, module) for each `import time:` line."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cum, name = line[len("import time:"):].split("|", 2)
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        rows.append((int(self_us), int(cum), depth, name.strip()))
    return rows


def importtime_report(env: dict[str, str]) -> None:
    print("\n`python -X importtime` of the warm process (cumulative and self time in ms):")
    reports = {}
    for label, code in (("tessera", TESSERA_CODE), ("numpy", NUMPY_CODE)):
        _, proc = run_child(["-X", "importtime", "-c", code], env)
        require_ok("importtime", proc)
        reports[label] = parse_importtime(proc.stderr)
    rows = reports["tessera"]
    base = {name for _, _, _, name in reports["numpy"]}
    total = sum(s for s, _, _, _ in rows)
    total_np = sum(s for s, _, _, _ in reports["numpy"])
    extra = [r for r in rows if r[3] not in base]
    print(f"  all imports: {total / 1e3:.1f} ms (import numpy alone: {total_np / 1e3:.1f} ms); "
          f"{len(extra)} modules not imported by `import numpy`, {sum(r[0] for r in extra) / 1e3:.1f} ms self time")
    print("  slowest top-level imports (cumulative):")
    for self_us, cum, _, name in sorted((r for r in rows if r[2] == 0), key=lambda r: -r[1])[:12]:
        mark = "" if name in base else "   <- not in `import numpy`"
        print(f"    {cum / 1e3:8.1f} {self_us / 1e3:8.1f}  {name}{mark}")
    print("  most self time among modules that `import numpy` does not load:")
    for self_us, cum, _, name in sorted(extra, key=lambda r: -r[0])[:15]:
        print(f"    {cum / 1e3:8.1f} {self_us / 1e3:8.1f}  {name}")


def report_modules(warm: dict, base: dict) -> list[str]:
    """Print the heavy-module check; return the heavy modules that Tessera itself brought in."""
    print("heavy modules in the warm process (goal: none):")
    brought = []
    for h in HEAVY:
        mods, pre = warm["heavy"][h], base["heavy"][h]
        new = sorted(set(mods) - set(pre))
        brought += new
        if not mods:
            state = "not imported"
        elif not new:
            state = f"imported ({', '.join(mods)}), but `import numpy` alone has it too (interpreter start-up)"
        else:
            shown = ", ".join(new[:6]) + (f", ... ({len(new)} modules)" if len(new) > 6 else "")
            state = f"IMPORTED by the tessera process: {shown}"
        print(f"  {h:<18} {state}")
    verdict = "met" if not brought else "MISSED"
    print(f"  -> heavy modules brought in by tessera: {len(brought)} ({verdict})")
    print(f"  tessera modules loaded: {', '.join(warm['tessera'])}")
    return brought


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="timed runs of each process (default 10)")
    ap.add_argument("--importtime", action="store_true", help="show the -X importtime breakdown even if the goal is met")
    a = ap.parse_args()

    print(f"Python {sys.version.split()[0]} ({sys.executable}); {os.cpu_count()} CPUs; "
          f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '(unset)')}")
    print(f"sample: {SAMPLE.relative_to(ROOT)}; median of {a.runs} runs each, alternating\n")
    missed = False
    with tempfile.TemporaryDirectory(prefix="tessera-warm-") as tmp:
        cache = str(Path(tmp) / "cache")
        setups = [("as run (this environment)", child_env(cache, None)),
                  ("with a bytecode cache (PYTHONPYCACHEPREFIX)", child_env(cache, str(Path(tmp) / "pycache")))]
        for i, (label, env) in enumerate(setups):
            m_np, m_ts, all_np, all_ts = measure(env, a.runs)
            r = m_ts / m_np
            ok = r <= GOAL
            missed |= not ok
            print(f"[{label}]")
            print(f"  python -c 'import numpy'            {m_np * 1e3:7.1f} ms  (min {min(all_np) * 1e3:.1f}, max {max(all_np) * 1e3:.1f})")
            print(f"  tessera load + launch, warm cache    {m_ts * 1e3:7.1f} ms  (min {min(all_ts) * 1e3:.1f}, max {max(all_ts) * 1e3:.1f})")
            print(f"  ratio tessera / numpy (medians)      {r:7.2f}x    goal <= {GOAL}x: {'met' if ok else 'MISSED'}"
                  f"   (ratio of the minimums: {min(all_ts) / min(all_np):.2f}x)")
            warm, base = probe(env, True), probe(env, False)
            if not warm["phases"].get("ok"):
                print("FAILED: sum_reduce in the warm process gave a wrong result")
                return 1
            phases = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in warm["phases"].items() if k != "ok")
            print(f"  in-process phases of the warm process: {phases}")
            if i == 0:
                print()
                report_modules(warm, base)
            print()
        if missed or a.importtime:
            importtime_report(setups[0][1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
