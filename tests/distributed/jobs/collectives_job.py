"""A 4-process job (mpiexec -n 4) on a 2 x 2 mesh: every collective along each axis, uneven
splits, async handles, the sample against NumPy, the NCCL bootstrap up to the library call, and
disagreements that must raise DistError on every process. Each process prints `rank R ok NAME`
or `rank R FAIL NAME: ...` per check, then `rank R done N`."""

from __future__ import annotations

import ctypes
import pathlib
import sys
import time
import traceback

import numpy as np

from tessera import dist

ROOT = pathlib.Path(__file__).resolve().parents[3]
mesh = dist.Mesh(axes=("dp", "tp"), shape=(2, 2))
R = mesh.rank
done = 0


def check(name, fn, *args):
    global done
    try:
        fn(*args)
        print(f"rank {R} ok {name}", flush=True)
        done += 1
    except Exception as e:  # reported, and the pytest side fails on it
        print(f"rank {R} FAIL {name}: {type(e).__name__}: {e}\n{traceback.format_exc()}", flush=True)


def block(n, parts, i):
    return np.array_split(np.arange(n), parts)[i]


def base(shape, dtype=np.float32):
    return (np.arange(int(np.prod(shape))) % 7 + 1).reshape(shape).astype(dtype)


def spec(*args, **kw):
    return dist.ShardSpec(*args, **kw)


def all_reduce_ops(axis):
    group = mesh.ranks_along(axis)
    vals = {r: base((3, 4)) * (r + 1) for r in range(4)}
    ref = {"sum": sum(vals[r] for r in group), "prod": np.prod([vals[r] for r in group], axis=0),
           "max": np.max([vals[r] for r in group], axis=0), "min": np.min([vals[r] for r in group], axis=0),
           "avg": sum(vals[r] for r in group) / len(group)}
    for op, want in ref.items():
        t = dist.from_numpy(vals[R], None, mesh, name=f"v_{op}", backend="cpu")
        got = dist.all_reduce(t, axis=axis, op=op)
        assert np.allclose(got.local, want), (op, got.local, want)
    i = dist.from_numpy(base((5,), np.int32) * (R + 1), None, mesh, name="ints", backend="cpu")
    assert np.array_equal(dist.all_reduce(i, axis).local, sum(base((5,), np.int32) * (r + 1) for r in group))
    h = dist.from_numpy(base((6,), np.float16) * (R + 1), None, mesh, name="halves", backend="cpu")
    out = dist.all_reduce(h, axis)
    assert out.local.dtype == np.float16 and np.allclose(out.local, sum(base((6,), np.float32) * (r + 1) for r in group))


def resolve_replicated(axis):
    group = mesh.ranks_along(axis)
    g = dist.from_numpy(base((4, 3)) * (R + 1), spec(None, (axis,), reduce="sum"), mesh, name="G", backend="cpu")
    g.resolve()
    assert g.local.shape == (4, 3) and np.allclose(g.local, sum(base((4, 3)) * (r + 1) for r in group))
    assert not g.layout.pending


def reduce_scatter_uneven(axis):
    group = mesh.ranks_along(axis)
    me = mesh.coords[axis]
    total = sum(base((7, 5)) * (r + 1) for r in group)
    g = dist.from_numpy(base((7, 5)) * (R + 1), spec(("row",), (axis,), reduce="sum"), mesh, name="G", backend="cpu")
    assert g.local.shape == (7, 5)  # full-size partial result
    g.resolve()
    assert np.allclose(g.local, total[block(7, 2, me)]), g.local
    p = dist.from_numpy(base((4, 7)) * (R + 1), None, mesh, name="P", backend="cpu")
    z = dist.collective.reduce_scatter(p, axis=axis, dim="col")
    want = sum(base((4, 7)) * (r + 1) for r in group)[:, block(7, 2, me)]
    assert np.allclose(z.local, want) and z.layout.dim_of(axis) == 1
    assert np.allclose(z.to_numpy(), sum(base((4, 7)) * (r + 1) for r in group))
    a = dist.reduce_scatter(p, axis=axis, op="max")
    assert np.allclose(a.local, np.max([base((4, 7)) * (r + 1) for r in group], axis=0)[block(4, 2, me)])


