"""tessera.dist against raw mpi4py, and the data- and tensor-parallel sample's time by job size.

    python bench/dist_bench.py [--procs 4] [--repeat 7]

Starts its own jobs with the mpiexec of this Python's environment (the mpich wheel):

1. Overhead: with `--procs` processes on a one-axis mesh, all_reduce, all_gather and
   reduce_scatter of f32 tensors of 1 MiB and 64 MiB (each process's shard), against the same MPI
   call through mpi4py on the same communicator and buffers (the raw call's result buffer is
   allocated once; Tessera's check of the processes' metadata and its result allocation are what
   is measured). Median of `--repeat` runs, the processes' slowest; ratio tessera / mpi4py, goal
   <= 1.1x.
2. samples/dist/tp_matmul.py (two layers, 256 x 256 x 256 x 256, the CPU backend) on 1, 2 and 4
   processes (meshes 1 x 1, 1 x 2, 2 x 2), the slowest process's time for the launches and the
   reduce-scatter, after a warm-up run (compiles cached).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import subprocess
import sys
import time

from tessera.dist.engines import mpiexec

ROOT = pathlib.Path(__file__).resolve().parent.parent
MPIEXEC = mpiexec() or pathlib.Path("mpiexec")


def worker(repeat: int) -> None:
    import numpy as np
    from mpi4py import MPI

    from tessera import dist

    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    mesh = dist.Mesh(axes=("x",), shape=(n,))
    raw = mesh.mpi("x").comm  # the axis communicator Tessera itself uses

    def timed(fn) -> float:
        times = []
        for _ in range(repeat + 1):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            t = np.array([time.perf_counter() - t0])
            comm.Allreduce(MPI.IN_PLACE, t, MPI.MAX)
            times.append(float(t[0]))
        return statistics.median(times[1:])

    def measure(mib: int) -> None:
        count = mib * 2**20 // 4
        x = np.random.default_rng(comm.Get_rank()).standard_normal(count, dtype=np.float32)
        full = np.random.default_rng(0).standard_normal(count * n, dtype=np.float32)
        rep = dist.from_numpy(x, None, mesh, name="x", backend="cpu")
        split = dist.from_numpy(full, dist.ShardSpec((0,), ("x",)), mesh, name="s", backend="cpu")
        big = dist.from_numpy(full, None, mesh, name="b", backend="cpu")
        out, gathered, scattered = np.empty_like(x), np.empty_like(full), np.empty_like(x)
        rows = [
            ("all_reduce", lambda: raw.Allreduce(x, out, MPI.SUM), lambda: dist.all_reduce(rep, "x")),
            ("all_gather", lambda: raw.Allgather(split.local, gathered), lambda: dist.all_gather(split, "x")),
            ("reduce_scatter", lambda: raw.Reduce_scatter(big.local, scattered, [count] * n, MPI.SUM),
             lambda: dist.reduce_scatter(big, "x")),
        ]
        for name, base, ours in rows:
            t_raw, t_ours = timed(base), timed(ours)
            if comm.Get_rank() == 0:
                ratio = t_ours / t_raw
                print(f"{name:15s} {mib:3d} MiB x {n}: mpi4py {t_raw * 1e3:8.2f} ms  tessera {t_ours * 1e3:8.2f} ms  "
                      f"{ratio:5.2f}x {'(goal met)' if ratio <= 1.1 else '(over 1.1x)'}", flush=True)

    for mib in (1, 64):
        measure(mib)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.repeat)
        return 0
    print(f"collectives: tessera.dist vs the same mpi4py call ({args.procs} processes, one-axis mesh)")
    subprocess.run([str(MPIEXEC), "-n", str(args.procs), sys.executable, __file__, "--worker", "--repeat",
                    str(args.repeat)], check=True)
    print("samples/dist/tp_matmul.py, B,D,H,O = 256 (CPU backend), after a warm-up run:")
    sample = str(ROOT / "samples" / "dist" / "tp_matmul.py")
    for procs, dp, tp in ((1, 1, 1), (2, 1, 2), (4, 2, 2)):
        cmd = [str(MPIEXEC), "-n", str(procs), sys.executable, sample, "--dp", str(dp), "--tp", str(tp),
               "--backend", "cpu", "--size", "256", "256", "256", "256"]
        subprocess.run(cmd, check=True, capture_output=True)
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()
        print(f"  {procs} process{'es' if procs > 1 else ''}: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
