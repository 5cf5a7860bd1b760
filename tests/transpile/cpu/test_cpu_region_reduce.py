"""Region mode's group reductions and per-tile vector access (transpile/cpu/group_reduce.py): a
kernel with `group_sum` / `group_max` / `group_min` or `r[:] = X[i, j:j + VEC]` runs in region mode,
with the same bytes as fiber mode (TESSERA_CPU_REGIONS=0) and as a Python model of fiber mode's
order of operations (templates/device/group_reduce.cuh: shuffles within each warp of 32 tiles,
then the warps' values left to right; all tiles left to right where the group is not whole warps)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.base.options import CompileOptions
from tessera.ops import launcher
from tessera.transpile.driver import SourceFile, compile_source

pytestmark = pytest.mark.usefixtures("shared_cache")
f32 = np.float32


def _op(op: str):  # noqa: ANN202 -- the C operator of the reduction, on numpy scalars
    return {"sum": lambda a, b: a + b, "max": lambda a, b: b if b > a else a, "min": lambda a, b: b if b < a else a}[op]


def reduce_model(values: np.ndarray, op: str) -> np.generic:
    """Fiber mode's group reduction of the tiles' `values` (one group), in its order."""
    f = _op(op)
    v = list(values)
    if len(v) % 32:
        r = v[0]
        for x in v[1:]:
            r = f(r, x)
        return r
    partial = []
    for w in range(0, len(v), 32):
        a = v[w:w + 32]
        o = 16
        while o:
            a = [f(a[lane], a[lane ^ o]) for lane in range(32)]  # every lane: its own value first
            o //= 2
        partial.append(a[0])
    r = partial[0]
    for x in partial[1:]:
        r = f(r, x)
    return r


def _both(src: str, name: str, launch, make, monkeypatch: pytest.MonkeyPatch) -> dict[str, np.ndarray]:  # noqa: ANN001
    monkeypatch.setenv("TESSERA_CPU_THREADS", "1")
    got = make()
    k = tessera.compile(src, backend="cpu")[name]
    assert k.info().regions, src
    launch(k, got)
    monkeypatch.setenv("TESSERA_CPU_REGIONS", "0")
    want = make()
    k = tessera.compile(src, backend="cpu")[name]
    assert not k.info().regions
    launch(k, want)
    for key in got:
        assert got[key].tobytes() == want[key].tobytes(), key
    return got


FORMS = """
@kernel tile[(NT,)]
def forms(x: f32[G, NT], y: mut f32[G, NT], out: mut f32[G, 8], rounds: i32):
    t = tile_linear_id()
    g = group_linear_id()
    v = x[g, t]
    s = group_sum(v)
    if t == 0:
        out[g, 0] = s
    out[g, 1] = group_max(v) - 0.0
    m = group_max(v)
    lo = group_min(v) * 2.0
    if group_sum(v * 0.5) > 0.0:
        v = v + 1.0
    for k in range(rounds):
        v = v * 0.5 + group_sum(v) * 0.25
        if t < 3:
            v = v - 1.0
    w = 0.0
    while w < 2.0:
        v = v + group_min(v)
        w += 1.0
    d = group_max(v) + group_min(v)
    y[g, t] = v
    if t == NT - 1:
        out[g, 2] = m
        out[g, 3] = lo
        out[g, 4] = d
