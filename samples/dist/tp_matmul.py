"""Data- and tensor-parallel matmul over a dp x tp mesh (the Megatron pattern for two layers):

    Y = X @ W1    X (B x D) split by rows over dp, W1 (D x H) split by columns over tp:
                  each process computes its (B/dp x H/tp) block of Y, no communication
    Z = Y @ W2    W2 (H x O) split by rows over tp: each process's product is a partial
                  sum over its H/tp slice; reduce_scatter over tp sums them and splits Z's columns

and Z is checked against NumPy on every process. Run it with

    mpiexec -n 4 python samples/dist/tp_matmul.py            # a 2 x 2 mesh
    mpiexec -n 2 python samples/dist/tp_matmul.py --dp 1 --tp 2

(uneven sizes are fine: blocks follow numpy.array_split). Prints the time of the two launches and
the reduce-scatter, the slowest process's.
"""

from __future__ import annotations

import argparse
import pathlib
import time

import numpy as np
from mpi4py import MPI

import tessera
from tessera import dist

HERE = pathlib.Path(__file__).resolve().parent


def run(dp: int, tp: int, b: int, d: int, h: int, o: int, backend: str = "auto") -> tuple[float, bool]:
    """(seconds, matches NumPy) for one data- and tensor-parallel two-layer product."""
    mesh = dist.Mesh(axes=("dp", "tp"), shape=(dp, tp))
    mod = tessera.load(HERE / "tp_matmul.tsr", backend=backend)
    where = mod.backend
    rng = np.random.default_rng(0)  # the same global arrays on every process
    x = rng.standard_normal((b, d), dtype=np.float32)
    w1 = rng.standard_normal((d, h), dtype=np.float32)
    w2 = rng.standard_normal((h, o), dtype=np.float32)
    X = dist.from_numpy(x, dist.ShardSpec(("row",), ("dp",)), mesh, name="X", backend=where)
    W1 = dist.from_numpy(w1, dist.ShardSpec(("col",), ("tp",)), mesh, name="W1", backend=where)
    W2 = dist.from_numpy(w2, dist.ShardSpec(("row",), ("tp",)), mesh, name="W2", backend=where)
    Y = dist.tensor((b, h), dist.ShardSpec(("row", "col"), ("dp", "tp")), mesh, name="Y", backend=where)
    # Each process's full-width partial product over its slice of H, for its rows of the batch.
    P = dist.tensor((b, o), dist.ShardSpec(("row",), ("dp",)), mesh, name="P", backend=where)
    MPI.COMM_WORLD.Barrier()
    t0 = time.perf_counter()
    grid = lambda t: (-(-t.local.shape[1] // 8), -(-t.local.shape[0] // 8))  # noqa: E731
    mod.matmul(X, W1, Y, grid=grid(Y))
    mod.matmul(Y, W2, P, grid=grid(P))
    Z = dist.reduce_scatter(P, axis="tp", dim="col")  # Z: rows over dp, columns over tp
    z = Z.to_numpy()
    seconds = time.perf_counter() - t0
    worst = np.array([seconds])
    MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, worst, MPI.MAX)
    ok = bool(np.allclose(z, x @ w1 @ w2, rtol=1e-4, atol=1e-3))
    return float(worst[0]), ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--size", type=int, nargs=4, default=(66, 40, 52, 30), metavar=("B", "D", "H", "O"))
    ap.add_argument("--backend", default="auto")
    args = ap.parse_args()
    seconds, ok = run(args.dp, args.tp, *args.size, backend=args.backend)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(f"tp_matmul dp={args.dp} tp={args.tp} B,D,H,O={tuple(args.size)}: {seconds * 1e3:.1f} ms, "
              f"{'matches NumPy' if ok else 'DIFFERS from NumPy'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