def all_gather_uneven(axis):
    x = base((7, 5))
    for part in ("row", "col"):
        t = dist.from_numpy(x, spec((part,), (axis,)), mesh, name=f"X{part}", backend="cpu")
        d = 0 if part == "row" else 1
        assert t.local.shape[d] == len(block(x.shape[d], 2, mesh.coords[axis]))
        full = dist.all_gather(t, axis=axis)
        assert np.array_equal(full.local, x) and not full.layout.splits


def broadcast_root(axis):
    t = dist.from_numpy(base((3, 3)) + 100 * mesh.coords[axis], None, mesh, name="B", backend="cpu")
    got = dist.broadcast(t, axis=axis, root=1)
    assert np.array_equal(got.local, base((3, 3)) + 100)


def broadcast_split(axis):
    """Spec section 13's `dist.broadcast(A, axis="dp", root=0)` on row blocks: the root's block,
    uneven (5 rows over 2: 3 and 2), replicated over the axis, still split over the other axis."""
    other = "tp" if axis == "dp" else "dp"
    x = base((5, 7))
    t = dist.from_numpy(x, spec(("row", "col"), (axis, other)), mesh, name="BS", backend="cpu")
    cols = block(7, 2, mesh.coords[other])
    for root in (0, 1):
        got = dist.broadcast(t, axis=axis, root=root)
        rows = block(5, 2, root)
        assert got.shape == (len(rows), 7) and got.layout.dim_of(axis) is None and got.layout.dim_of(other) == 1
        assert np.array_equal(got.local, x[rows][:, cols]), (root, got.local)
        assert np.array_equal(got.to_numpy(), x[rows])
    h = dist.broadcast(t, axis=axis, root=1, async_op=True)
    assert np.array_equal(h.wait().local, x[block(5, 2, 1)][:, cols])


def all_to_all_uneven(axis):
    x = base((5, 7))
    me = mesh.coords[axis]
    t = dist.from_numpy(x, spec(("col",), (axis,)), mesh, name="T", backend="cpu")
    got = dist.all_to_all(t, axis=axis, split_dim=0, concat_dim=1)
    assert np.array_equal(got.local, x[block(5, 2, me)]), got.local
    assert got.layout.dim_of(axis) == 0
    back = dist.all_to_all(got, axis=axis, split_dim=1, concat_dim=0)
    assert np.array_equal(back.local, t.local)


def async_handles(axis):
    group = mesh.ranks_along(axis)
    me = mesh.coords[axis]
    x = base((6, 4))
    t = dist.from_numpy(x * (R + 1), None, mesh, name="A", backend="cpu")
    s = dist.from_numpy(x, spec(("row",), (axis,)), mesh, name="S", backend="cpu")
    handles = [dist.all_reduce(t, axis, async_op=True), dist.reduce_scatter(t, axis, async_op=True),
               dist.all_gather(s, axis, async_op=True), dist.broadcast(t, axis, root=0, async_op=True),
               dist.all_to_all(dist.from_numpy(x, spec(("col",), (axis,)), mesh, name="C", backend="cpu"), axis,
                               split_dim=0, concat_dim=1, async_op=True)]
    total = sum(x * (r + 1) for r in group)
    a2a, b, g, rs, ar = (h.wait() for h in reversed(handles))  # waited in another order than started
    assert np.allclose(ar.local, total)
    assert np.allclose(rs.local, total[block(6, 2, me)])
    assert np.array_equal(g.local, x)
    assert np.allclose(b.local, x * (group[0] + 1))
    assert np.array_equal(a2a.local, x[block(6, 2, me)])
    assert handles[0].wait() is ar  # waiting again gives the same result


def to_numpy_2d():
    x = base((9, 7))
    t = dist.from_numpy(x, spec(("row", "col"), ("dp", "tp")), mesh, name="X2", backend="cpu")
    assert t.local.shape == (len(block(9, 2, mesh.coords["dp"])), len(block(7, 2, mesh.coords["tp"])))
    assert np.array_equal(t.to_numpy(), x)
    z = dist.tensor((9, 7), spec(("row", "col"), ("dp", "tp")), mesh, dtype="f64", backend="cpu")
    assert z.local.dtype == np.float64 and not z.to_numpy().any()
    p = dist.from_numpy(x * (R + 1), spec(("row", "col"), ("dp", "tp"), reduce="sum"), mesh, name="P2", backend="cpu")
    assert np.allclose(p.to_numpy(), x * 10)  # 1 + 2 + 3 + 4, the partials summed over both axes


def sample():
    sys.path.insert(0, str(ROOT / "samples" / "dist"))
    import tp_matmul

    _, ok = tp_matmul.run(2, 2, 21, 10, 13, 9, backend="cpu")
    assert ok


