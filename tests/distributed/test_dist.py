"""The distributed layer (tessera.dist): real multi-process jobs under mpiexec (MPICH from pip) for
the collectives, a job of one without a launcher, the layout arithmetic in-process, and the NCCL
path: its bootstrap in the 4-process job up to the library call, its call plan here with the
library and the device replaced, and on real devices when there are some (`gpu`, `multi_gpu`)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tessera.base.errors import DistError, TesseraError
from tessera.dist.engines import mpiexec
from tessera.dist.shardspec import Placement, ShardSpec, block, block_sizes, dim_number, place
from tests.conftest import ROOT, session_cache

JOBS = ROOT / "tests" / "distributed" / "jobs"
MPIEXEC = mpiexec() or pathlib.Path("mpiexec")


def _env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TESSERA_BACKEND"}
    env["TESSERA_CACHE_DIR"] = str(session_cache(tmp_path_factory))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> str:
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    return out


def test_import_tessera_imports_no_engine() -> None:
    code = ("import sys, tessera, tessera.api, tessera.dist\n"
            "assert not any(m.split('.')[0] in ('mpi4py', 'nccl') for m in sys.modules), 'engine imported'\n"
            "del sys.modules['tessera.dist.tensor']\n"
            "args, kw = tessera.api.local_shards((1, 2.0), {'x': 3})\n"
            "assert (args, kw) == ((1, 2.0), {'x': 3}) and 'tessera.dist.tensor' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=ROOT)


def test_four_process_job(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every collective along each axis of a 2 x 2 mesh, uneven splits, async handles, the sample
    against NumPy, the NCCL bootstrap, and disagreements that fail on every rank (each < 30 s)."""
    assert mpiexec() is not None, "mpiexec comes with the mpich wheel of the dist extra"
    out = _run([str(MPIEXEC), "-n", "4", sys.executable, str(JOBS / "collectives_job.py")],
               _env(tmp_path_factory), timeout=180)
    assert " FAIL " not in out, out
    for rank in range(4):
        assert f"rank {rank} done 20" in out, out
        for name in ("shape", "dtype", "axis", "layout", "not a tensor", "gather replicated", "mesh"):
            assert f"rank {rank} DistError {name}: " in out, out
    assert ("rank 3 DistError shape: dist.tensor('W'): the processes disagree on the shape of 'W': (8, 6) on "
            "processes 0, 1, 2; (8, 5) on process 3") in out


def test_arguments_one_process_refuses_fail_every_process(tmp_path_factory: pytest.TempPathFactory) -> None:
    """dist.tensor, dist.from_numpy and dist.Mesh arguments that one process refuses raise DistError on
    every process (each < 30 s) and leave the job working; then 40 random rounds in which any processes refuse
    theirs or pass others' against a model of who raises what (REFUSALS_ROUNDS, REFUSALS_SEED). Before, the refusing process raised at once and
    the others waited in the metadata exchange forever (the job's alarm ends a process after 90 s)."""
    out = _run([str(MPIEXEC), "-n", "4", sys.executable, str(JOBS / "refusals_job.py")],
               _env(tmp_path_factory), timeout=180)
    assert " FAIL " not in out, out
    for rank in range(4):
        assert f"rank {rank} done 15" in out and f"rank {rank} random 40 of 40" in out, out
    assert ("rank 0 DistError tensor shape: dist.tensor('T'): process 3 refused its arguments (dist.tensor(): "
            "shape must be 1 to 8 non-negative ints, not (4, -1))") in out
    assert all(f"rank {rank} DistError async_op:" in out for rank in range(4)), out


def test_job_of_one_without_a_launcher(tmp_path_factory: pytest.TempPathFactory) -> None:
    out = _run([sys.executable, str(JOBS / "single_job.py")], _env(tmp_path_factory), timeout=120)
    assert "done 2" in out, out


def test_dist_error_is_a_tessera_error() -> None:
    from tessera import dist

    assert dist.DistError is DistError and issubclass(DistError, TesseraError)
    assert dist.collective.reduce_scatter is dist.reduce_scatter


@pytest.mark.parametrize("n", [0, 1, 5, 7, 8, 13])
@pytest.mark.parametrize("parts", [1, 2, 3, 4])
def test_blocks_follow_array_split(n: int, parts: int) -> None:
    want = [len(b) for b in np.array_split(np.arange(n), parts)]
    assert block_sizes(n, parts) == want
    starts = np.cumsum([0, *want])
    assert [block(n, parts, i) for i in range(parts)] == [(int(starts[i]), int(starts[i + 1])) for i in range(parts)]


def test_named_dimensions() -> None:
    assert [dim_number(d, 2, "t") for d in ("row", "col", "batch", "channel", 1)] == [0, 1, 0, 1, 1]
    assert [dim_number(d, 4, "t") for d in ("row", "col", "batch", "channel")] == [2, 3, 0, 1]
    assert dim_number("row", 1, "t") == 0
    with pytest.raises(DistError, match="partition 'col' names no dimension of a 1-dimensional tensor"):
        dim_number("col", 1, "t")