"""


def forms_model(x: np.ndarray, rounds: int) -> tuple[np.ndarray, np.ndarray]:
    groups, nt = x.shape
    y, out = np.zeros_like(x), np.zeros((groups, 8), f32)
    for g in range(groups):
        v = x[g].copy()
        out[g, 0] = reduce_model(v, "sum")
        out[g, 1] = f32(reduce_model(v, "max") - f32(0))
        m, lo = reduce_model(v, "max"), f32(reduce_model(v, "min") * f32(2))
        if reduce_model(v * f32(0.5), "sum") > 0:
            v = v + f32(1)
        for _ in range(rounds):
            v = v * f32(0.5) + f32(reduce_model(v, "sum") * f32(0.25))
            v[:3] = v[:3] - f32(1)
        for _ in range(2):
            v = v + reduce_model(v, "min")
        out[g, 4] = f32(reduce_model(v, "max") + reduce_model(v, "min"))
        y[g], out[g, 2], out[g, 3] = v, m, lo
    return y, out


@pytest.mark.parametrize("nt", [1, 7, 32, 48, 64, 96, 128])
@pytest.mark.parametrize("rounds", [0, 3])
def test_reductions_in_loops_and_conditions(nt: int, rounds: int, monkeypatch: pytest.MonkeyPatch) -> None:
    src = FORMS.replace("NT", str(nt))

    def make() -> dict[str, np.ndarray]:
        x = np.random.default_rng(nt).standard_normal((3, nt)).astype(f32)
        x[0, : nt // 2] = 0.0  # signed zeros for max and min
        x[0, nt // 2:] = -0.0
        return {"x": x, "y": np.zeros((3, nt), f32), "out": np.zeros((3, 8), f32)}

    got = _both(src, "forms", lambda k, a: k(a["x"], a["y"], a["out"], rounds, grid=3), make, monkeypatch)
    y, out = forms_model(make()["x"], rounds)
    assert got["y"].tobytes() == y.tobytes()
    assert got["out"].tobytes() == out.tobytes()


@pytest.mark.parametrize("op", ["max", "min", "sum"])
@pytest.mark.parametrize("nt", [32, 64, 40])
def test_nan_and_signed_zero_order(op: str, nt: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`b > a ? b : a` keeps whichever of +0/-0 or NaN came first: the order is visible."""
    src = f"""
@kernel tile[({nt},)]
def red(x: f32[G, {nt}], out: mut f32[G]):
    r = group_{op}(x[group_linear_id(), tile_linear_id()])
    if tile_linear_id() == 5:
        out[group_linear_id()] = r
"""
    # (a NaN's sign after an addition is the processor's choice, which numpy's model need not share)
    values = [0.0, -0.0, 1.0, -1.0] + ([] if op == "sum" else [np.nan, -np.nan])
    x = np.random.default_rng(nt).choice(np.array(values, f32), size=(16, nt))
    got = _both(src, "red", lambda k, a: k(a["x"], a["out"], grid=16),
                lambda: {"x": x.copy(), "out": np.zeros(16, f32)}, monkeypatch)
    want = np.array([reduce_model(row, op) for row in x], f32)
    assert got["out"].tobytes() == want.tobytes()


@pytest.mark.parametrize("ty", ["i32", "u32", "i64", "f64"])
def test_integer_and_double_reductions(ty: str, monkeypatch: pytest.MonkeyPatch) -> None:
    src = f"""
@kernel tile[(64,)]
def ired(x: {ty}[G, 64], out: mut {ty}[G, 3]):
    v = x[group_linear_id(), tile_linear_id()]
    a = group_sum(v)
    b = group_max(v)
    c = group_min(v)
    if tile_linear_id() == 0:
        out[group_linear_id(), 0] = a
        out[group_linear_id(), 1] = b
        out[group_linear_id(), 2] = c
"""
    dt = {"i32": np.int32, "u32": np.uint32, "i64": np.int64, "f64": np.float64}[ty]

    def make() -> dict[str, np.ndarray]:
        x = (np.random.default_rng(2).standard_normal((4, 64)) * 1000)
        return {"x": (np.abs(x) if ty == "u32" else x).astype(dt), "out": np.zeros((4, 3), dt)}

    got = _both(src, "ired", lambda k, a: k(a["x"], a["out"], grid=4), make, monkeypatch)
    x = make()["x"]
    want = np.array([[reduce_model(r, op) for op in ("sum", "max", "min")] for r in x], dt)
    assert got["out"].tobytes() == want.tobytes()


KEEPS_FIBERS = {
    "a reduction under a branch": "    if G > 1:\n        s = group_sum(v)\n",
    "a reduction in a while condition": "    while group_sum(v) < 0.0:\n        v = v + 1.0\n",
    "a narrow type": "    h = group_sum(f16(v))\n",
    "a reduction under a select": "    s = group_sum(v) if G > 1 else 0.0\n",
    "a statement that also reads memory": "    s = group_sum(v) + x[0, t]\n",
    "a cumulative sum": "    s = group_cumsum(v)\n",
}


