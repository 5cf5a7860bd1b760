"""The CPU engine's hand-off of a launch to its worker threads (issue 32): the wall time of a
launch of a 32-tile kernel (one add per tile) through the Python API, for 1, 2, 8 and 64 groups,
on 1 thread and on 2 threads (`TESSERA_CPU_THREADS`), so that what the second thread adds to a
launch whose groups are too small to share shows next to the one-thread figure of the same run.

With `--baseline REV` (a git revision, e.g. the commit before a change to runtime/host/engine.cpp)
each figure is also measured with that revision's sources (`git archive`, as in
`startup_launch.py`), in fresh processes alternating with the current ones (--rounds each).
Printed: per row the median over the rounds of each process's median of 7 x 2000 launches, in us of
wall time and of the whole process's CPU time (both threads; the load moves it less), the threads
that slept per launch (voluntary context switches of all the process's threads: a pool thread woken
and going back to sleep, or a caller waiting for one; the load does not move this count), and the
ratios of the medians (2 threads / 1 thread). The thread counts alternate batch by batch.

    python bench/pool_handoff.py [--rounds N] [--baseline REV]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from startup_launch import _baseline_tree

GROUPS = (1, 2, 8, 64)
THREADS = (1, 2)

CHILD = """\
import os, statistics, time, numpy as np, tessera
def switches():  # voluntary context switches of all the process's threads: each is a thread that slept
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{{tid}}/status") as f:
                total += sum(int(ln.split()[1]) for ln in f if ln.startswith("voluntary_ctxt_switches"))
        except FileNotFoundError:
            pass
    return total
m = tessera.compile('''
@kernel tile[(32,)]
def tiny(x: f32[n], y: mut f32[n]):
    i = global_linear_id()
    y[i] = x[i] + 1.0
''', backend="cpu")
for groups in {groups!r}:
    x, y = np.ones(32 * groups, np.float32), np.zeros(32 * groups, np.float32)
    wall = {{t: [] for t in {threads!r}}}
    cpu = {{t: [] for t in {threads!r}}}
    slept = {{t: [] for t in {threads!r}}}
    for _ in range(7):  # the thread counts alternate, so that a change in the load hits both
        for threads in {threads!r}:
            os.environ["TESSERA_CPU_THREADS"] = str(threads)  # read at each launch
            m.tiny(x, y, grid=groups)
            s, t, c = switches(), time.perf_counter(), time.process_time()
            for _ in range(2000):
                m.tiny(x, y, grid=groups)
            wall[threads].append((time.perf_counter() - t) / 2000 * 1e6)
            cpu[threads].append((time.process_time() - c) / 2000 * 1e6)
            slept[threads].append((switches() - s) / 2000)
    assert (y == 2.0).all()
    for threads in {threads!r}:
        print("FIG", threads, groups, *(statistics.median(v[threads]) for v in (wall, cpu, slept)))
"""


def figures(env: dict[str, str], script: Path) -> dict[tuple[int, int], tuple[float, ...]]:
    """(threads, groups) -> medians per launch (wall us, CPU us of all threads, threads that slept),
    from one fresh process."""
    out = subprocess.run([sys.executable, str(script)], env=env, check=True, capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines() if line.startswith("FIG ")]
    return {(int(r[1]), int(r[2])): tuple(float(v) for v in r[3:]) for r in rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="fresh processes per source tree")
    ap.add_argument("--baseline", metavar="REV", help="also measure this git revision's sources")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "launch.py"
        script.write_text(CHILD.format(threads=THREADS, groups=GROUPS))
        env = dict(os.environ, TESSERA_CACHE_DIR=str(Path(tmp) / "cache"))
        trees = {"current": env}
        if args.baseline:
            trees[args.baseline] = dict(env, PYTHONPATH=str(_baseline_tree(args.baseline, tmp)),
                                        TESSERA_CACHE_DIR=str(Path(tmp) / "cache-baseline"))
        got: dict[str, dict[tuple[int, int], list[tuple[float, ...]]]] = {name: {} for name in trees}
        for _ in range(args.rounds):
            for name, tree_env in trees.items():
                for key, us in figures(tree_env, script).items():
                    got[name].setdefault(key, []).append(us)
    print(f"launch of a 32-tile kernel, us per launch (median of {args.rounds} processes, each the median of "
          "7 x 2000), wall / CPU time of the whole process / threads that slept (voluntary context switches):")
    print(f"  {'':16}" + "".join(f"{f'{g} group(s)':>25}" for g in GROUPS))
    for name, rows in got.items():
        wall, cpu, slept = ({key: statistics.median(f[i] for f in v) for key, v in rows.items()} for i in range(3))
        for threads in THREADS:
            print(f"  {name[:10]:10} {threads} thr" + "".join(
                f"{f'{wall[threads, g]:6.1f} / {cpu[threads, g]:5.1f} / {slept[threads, g]:4.2f}':>25}" for g in GROUPS))
        print(f"  {'':10} 2 / 1" + "".join(
            f"{f'{wall[2, g] / wall[1, g]:5.2f}x / {cpu[2, g] / cpu[1, g]:4.2f}x':>25}" for g in GROUPS))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