@pytest.mark.parametrize("kwargs, message", [
    ({"partition": ("rows",)}, "'rows' is no dimension"),
    ({"partition": (-1,)}, "-1 is no dimension"),
    ({"partition": ()}, "must be None or a non-empty tuple"),
    ({"partition": ("row", "col"), "mesh_axes": ("dp",)}, "needs one mesh axis per dimension, mesh_axes has 1"),
    ({"mesh_axes": ("dp", "dp")}, "names an axis twice"),
    ({"partition": ("row",), "replicate": True}, "replicate=True contradicts a partition"),
    ({"reduce": "mean"}, "reduce=...) must be one of sum, prod, max, min, avg"),
    ({"replicate": "yes"}, "replicate=...) must be a bool"),
])
def test_shardspec_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(DistError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ShardSpec(**kwargs)


def test_placement() -> None:
    p = place(ShardSpec(("row", "col"), ("dp", "tp")), 2, ("dp", "tp"), "t")
    assert p == Placement(((0, "dp"), (1, "tp")))
    assert p.local_extent(0, 7, {"dp": 1, "tp": 0}, {"dp": 2, "tp": 2}) == (4, 7)
    g = place(ShardSpec(("row",), ("tp",), reduce="sum"), 2, ("dp", "tp"), "t")
    assert g.pending == ("tp",) and g.local_extent(0, 7, {"dp": 0, "tp": 1}, {"dp": 2, "tp": 2}) == (0, 7)
    assert place(ShardSpec(None, reduce="avg"), 2, ("dp", "tp"), "t").pending == ("dp", "tp")
    assert place(ShardSpec(("col",)), 2, ("tp",), "t").splits == ((1, "tp"),)
    with pytest.raises(DistError, match="splits dimension 0 twice"):
        place(ShardSpec(("row", "batch"), ("dp", "tp")), 2, ("dp", "tp"), "t")
    with pytest.raises(DistError, match="splits 2 dimensions but the mesh has only 1 axes"):
        place(ShardSpec(("row", "col")), 2, ("tp",), "t")


class _Lib:
    """NCCL's bindings, recording the calls the engine makes."""

    class DataType:
        Uint8, Float32 = 1, 7

    class RedOp:
        Sum, Max = 0, 2

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        return lambda *args: self.calls.append((name, *args))


class _Buf:
    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.ptr, self.shape, self.dtype = ptr, shape, np.dtype(dtype)
        self.nbytes = int(np.prod(shape)) * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"data": (self.ptr, False)}


class _Ops:
    """The device operations, recording copies and handing out fake addresses."""

    def __init__(self, lib: _Lib) -> None:
        self.lib, self.next = lib, 0x10000

    def alloc(self, shape, dtype):
        self.next += 0x10000
        return _Buf(self.next, shape, dtype)

    def handle(self) -> int:
        return 99

    def after_default(self) -> None:
        self.lib.calls.append(("wait default",))

    def before_default(self) -> None:
        self.lib.calls.append(("default waits",))

    def copy2d(self, *args) -> None:
        self.lib.calls.append(("copy2d", *args))


def test_nccl_plan_uneven_gather_along_columns() -> None:
    """all_gather of a (2, 3) block of a (2, 5) tensor split by columns over 2 processes, seen
    from process 0: each process broadcasts its block (3 and 2 columns: 24 and 16 bytes), then
    each block is copied into its columns of the result (row pitch 20 bytes)."""
    from tessera.dist.nccl import NcclEngine

    lib = _Lib()
    ops = _Ops(lib)
    eng = NcclEngine(lib, "comm", 2, 0, ops)
    a = _Buf(0x1000, (2, 3), np.float32)
    out = eng.all_gather(a, 1, [3, 2], False).wait()
    stage = out.ptr + 0x10000
    assert out.shape == (2, 5)
    assert lib.calls == [
        ("wait default",), ("group_start",),
        ("broadcast", 0x1000, stage, 24, 1, 0, "comm", 99),
        ("broadcast", 0x1000, stage + 24, 16, 1, 1, "comm", 99),
        ("group_end",),
        ("copy2d", out.ptr, 20, stage, 12, 12, 2),
        ("copy2d", out.ptr + 12, 20, stage + 24, 8, 8, 2),
        ("default waits",)]


def test_nccl_plan_reduce_scatter() -> None:
    """Even blocks along rows: one reduce_scatter, no copy; uneven: a grouped reduce per owner."""
    from tessera.dist.nccl import NcclEngine

    lib = _Lib()
    eng = NcclEngine(lib, "comm", 2, 1, _Ops(lib))
    a = _Buf(0x1000, (4, 3), np.float32)
    out = eng.reduce_scatter(a, 0, [2, 2], "sum", False, "t").wait()
    assert out.shape == (2, 3)
    assert lib.calls[1:-1] == [("reduce_scatter", 0x1000, out.ptr, 6, 7, 0, "comm", 99)]
    lib.calls.clear()
    a = _Buf(0x1000, (5, 3), np.float32)
    out = eng.reduce_scatter(a, 0, [3, 2], "max", False, "t").wait()
    assert out.shape == (2, 3)
    assert lib.calls[1:-1] == [("group_start",), ("reduce", 0x1000, 0x1000, 9, 7, 2, 0, "comm", 99),
                               ("reduce", 0x1000 + 36, out.ptr, 6, 7, 2, 1, "comm", 99), ("group_end",)]
    with pytest.raises(DistError, match="NCCL cannot reduce bool arrays"):
        eng.all_reduce(_Buf(0x1000, (2,), np.bool_), "sum", False, "t")


@pytest.mark.gpu
def test_device_collectives_job_of_one(tmp_path_factory: pytest.TempPathFactory) -> None:
    out = _run([sys.executable, str(JOBS / "device_job.py")], _env(tmp_path_factory), timeout=300)
    assert "device done" in out, out


@pytest.mark.gpu
@pytest.mark.multi_gpu
def test_device_collectives_two_gpus(tmp_path_factory: pytest.TempPathFactory) -> None:
    out = _run([str(MPIEXEC), "-n", "2", sys.executable, str(JOBS / "device_job.py")], _env(tmp_path_factory),
               timeout=300)
    assert out.count("device done") == 2, out