@pytest.mark.parametrize("what", sorted(KEEPS_FIBERS))
def test_other_forms_keep_fiber_mode(what: str, monkeypatch: pytest.MonkeyPatch) -> None:
    src = ("@kernel tile[(32,)]\ndef k(x: f32[G, 32], y: mut f32[G, 32]):\n    t = tile_linear_id()\n"
           "    v = x[group_linear_id(), t]\n" + KEEPS_FIBERS[what] + "    y[group_linear_id(), t] = v\n")
    assert not tessera.compile(src, backend="cpu")["k"].info().regions
    # and it still gives fiber mode's results (the rewrite is not kept)
    monkeypatch.setenv("TESSERA_CPU_THREADS", "1")
    x = np.random.default_rng(0).standard_normal((2, 32)).astype(f32)
    a, b = np.zeros_like(x), np.zeros_like(x)
    tessera.compile(src, backend="cpu").k(x, a, grid=2)
    monkeypatch.setenv("TESSERA_CPU_REGIONS", "0")
    tessera.compile(src, backend="cpu").k(x, b, grid=2)
    assert a.tobytes() == b.tobytes()


def test_reduction_prints_once_per_group() -> None:
    src = FORMS.replace("NT", "64")
    c = compile_source(SourceFile(path="k.tsr", text=src), options=CompileOptions(cpu_regions=True)).cuda
    assert "tsr_region_reduce<64, float>(&tsr_gm->tsr_rgs_tsr_red1_in[0], tsr_op_sum())" in c
    assert "float tsr_red1{};  // once per group" in c
    assert "__shfl_xor_sync" not in c.partition("CPU region mode")[2]


ROWS = ("layer_norm", "rms_norm", "softmax")


@pytest.mark.parametrize("name", ROWS)
@pytest.mark.parametrize("cfg", [("f32", 64, 2), ("f32", 128, 4), ("f16", 256, 8), ("bf16", 64, 8)])
def test_ops_row_kernels_run_in_region_mode(name: str, cfg: tuple[str, int, int]) -> None:
    ty, nt, vec = cfg
    mod = tessera.compile(launcher.source("rows.tsr"), backend="cpu")
    assert mod[name].info(T=ty, NT=nt, VEC=vec).regions


def _row_args(name: str, r: int, c: int, dt: type, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((r, c)) * 3 + 1).astype(dt)
    w, b = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    y = np.zeros_like(x)
    stats = np.zeros(r, np.float32), np.zeros(r, np.float32)
    if name == "layer_norm":
        return x, w, b, y, *stats, np.float32(1e-5)
    if name == "rms_norm":
        return x, w, y, stats[0], np.float32(1e-5)
    return x, y


@pytest.mark.parametrize("name", ROWS)
@pytest.mark.parametrize("shape", [(3, 1), (5, 100), (4, 1000), (2, 4099)])
@pytest.mark.parametrize("cfg", [("f32", 64, 2), ("f32", 128, 8), ("f16", 64, 4)])
def test_ops_row_kernels_identical_to_fibers(name: str, shape: tuple[int, int], cfg: tuple[str, int, int],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    ty, nt, vec = cfg
    dt = {"f32": np.float32, "f16": np.float16}[ty]
    monkeypatch.setenv("TESSERA_CPU_THREADS", "1")
    results = []
    for mode in ("1", "0"):
        monkeypatch.setenv("TESSERA_CPU_REGIONS", mode)
        args = _row_args(name, *shape, dt, sum(shape))
        mod = tessera.compile(launcher.source("rows.tsr"), backend="cpu")
        assert mod[name].info(T=ty, NT=nt, VEC=vec).regions is (mode == "1")
        mod[name](*args, NT=nt, VEC=vec, grid=shape[0])
        results.append(args)
    for a, b in zip(*results):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