def nccl_bootstrap():
    """The unique id drawn by each axis's coordinate 0 reaches its group over MPI; the library
    call that would join the communicator (needs a GPU) is recorded instead."""
    from nccl.bindings import nccl

    from tessera.dist.nccl import UID_BYTES, NcclEngine

    class Lib:
        UniqueId = nccl.UniqueId
        get_unique_id = staticmethod(nccl.get_unique_id)

        def comm_init_rank(self, n, uid, rank):
            self.joined = (n, ctypes.string_at(uid.ptr, UID_BYTES), rank)
            return "comm"

    ids = {}
    for axis in ("dp", "tp"):
        lib = Lib()
        eng = NcclEngine.bootstrap(mesh.mpi(axis), lib=lib, ops=object())
        n, uid, rank = lib.joined
        assert (n, rank, eng.comm) == (2, mesh.coords[axis], "comm")
        everyone = np.empty((4, UID_BYTES), np.uint8)
        mesh.mpi(axis).comm.Allgather(np.frombuffer(uid, np.uint8), everyone[:2])
        assert (everyone[0] == everyone[1]).all()
        ids[axis] = uid
    allids = np.empty((4, 2, UID_BYTES), np.uint8)
    mine = np.stack([np.frombuffer(ids[a], np.uint8) for a in ("dp", "tp")])
    from mpi4py import MPI

    MPI.COMM_WORLD.Allgather(mine, allids)
    assert len({bytes(allids[r, k]) for r in range(4) for k in range(2)}) == 4  # one id per group


def fails_everywhere(name, fn, text):
    t0 = time.perf_counter()
    try:
        fn()
    except dist.DistError as e:
        assert text in str(e), str(e)
        assert time.perf_counter() - t0 < 30
        print(f"rank {R} DistError {name}: {e}", flush=True)
        return
    raise AssertionError(f"{name}: no DistError")


def mismatches():
    shape = (8, 6) if R != 3 else (8, 5)
    fails_everywhere("shape", lambda: dist.tensor(shape, spec(("row",), ("dp",)), mesh, name="W", backend="cpu"),
                     "disagree on the shape of 'W': (8, 6) on processes 0, 1, 2; (8, 5) on process 3")
    dt = "f32" if R != 1 else "i32"
    fails_everywhere("dtype", lambda: dist.from_numpy(np.zeros((4, 4), dt and np.float32 if R != 1 else np.int32),
                                                      None, mesh, name="D", backend="cpu"),
                     "disagree on the dtype of 'D': float32 on processes 0, 2, 3; int32 on process 1")
    t = dist.from_numpy(base((4, 4)), None, mesh, name="M", backend="cpu")
    fails_everywhere("axis", lambda: dist.all_reduce(t, axis="dp" if R else "tp"), "disagree on the collective")
    lay = spec(("row",), ("dp",)) if R != 2 else spec(("col",), ("dp",))
    fails_everywhere("layout", lambda: dist.from_numpy(base((4, 4)), lay, mesh, name="L", backend="cpu"),
                     "disagree on the layout of 'L'")
    fails_everywhere("not a tensor", lambda: dist.all_gather(t if R else base((2,)), axis="dp"),
                     "disagree on the collective")
    fails_everywhere("gather replicated", lambda: dist.all_gather(t, axis="tp"), "is not split over 'tp'")
    fails_everywhere("mesh", lambda: dist.Mesh(axes=("a", "b"), shape=(2, 2) if R else (2, 2),
                                               devices=[0, 1, 2, 3] if R else [1, 0, 2, 3]),
                     "disagree on the mesh")


for axis in ("dp", "tp"):
    check(f"all_reduce {axis}", all_reduce_ops, axis)
    check(f"resolve all-reduce {axis}", resolve_replicated, axis)
    check(f"reduce_scatter {axis}", reduce_scatter_uneven, axis)
    check(f"all_gather {axis}", all_gather_uneven, axis)
    check(f"broadcast {axis}", broadcast_root, axis)
    check(f"broadcast split {axis}", broadcast_split, axis)
    check(f"all_to_all {axis}", all_to_all_uneven, axis)
    check(f"async {axis}", async_handles, axis)
check("to_numpy", to_numpy_2d)
check("sample", sample)
check("nccl bootstrap", nccl_bootstrap)
check("mismatches", mismatches)
print(f"rank {R} done {done}", flush=True)
