"""Device collectives (NCCL) on tensors in GPU memory: a job of one, or one process per GPU under
mpiexec; every collective against NumPy, a kernel launch on device shards, and a collective that
overlaps a kernel it does not depend on. Prints `device done` when every check passed."""

from __future__ import annotations

import pathlib

import numpy as np

import tessera
from tessera import dist

ROOT = pathlib.Path(__file__).resolve().parents[3]
mesh = dist.Mesh(axes=("tp",), shape=None)
n, me = mesh.size, mesh.rank
x = (np.arange(7 * 5) % 11).reshape(7, 5).astype(np.float32)
parts = np.array_split(np.arange(7), n)

t = dist.from_numpy(x * (me + 1), None, mesh, name="R", backend="cuda")
assert t.on_device()
total = sum(x * (r + 1) for r in range(n))
for op, want in (("sum", total), ("max", x * n), ("avg", total / n)):
    assert np.allclose(dist.all_reduce(t, "tp", op=op).to_numpy(), want), op
rs = dist.reduce_scatter(t, "tp")
assert np.allclose(rs.local.to_host(), total[parts[me]])
cols = dist.reduce_scatter(t, "tp", dim="col")
assert np.allclose(cols.local.to_host(), total[:, np.array_split(np.arange(5), n)[me]])
s = dist.from_numpy(x, dist.ShardSpec(("col",), ("tp",)), mesh, name="S", backend="cuda")
assert np.array_equal(dist.all_gather(s, "tp").local.to_host(), x)
a2a = dist.all_to_all(s, "tp", split_dim=0, concat_dim=1)
assert np.array_equal(a2a.local.to_host(), x[parts[me]])
b = dist.from_numpy(x + me, None, mesh, name="B", backend="cuda")
assert np.array_equal(dist.broadcast(b, "tp", root=0).local.to_host(), x)
h = dist.all_reduce(t, "tp", async_op=True)
mod = tessera.load(ROOT / "samples" / "dist" / "tp_matmul.tsr", backend="cuda")
A = dist.from_numpy(x, None, mesh, name="A", backend="cuda")
W = dist.from_numpy(x.T.copy(), None, mesh, name="W", backend="cuda")
C = dist.tensor((7, 7), None, mesh, name="C", backend="cuda")
mod.matmul(A, W, C, grid=(1, 1))  # independent of the all-reduce in flight
assert np.allclose(h.wait().to_numpy(), total)
assert np.allclose(C.to_numpy(), x @ x.T, rtol=1e-5)
print("device done", flush=True)
