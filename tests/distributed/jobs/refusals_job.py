"""A 4-process job (mpiexec -n 4): in each case one process passes `dist.tensor`, `dist.from_numpy`
or `dist.Mesh` arguments it refuses (a name too long, a bad dtype, shape or layout, a mesh that is
no Mesh, mesh axes or a shape that do not fit) and the others good ones. Every process must raise
DistError (the refusing one its own, the others one naming it), none may wait for the others, and
the job must still work afterwards. Then random rounds (REFUSALS_ROUNDS of them, seed REFUSALS_SEED)
in which any processes refuse their arguments or pass good ones that differ, against a model of
what each process must see. Prints `rank R DistError NAME: ...` per case, `rank R random K of N`,
then `rank R done N`; an alarm ends a process that hangs."""

from __future__ import annotations

import os
import random
import re
import signal
import time

import numpy as np

from tessera import dist

signal.alarm(90)  # a process that waits forever for the others ends here (and the test fails)
mesh = dist.Mesh(axes=("dp", "tp"), shape=(2, 2))
R = mesh.rank
spec = dist.ShardSpec
ROW = spec(("row",), ("dp",))
A = np.arange(16, dtype=np.float32).reshape(4, 4)


def tensor(**bad):
    """dist.tensor with good arguments, and `bad` on process BAD."""
    args = {"shape": (4, 4), "layout": ROW, "mesh": mesh, "dtype": "f32", "name": "T", "backend": "cpu"}
    return lambda: dist.tensor(**{**args, **(bad if R == BAD else {})})


def from_numpy(**bad):
    args = {"array": A, "layout": ROW, "mesh": mesh, "name": "F", "backend": "cpu"}
    return lambda: dist.from_numpy(**{**args, **(bad if R == BAD else {})})


def mesh_of(**bad):
    args = {"axes": ("a", "b"), "shape": (2, 2)}
    return lambda: dist.Mesh(**{**args, **(bad if R == BAD else {})})


CASES = [
    ("tensor name", 1, tensor(name="n" * 65), "name must be a printable str of 1 to 64 characters"),
    ("tensor dtype", 2, tensor(dtype="complex64"), "dtype must be a .tsr scalar type"),
    ("tensor shape", 3, tensor(shape=(4, -1)), "shape must be 1 to 8 non-negative ints"),
    ("tensor layout", 0, tensor(layout=spec(("row",), ("zz",))), "layout names mesh axis 'zz'"),
    ("tensor layout type", 1, tensor(layout="row"), "layout must be a dist.ShardSpec"),
    ("tensor mesh", 2, tensor(mesh="mesh"), "mesh must be a dist.Mesh"),
    ("tensor backend", 3, tensor(backend="tpu"), "backend= must be one of"),
    ("from_numpy array", 0, from_numpy(array=[1.0, 2.0]), "array must be a NumPy array, not list"),
    ("from_numpy dtype", 1, from_numpy(array=A.astype(np.complex64)), "dtype must be a .tsr scalar type"),
    ("from_numpy layout", 2, from_numpy(layout=spec((5,), ("dp",))), "partition 5 names no dimension"),
    ("from_numpy name", 3, from_numpy(name=""), "name must be a printable str"),
    ("mesh axes", 1, mesh_of(axes=("a", "a")), "names an axis twice"),
    ("mesh shape", 2, mesh_of(shape=(2,)), "Mesh(shape=...) must be 2 positive int(s)"),
    ("mesh size", 3, mesh_of(shape=(2, 3)), "has 6 positions but the job has 4 processes"),
    ("mesh one axis", 0, mesh_of(axes=("a",), shape=(2, 2)), "Mesh(shape=...) must be 1 positive int(s)"),
]

done = 0
for name, BAD, call, reason in CASES:
    t0 = time.perf_counter()
    try:
        call()
        print(f"rank {R} FAIL {name}: no DistError", flush=True)
    except dist.DistError as e:
        text = str(e)
        mine = reason in text and "refused" not in text
        theirs = f"process {BAD} refused its arguments" in text and reason in text
        ok = (mine if R == BAD else theirs) and time.perf_counter() - t0 < 30
        print(f"rank {R} {'DistError' if ok else 'FAIL'} {name}: {text}", flush=True)
        done += ok
# Random rounds, the same plan on every process (one seed): each process passes good arguments, arguments it
# refuses, or good ones that differ from the others'; a model says what each must see.
REFUSED = {"tensor": [{"name": "n" * 65}, {"dtype": "c8"}, {"shape": (-2,)}, {"layout": 3}, {"mesh": None}],
           "from_numpy": [{"array": 3}, {"name": 7}, {"layout": spec((9,), ("dp",))}],
           "mesh": [{"axes": ()}, {"shape": (4, 1, 1)}, {"axes": ("a", "1b")}, {"devices": [0, 0, 1, 2]}]}
OTHER = {"tensor": {"shape": (4, 5)}, "from_numpy": {"array": A[:3]}, "mesh": {"axes": ("a", "c")}}
CALLS = {"tensor": tensor, "from_numpy": from_numpy, "mesh": mesh_of}
rng = random.Random(int(os.environ.get("REFUSALS_SEED", "7")))
rounds = int(os.environ.get("REFUSALS_ROUNDS", "40"))
agreed = 0
for k in range(rounds):
    op = rng.choice(sorted(REFUSED))
    plan = [rng.choice(["good"] * 3 + ["bad", "other"]) for _ in range(4)]
    picks = [rng.choice(REFUSED[op]) for _ in range(4)]
    BAD = R  # tensor(), from_numpy() and mesh_of() apply the arguments given on process BAD: here, each its own
    mine = picks[R] if plan[R] == "bad" else OTHER[op] if plan[R] == "other" else {}
    refused = [r for r in range(4) if plan[r] == "bad"]
    try:
        CALLS[op](**mine)()
        outcome = "ok"
    except dist.DistError as e:
        text = str(e)
        who = re.search(r"process(?:es)? ([0-9, ]+) refused", text)
        outcome = ("own" if "refused" not in text else f"refused {who.group(1) if who else '?'}") \
            if "disagree" not in text else "disagree"
    want = ("own" if R in refused else f"refused {', '.join(map(str, refused))}") if refused else \
        "disagree" if len(set(plan)) > 1 else "ok"
    if outcome == want:
        agreed += 1
    else:
        print(f"rank {R} FAIL random {k} {op} {plan}: {outcome}, the model says {want}", flush=True)
print(f"rank {R} random {agreed} of {rounds}", flush=True)
# A collective's async_op, bad on one process: every process raises (the call they compare differs)
# instead of the others entering the collective and waiting for it.
try:
    dist.all_reduce(dist.from_numpy(A, None, mesh, name="G", backend="cpu"), axis="tp",
                    async_op="yes" if R == 1 else False)
    print(f"rank {R} FAIL async_op: no DistError", flush=True)
except dist.DistError as e:
    print(f"rank {R} DistError async_op: {e}", flush=True)
# the processes still meet: a collective after the refusals
total = dist.all_reduce(dist.from_numpy(A * (R + 1), None, mesh, name="after", backend="cpu"), axis="dp")
group = mesh.ranks_along("dp")
assert np.array_equal(total.local, sum(A * (r + 1) for r in group))
print(f"rank {R} done {done}", flush=True)
