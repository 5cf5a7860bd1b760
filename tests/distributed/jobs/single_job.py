"""A job of one process (started without a launcher): the whole API on a 1-process mesh, and
argument errors. Prints `ok NAME` per check and `done N`."""

from __future__ import annotations

import numpy as np

from tessera import dist

checks = 0


def raises(fn, text):
    try:
        fn()
    except dist.DistError as e:
        assert text in str(e), str(e)
        return
    raise AssertionError(f"no DistError ({text})")


mesh = dist.Mesh(axes=["tp"], devices=range(1))
assert (mesh.size, mesh.rank, mesh.shape, mesh.coords) == (1, 0, (1,), {"tp": 0})
x = np.arange(12, dtype=np.float32).reshape(3, 4)
t = dist.from_numpy(x, dist.ShardSpec(("row",), ("tp",)), mesh, name="X", backend="cpu")
assert np.array_equal(t.local, x) and t.local is not x and np.array_equal(t.to_numpy(), x)
assert np.array_equal(dist.all_gather(t, "tp").local, x)
r = dist.from_numpy(x, None, mesh, name="R", backend="cpu")
for op in ("sum", "prod", "max", "min", "avg"):
    assert np.array_equal(dist.all_reduce(r, "tp", op=op).local, x)
assert np.array_equal(dist.reduce_scatter(r, "tp").local, x)
assert np.array_equal(dist.broadcast(r, "tp").local, x)
b = dist.broadcast(t, "tp", root=0)  # a split tensor: the root's block (here all of it), replicated
assert b.shape == (3, 4) and not b.layout.splits and np.array_equal(b.local, x)
h = dist.all_reduce(r, "tp", async_op=True)
assert h.wait().local.shape == (3, 4) and h.is_completed()
print("ok job of one", flush=True)
checks += 1

raises(lambda: dist.Mesh(axes=("dp", "tp"), shape=(2, 2)), "has 4 positions but the job has 1 process")
raises(lambda: dist.Mesh(axes=("dp", "tp")), "needs shape=")
raises(lambda: dist.Mesh(axes="tp"), "must be a non-empty tuple")
raises(lambda: dist.Mesh(axes=("tp", "tp"), shape=(1, 1)), "names an axis twice")
raises(lambda: dist.Mesh(axes=("t p",)), "is not an axis name")
raises(lambda: dist.Mesh(axes=("tp",), devices=[1]), "must list each rank")
raises(lambda: dist.all_reduce(r, "dp"), "axis='dp' is not an axis of Mesh")
raises(lambda: dist.all_reduce(r, "tp", op="mean"), "op must be one of sum, prod, max, min, avg")
raises(lambda: dist.all_reduce(t, "tp"), "'X' is split over 'tp'")
raises(lambda: dist.all_gather(r, "tp"), "'R' is not split over 'tp'")
raises(lambda: dist.broadcast(r, "tp", root=1), "root must be a coordinate on 'tp' (0..0)")
raises(lambda: dist.all_to_all(t, "tp", split_dim=0, concat_dim=0), "the same dimension")
raises(lambda: dist.all_to_all(r, "tp", split_dim=0, concat_dim=1), "must be split over 'tp' along concat_dim")
raises(lambda: dist.all_reduce(r, "tp", async_op=1), "async_op must be a bool")
raises(lambda: dist.all_reduce(x, "tp"), "expected a dist tensor, not ndarray")
raises(lambda: dist.tensor((2, -1), None, mesh), "shape must be 1 to 8 non-negative ints")
raises(lambda: dist.tensor((2,), None, mesh, dtype="complex"), "dtype must be a .tsr scalar type")
raises(lambda: dist.tensor((2,), None, "mesh"), "mesh must be a dist.Mesh")
raises(lambda: dist.tensor((2,), "row", mesh), "layout must be a dist.ShardSpec")
raises(lambda: dist.tensor((2,), dist.ShardSpec(("col",)), mesh), "partition 'col' names no dimension")
raises(lambda: dist.tensor((2, 2), dist.ShardSpec(("row",), ("dp",)), mesh), "names mesh axis 'dp'")
raises(lambda: dist.from_numpy([1, 2], None, mesh), "array must be a NumPy array, not list")
raises(lambda: dist.tensor((2,), None, mesh, name="a\nb"), "name must be a printable str")
b = dist.from_numpy(np.ones(3, bool), None, mesh, name="flags", backend="cpu")
raises(lambda: dist.all_reduce(b, "tp"), "a bool tensor cannot be reduced")
g = dist.from_numpy(x, dist.ShardSpec(None, reduce="max"), mesh, name="G", backend="cpu")
raises(lambda: dist.all_reduce(g, "tp", op="sum"), "to be reduced with 'max', not 'sum'")
assert np.array_equal(g.resolve().local, x) and not g.layout.pending
assert dist.tensor((4, 4), dist.ShardSpec(("row",)), mesh, dtype="fp32", backend="cpu").layout.dim_of("tp") == 0
print("ok errors", flush=True)
checks += 1
print(f"done {checks}", flush=True)
