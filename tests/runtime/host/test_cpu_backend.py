"""The CPU backend runs the emitted CUDA C with GPU semantics; results are compared with NumPy
(exact for integers and f16 element-wise arithmetic, tolerances stated per test otherwise)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import tessera
from samples.runner import CASES, check_kernel
from tessera.base.options import CompileOptions
from tests.conftest import ROOT, sample_of

pytestmark = pytest.mark.usefixtures("shared_cache")


def compile_cpu(text: str, **kw) -> tessera.api.Module:
    return tessera.compile(text, backend="cpu", **kw)


@pytest.mark.parametrize("name", sorted(CASES))
def test_samples_match_numpy(name: str) -> None:
    mod = tessera.load(sample_of(name), backend="cpu")
    ok, message = check_kernel(mod, name, seed=1)
    assert ok, message


def test_seed_sum_reduce_exactly_as_written() -> None:
    mod = tessera.load(ROOT / "samples" / "sum_reduce.tsr")
    assert mod.backend == "cpu"
    x = np.arange(1 << 14, dtype=np.float32) % 7
    out = np.zeros(4, np.float32)
    mod.sum_reduce(x, out)
    assert np.array_equal(out, np.full(4, x.sum(), np.float32))  # small integers: exact
    out2 = np.zeros(4, np.float32)
    mod["sum_reduce"][4](x, out2)
    assert np.array_equal(out, out2)


def test_barriers_inside_loops_and_group_reductions_with_partial_warps() -> None:
    mod = compile_cpu("""
@kernel tile[(48,)]
def k(x: f32[n], out: mut f32[grid_groups], mx: mut i32[grid_groups]):
    t = tile_linear_id()
    s = 0.0
    for base in range(0, n, group_tile_count()):
        if base + t < n:
            s += x[base + t]
        tbarrier()
    total = group_sum(s)
    m = group_max(t)
    if t == 0:
        out[group_linear_id()] = total
        mx[group_linear_id()] = m
""")
    x = np.arange(480, dtype=np.float32)
    out = np.zeros(3, np.float32)
    mx = np.zeros(3, np.int32)
    mod.k(x, out, mx)
    assert np.array_equal(out, np.full(3, x.sum(), np.float32))
    assert np.array_equal(mx, np.full(3, 47, np.int32))


def test_warp_operations() -> None:
    mod = compile_cpu("""
@kernel tile[(64,)]
def k(x: i32[n], s: mut i32[n], b: mut i32[n], d: mut i32[n], m: mut i32[n]):
    t = tile_linear_id()
    s[t] = warp_sum(x[t])
    b[t] = shfl(x[t], 3)
    d[t] = shfl_down(x[t], 1)
    m[t] = warp_max(x[t]) - warp_min(x[t]) + shfl_xor(x[t], 1) * 0
""")
    x = np.random.default_rng(0).integers(-100, 100, 64).astype(np.int32)
    s, b, d, m = (np.zeros(64, np.int32) for _ in range(4))
    mod.k[1](x, s, b, d, m)
    w = x.reshape(2, 32)
    assert np.array_equal(s, np.repeat(w.sum(1), 32))
    assert np.array_equal(b, np.repeat(w[:, 3], 32))
    want_d = w.copy()
    want_d[:, :-1] = w[:, 1:]
    assert np.array_equal(d, want_d.ravel())
    assert np.array_equal(m, np.repeat(w.max(1) - w.min(1), 32))


def test_atomics_from_many_groups() -> None:
    mod = compile_cpu("""
@kernel tile[(128,)]
def k(out: mut i64[2], f: mut f32[2], h: mut f16[1]):
    g = global_linear_id()
    atomic_add(out[0], 1)
    atomic_max(out[1], i64(g))
    atomic_max(f[0], f32(g))
    atomic_add(f[1], 1.0, scope="mesh")
    atomic_add(h[0], 1.0)
""")
    out = np.zeros(2, np.int64)
    f = np.zeros(2, np.float32)
    h = np.zeros(1, np.float16)
    mod.k(out, f, h, grid=16)
    n = 16 * 128
    assert out.tolist() == [n, n - 1]
    assert f.tolist() == [n - 1, n]
    assert h[0] == np.float16(n)  # 2048 is exact in f16


def test_f16_arithmetic_matches_numpy_bit_for_bit() -> None:
    mod = compile_cpu("""
@kernel tile[(256,)]
def k(a: f16[n], b: f16[n], out: mut f16[n]):
    i = global_linear_id()
    if i < n:
        out[i] = a[i] * b[i] + a[i] / b[i] - b[i]
""")
    rng = np.random.default_rng(3)
    a = rng.standard_normal(5000).astype(np.float16)
    b = (rng.standard_normal(5000) + 3).astype(np.float16)
    out = np.zeros_like(a)
    mod.k(a, b, out, grid=20)
    want = a * b + a / b - b  # NumPy computes each f16 operation in f32 and rounds, as the spec says
    assert np.array_equal(out.view(np.uint16), want.view(np.uint16))


def test_integer_semantics_truncate_and_wrap() -> None:
    mod = compile_cpu("""
@kernel tile[(64,)]
def k(a: i32[n], b: i32[n], q: mut i32[n], r: mut i32[n], c: mut i8[n]):
    i = tile_linear_id()
    q[i] = a[i] // b[i]
    r[i] = a[i] % b[i]
    c[i] = i8(a[i]) + i8(100)
""")
    rng = np.random.default_rng(5)
    a = rng.integers(-1000, 1000, 64).astype(np.int32)
    b = rng.choice([-7, -3, 2, 5], 64).astype(np.int32)
    q, r = np.zeros(64, np.int32), np.zeros(64, np.int32)
    c = np.zeros(64, np.int8)
    mod.k[1](a, b, q, r, c)
    assert np.array_equal(q, np.fix(a / b).astype(np.int32))
    assert np.array_equal(r, a - np.fix(a / b).astype(np.int32) * b)
    assert np.array_equal(c, (a.astype(np.int8) + np.int8(100)).astype(np.int8))


def test_dynamic_shared_memory_and_tcopy() -> None:
    mod = compile_cpu("""
@kernel tile[(256,)]
def k(x: f32[R, C], y: mut f32[R, C]):
    buf = tshared.alloc(f32[64, 256])
    r0 = group_id(0) * 64
    tcopy(buf, x[r0:r0 + 64, 0:256])
    tbarrier()
    t = tile_linear_id()
    for r in range(64):
        buf[r, t] = buf[r, t] * 2.0
    tbarrier()
    tcopy(y[r0:r0 + 64, 0:256], buf)
""")
    assert mod.k.info().dynamic_smem == 64 * 256 * 4
    x = np.random.default_rng(0).standard_normal((100, 200)).astype(np.float32)
    y = np.zeros_like(x)
    mod.k(x, y, grid=2)
    assert np.array_equal(y, x * 2)


def test_const_parameters_by_keyword() -> None:
    mod = tessera.load(ROOT / "samples" / "matmul.tsr", backend="cpu")
    rng = np.random.default_rng(2)
    A = rng.standard_normal((50, 40)).astype(np.float32)
    B = rng.standard_normal((40, 33)).astype(np.float32)
    C = np.zeros((50, 33), np.float32)
    mod.matmul(A, B, C, grid=(1, 1), BM=64, BN=64)
    assert np.allclose(C, A @ B, rtol=1e-4, atol=1e-4)
    with pytest.raises(tessera.LaunchError, match="const parameter 'BM' must be an int"):
        mod.matmul(A, B, C, grid=(1, 1), BM="64")


def test_tprint_prints(capfd) -> None:
    mod = compile_cpu('@kernel tile[(2,)]\ndef k(x: i32[n]):\n    tprint("tile %d sees %d\\n", tile_linear_id(), x[0])\n')
    mod.k(np.array([42], np.int32), grid=1)
    out = capfd.readouterr().out
    assert "tile 0 sees 42" in out and "tile 1 sees 42" in out


def test_tassert_fails_the_launch_in_debug_only() -> None:
    text = '@kernel tile[(32,)]\ndef k(x: f32[n]):\n    tassert(x[tile_linear_id()] >= 0.0, "x must be positive")\n'
    x = -np.ones(32, np.float32)
    compile_cpu(text).k(x, grid=1)
    with pytest.raises(tessera.LaunchError, match=r"k:3: x must be positive"):
        compile_cpu(text, debug=True).k(x, grid=1)


OFF_BY_ONE = """
@kernel tile[(64,)]
def shift(x: f32[n], y: mut f32[n]):
    i = global_linear_id()
    if i < n:
        y[i] = x[i + 1]
"""


def test_check_bounds_reports_the_line_and_leaves_arrays_untouched() -> None:
    x = np.arange(100, dtype=np.float32)
    y = np.full(100, -1, np.float32)
    with pytest.raises(tessera.LaunchError) as e:
        compile_cpu(OFF_BY_ONE, check_bounds=True).shift(x, y, grid=2)
    msg = str(e.value)
    assert "shift" in msg and ":6:" in msg and "'x'" in msg and "index 100" in msg and "(size 100)" in msg
    assert np.all(y == -1)


def test_planted_shared_memory_race_is_reported_with_both_lines() -> None:
    mod = compile_cpu("""
@kernel tile[(64,)]
def racy(x: f32[n], y: mut f32[n]):
    s = tshared.alloc(f32[64])
    t = tile_linear_id()
    s[t] = x[t]
    y[t] = s[(t + 1) % 64]
""", check_bounds=True)
    x = np.ones(64, np.float32)
    y = np.zeros(64, np.float32)
    with pytest.raises(tessera.LaunchError, match=r"data race.*line 6.*line 7|data race.*line 7.*line 6"):
        mod.racy(x, y, grid=1)
    fixed = compile_cpu("""
@kernel tile[(64,)]
def ok(x: f32[n], y: mut f32[n]):
    s = tshared.alloc(f32[64])
    t = tile_linear_id()
    s[t] = x[t]
    tbarrier()
    y[t] = s[(t + 1) % 64]
""", check_bounds=True)
    fixed.ok(x, y, grid=1)
    assert np.all(y == 1)


@pytest.mark.parametrize("bad,match", [
    (lambda x, y: ((x.astype(np.float64), y), {}), r"parameter 'x': expected dtype float32 \(f32\), got float64"),
    (lambda x, y: ((x.reshape(10, 10), y), {}), r"parameter 'x': expected 1 dimension"),
    (lambda x, y: ((x, y[:50]), {}), r"parameter 'y': shape symbol 'n' is 50 here but 100 from 'x' dimension 0"),
    (lambda x, y: ((x[::2].repeat(2)[::1], np.zeros(200, np.float32)[::2]), {}), r"parameter 'y': .*not C-contiguous"),
    (lambda x, y: ((x,), {}), r"missing argument: y"),
    (lambda x, y: ((x, [1.0] * 100), {}), r"parameter 'y': expected a NumPy array"),
])
def test_argument_errors_name_the_parameter_and_write_nothing(bad, match) -> None:
    mod = compile_cpu(OFF_BY_ONE.replace("x[i + 1]", "x[i]"))
    x = np.arange(100, dtype=np.float32)
    y = np.full(100, -1, np.float32)
    args, kw = bad(x, y)
    with pytest.raises(tessera.LaunchError, match=match):
        mod.shift(*args, grid=2, **kw)
    assert np.all(y == -1)


def test_scalar_ranges_and_grid_errors() -> None:
    mod = compile_cpu("@kernel tile[(32,)]\ndef k(y: mut u8[n], v: u8):\n    y[tile_linear_id()] = v\n")
    y = np.zeros(32, np.uint8)
    with pytest.raises(tessera.LaunchError, match=r"parameter 'v': 300 is out of range for u8"):
        mod.k(y, 300, grid=1)
    with pytest.raises(tessera.LaunchError, match="no grid given"):
        mod.k(y, 3)
    with pytest.raises(tessera.LaunchError, match="grid must be"):
        mod.k(y, 3, grid="8")
    mod.k(y, np.uint8(7), grid=(1, 1))
    assert np.all(y == 7)


def test_backend_selection(monkeypatch) -> None:
    mod = compile_cpu("@kernel tile[(32,)]\ndef k(y: mut f32[n]):\n    y[0] = 1.0\n")
    assert mod.backend == "cpu"
    auto = tessera.compile("@kernel tile[(32,)]\ndef k(y: mut f32[n]):\n    y[0] = 1.0\n")
    assert auto.backend == "cpu" and "CPU backend" in auto.backend_reason
    monkeypatch.setenv("TESSERA_BACKEND", "bogus")
    with pytest.raises(tessera.TesseraError, match="TESSERA_BACKEND must be one of"):
        tessera.compile("")
    monkeypatch.setenv("TESSERA_BACKEND", "cuda")
    with pytest.raises(tessera.TesseraError, match="not available"):
        tessera.compile("")


def test_compile_errors_raise_compile_error() -> None:
    with pytest.raises(tessera.CompileError) as e:
        tessera.compile("@kernel tile[(32,)]\ndef k(y: f32[n]):\n    y[0] = 1.0\n", backend="cpu", path="bad.tsr")
    assert e.value.diagnostics[0].loc.line == 3
    assert "bad.tsr:3:5: error: cannot store to 'y'" in e.value.text


def test_warm_start_neither_parses_nor_transpiles(tmp_path) -> None:
    code = ("import sys, numpy as np, tessera\n"
            "m = tessera.load('samples/sum_reduce.tsr')\n"
            "out = np.zeros(2, np.float32)\n"
            "m.sum_reduce(np.ones(1000, np.float32), out)\n"
            "assert out.tolist() == [1000.0, 1000.0], out\n"
            "print(sorted(k for k in sys.modules if k in ('lark', 'jinja2', 'tessera.frontend.parser', 'tessera.transpile.driver')))\n")
    env = {"TESSERA_CACHE_DIR": str(tmp_path / "c"), "PATH": "/usr/bin:/bin"}
    import os

    env = dict(os.environ, **env)
    first = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "tessera.frontend.parser" in first.stdout
    second = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "[]"


def test_a_cold_load_imports_neither_the_table_generator_nor_resource_readers(tmp_path) -> None:
    # Taken out of sys.modules first: the site may have imported some already (a .pth that imports
    # certifi imports importlib.resources, its readers and zipfile).
    watched = ("tessera.frontend.parse_tables_gen", "pprint", "importlib.resources", "importlib.readers", "zipfile")
    code = (f"import sys\nfor name in {watched!r}:\n    sys.modules.pop(name, None)\n"
            "import numpy as np, tessera\n"
            "m = tessera.load('samples/sum_reduce.tsr', backend='cpu')\n"
            "out = np.zeros(2, np.float32)\n"
            "m.sum_reduce(np.ones(1000, np.float32), out)\n"
            "assert out.tolist() == [1000.0, 1000.0], out\n"
            f"print(sorted(name for name in {watched!r} if name in sys.modules))\n")
    env = dict(os.environ, TESSERA_CACHE_DIR=str(tmp_path / "c"))
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_a_corrupt_cached_library_is_rebuilt(tmp_path, monkeypatch) -> None:
    import os

    from tessera.runtime.cache import disk as cache_mod

    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setattr(cache_mod, "_warned", set())
    text = "@kernel tile[(32,)]\ndef k(y: mut f32[n]):\n    y[tile_linear_id()] = 2.0\n"
    # Fill the cache from another process (a library loaded here must not be overwritten under us).
    code = f"import numpy as np, tessera; tessera.compile({text!r}, backend='cpu').k(np.zeros(32, np.float32), grid=1)"
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))
    libs = list((tmp_path / "c").rglob("*.so"))
    assert len(libs) == 1
    libs[0].write_bytes(b"garbage")
    y = np.zeros(32, np.float32)
    with pytest.warns(cache_mod.TesseraCacheWarning, match="corrupt"):
        tessera.compile(text, backend="cpu").k(y, grid=1)
    assert np.all(y == 2.0)


def test_device_functions_see_the_callers_group_shape() -> None:
    mod = compile_cpu("""
@device
def me() -> i32:
    return tile_linear_id() + 1000 * group_tile_count() + 100000 * lane_id() * 0 + group_shape(1)

@kernel tile[(8, 4)]
def k(y: mut i32[n]):
    y[global_linear_id()] = me()
""")
    y = np.zeros(64, np.int32)
    mod.k(y, grid=2)
    assert np.array_equal(y, np.tile(np.arange(32) + 32000 + 4, 2))


def test_the_feature_program_runs(tmp_path) -> None:
    """tests/programs/features.tsr uses nearly every builtin; on the CPU backend it must run."""
    mod = tessera.load(ROOT / "tests" / "programs" / "features.tsr", backend="cpu")
    n = 256
    rng = np.random.default_rng(4)
    args = dict(h=rng.random(n).astype(np.float16), b=np.ones(n, np.uint16) * 0x3F80, d=rng.random(n),
                q=rng.integers(0, 9, n).astype(np.int64), u=rng.integers(0, 9, n).astype(np.uint32),
                c=rng.integers(-5, 5, n).astype(np.int8), out=np.zeros(n, np.float32), hout=np.zeros(n, np.float16),
                iout=np.zeros(4, np.int64), bout=np.zeros(4, np.uint16))
    mod.features(*args.values(), 1.5, True, 2, grid=1)
    assert args["iout"][0] == args["q"].sum() and args["iout"][1] == args["q"].max()
    assert args["iout"][2] == -n and args["iout"][3] == 1
    assert np.isfinite(args["out"]).all()


def test_cache_command(tmp_path) -> None:
    import os

    env = dict(os.environ, TESSERA_CACHE_DIR=str(tmp_path / "c"))
    subprocess.run([sys.executable, "samples/runner.py", "samples/histogram.tsr"], cwd=ROOT, env=env, check=True,
                   capture_output=True)
    info = subprocess.run([sys.executable, "-m", "tessera", "cache", "info"], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True).stdout
    assert "cpu:" in info and " 0 entries" not in info.splitlines()[0]
    cleared = subprocess.run([sys.executable, "-m", "tessera", "cache", "clear"], cwd=ROOT, env=env, check=True,
                             capture_output=True, text=True).stdout
    assert "removed" in cleared
    info = subprocess.run([sys.executable, "-m", "tessera", "cache", "info"], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True).stdout
    assert " 0 entries" in info.splitlines()[0]


def test_integer_parameters_can_size_tensors() -> None:
    mod = compile_cpu("@kernel tile[(32,)]\ndef k(x: f32[n], n: i32, y: mut f32[n]):\n"
                      "    for i in range(tile_linear_id(), n, 32):\n        y[i] = x[i] + f32(n)\n")
    x = np.arange(40, dtype=np.float32)
    y = np.zeros(40, np.float32)
    mod.k(x, 40, y, grid=1)
    assert np.array_equal(y, x + 40)
    with pytest.raises(tessera.LaunchError, match=r"parameter 'n' is 39 but 'x' dimension 0 is 40"):
        mod.k(x, 39, y, grid=1)


def test_integer_division_by_zero_does_not_crash_the_host() -> None:
    mod = compile_cpu("@kernel tile[(32,)]\ndef k(a: i32[n], b: i32[n], q: mut i32[n], r: mut i32[n]):\n"
                      "    i = tile_linear_id()\n    q[i] = a[i] // b[i]\n    r[i] = a[i] % b[i]\n")
    a = np.array([7, -7, -2**31, 5] * 8, np.int32)
    b = np.array([0, 2, -1, 3] * 8, np.int32)
    q, r = np.zeros(32, np.int32), np.zeros(32, np.int32)
    mod.k(a, b, q, r, grid=1)  # a GPU gives unspecified values for x // 0; the host must not trap
    assert q[1] == -3 and r[1] == -1 and q[3] == 1 and r[3] == 2


def test_benchmark_on_the_cpu_backend() -> None:
    mod = tessera.load(ROOT / "samples" / "sum_reduce.tsr", backend="cpu")
    ms = mod.sum_reduce.benchmark(np.ones(4096, np.float32), np.zeros(2, np.float32), repeat=3)
    assert 0 < ms < 10_000


def test_tcopy_views_with_indexed_dimensions_and_edges() -> None:
    mod = compile_cpu("""
@kernel tile[(64,)]
def k(x: f32[R, C], y: mut f32[R, C], z: mut f32[R, 32]):
    a = tshared.alloc(f32[32])
    b = tshared.alloc(f32[4, 32], pad=1)
    r = group_id(0)
    tcopy(a, x[r, 8:40])
    tbarrier()
    tcopy(b[1, 0:32], a)
    tbarrier()
    tcopy(y[r, 8:40], b[1, 0:32])
    tcopy(z[r, 0:32], a)
""", check_bounds=True)
    x = np.random.default_rng(0).random((5, 30)).astype(np.float32)
    y, z = np.zeros_like(x), np.zeros((5, 32), np.float32)
    mod.k(x, y, z, grid=5)
    want_y = np.zeros_like(x)
    want_y[:, 8:] = x[:, 8:]   # columns past the tensor's edge are not written
    want_z = np.zeros((5, 32), np.float32)
    want_z[:, :22] = x[:, 8:]  # and read as zero
    assert np.array_equal(y, want_y) and np.array_equal(z, want_z)


@pytest.mark.parametrize("writer", [0, 1, 5])
def test_a_write_after_many_reads_names_a_reading_tile(writer: int) -> None:
    """Every tile reads s[0], then one tile writes it with no barrier between: the report names
    a tile that read it (it once said "tile -1" once more than one tile had read the element)."""
    mod = compile_cpu(f"""
@kernel tile[(8,)]
def many(x: f32[n], y: mut f32[n]):
    s = tshared.alloc(f32[8])
    t = tile_linear_id()
    if t == 0:
        s[0] = x[0]
    tbarrier()
    y[t] = s[0]
    if t == {writer}:
        s[0] = 2.0
""", check_bounds=True)
    with pytest.raises(tessera.LaunchError) as e:
        mod.many(np.ones(8, np.float32), np.zeros(8, np.float32), grid=1)
    m = re.search(r"data race: tile (-?\d+) reads it at line 9 and tile (\d+) writes it at line 11", str(e.value))
    assert m is not None, str(e.value)
    assert 0 <= int(m.group(1)) < 8 and int(m.group(1)) != writer and int(m.group(2)) == writer


def test_a_missing_barrier_after_tcopy_is_reported_as_a_race() -> None:
    text = """
@kernel tile[(64,)]
def k(x: f32[n], y: mut f32[n]):
    a = tshared.alloc(f32[64])
    tcopy(a, x[0:64])
    BARRIER
    t = tile_linear_id()
    y[t] = a[63 - t]
"""
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    with pytest.raises(tessera.LaunchError, match=r"data race.*(line 5.*line 8|line 8.*line 5)"):
        compile_cpu(text.replace("BARRIER", "pass"), check_bounds=True).k(x, y, grid=1)
    compile_cpu(text.replace("BARRIER", "tbarrier()"), check_bounds=True).k(x, y, grid=1)
    assert np.array_equal(y, x[::-1])


def test_f16_scalar_parameters_hold_f16_values_and_3d_groups() -> None:
    mod = compile_cpu("@kernel tile[(2, 2, 4)]\ndef k(a: f16, y: mut f32[16], h: mut f16[16]):\n"
                      "    i = tile_linear_id()\n    y[i] = f32(a) + f32(tile_id(2) * 100 + group_shape(2))\n"
                      "    h[i] = a * 3\n")
    y, h = np.zeros(16, np.float32), np.zeros(16, np.float16)
    mod.k(0.1, y, h, grid=1)
    a = np.float16(0.1)
    assert np.array_equal(h, np.full(16, a * np.float16(3)))
    assert np.array_equal(y, np.float32(a) + (np.arange(16) // 4 * 100 + 4).astype(np.float32))


@pytest.mark.parametrize("stmt,array", [("s[t + 1] = 1.0", "s"), ("r[t % 2, 3] = 1.0", "r")])
def test_check_bounds_covers_shared_and_register_arrays(stmt: str, array: str) -> None:
    mod = compile_cpu(f"@kernel tile[(32,)]\ndef k(y: mut f32[n]):\n    s = tshared.alloc(f32[32])\n"
                      f"    r = tregs(f32[2, 3], 0.0)\n    t = tile_linear_id()\n    {stmt}\n", check_bounds=True)
    with pytest.raises(tessera.LaunchError, match=rf"k:6: index \d+ out of range for dimension \d of '{array}'"):
        mod.k(np.zeros(4, np.float32), grid=1)


def test_float_module_constant_behaves_like_its_literal() -> None:
    # `C * x` with an f64 x is computed in f64, as `0.1 * x` is (it was emitted as `0.1f`).
    mod = compile_cpu("const C = 0.1\n@kernel tile[(4,)]\ndef k(x: f64[n], y: mut f64[n], z: mut f32[n]):\n"
                      "    i = tile_linear_id()\n    y[i] = C * x[i]\n    z[i] = C * f32(x[i])\n")
    x = np.array([3.0, 1e8, -7.0, 0.5])
    y, z = np.zeros(4), np.zeros(4, np.float32)
    mod.k(x, y, z, grid=1)
    assert np.array_equal(y, 0.1 * x)
    assert np.array_equal(z, np.float32(0.1) * x.astype(np.float32))


def test_precedence_comes_from_the_printed_expression() -> None:
    # A cast to the type a value already has prints nothing, and must not take its parentheses
    # with it: `2 * i32(a + 1)` was emitted as `2 * a + 1`.
    mod = compile_cpu("@kernel tile[(1,)]\ndef k(a: i32, y: mut i32[2], z: mut f32[1]):\n"
                      "    y[0] = 2 * i32(a + 1)\n    y[1] = -i32(a - 5)\n    z[0] = 1.5 * f32(i32(a * 3 + 1))\n")
    y, z = np.zeros(2, np.int32), np.zeros(1, np.float32)
    mod.k(4, y, z, grid=1)
    assert y.tolist() == [10, 1] and z[0] == np.float32(1.5 * 13)


@pytest.mark.parametrize("bm,bn", [(16, 16), (32, 32), (64, 32), (32, 128), (128, 64)])
def test_matmul_sample_for_every_block_shape(bm: int, bn: int) -> None:
    # The register tile follows BM and BN (it was fixed at 4 x 4: wrong results for any other
    # shape, and reads past shared memory at 32 x 32).
    mod = tessera.load(ROOT / "samples" / "matmul.tsr", backend="cpu", check_bounds=True)
    rng = np.random.default_rng(bm + bn)
    a = rng.standard_normal((70, 45)).astype(np.float32)
    b = rng.standard_normal((45, 90)).astype(np.float32)
    c = np.zeros((70, 90), np.float32)
    mod.matmul(a, b, c, grid=(-(-90 // bn), -(-70 // bm)), BM=bm, BN=bn)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_check_bounds_reports_signed_overflow_with_its_line() -> None:
    # i32/i64 overflow is undefined in C (and so in both backends); check_bounds finds it.
    src = ("@kernel tile[(1,)]\ndef k(a: i32, b: i64, y: mut i32[3], z: mut i64[1], u: mut u32[1]):\n"
           "    y[0] = a + 1\n    y[1] = -a\n    y[2] = a * 2 - 3\n    z[0] = b * 3\n    u[0] = u32(a) * 4000000000\n")
    mod = compile_cpu(src, check_bounds=True)
    y, z, u = np.zeros(3, np.int32), np.zeros(1, np.int64), np.zeros(1, np.uint32)
    mod.k(5, 7, y, z, u, grid=1)
    assert y.tolist() == [6, -5, 7] and z[0] == 21 and u[0] == (5 * 4000000000) % 2**32  # unsigned wraps
    for a, b, line, op in [(2**31 - 1, 0, 3, "+"), (-2**31, 0, 4, "-"), (2**30, 0, 5, "*"), (0, 2**62, 6, "*")]:
        with pytest.raises(tessera.LaunchError, match=rf"k:{line}: signed integer overflow in '\{op}'"):
            mod.k(a, b, y, z, u, grid=1)
    compile_cpu(src).k(2**31 - 1, 0, y, z, u, grid=1)  # without check_bounds: C's (undefined) result


def test_check_bounds_builds_compile_with_nvrtc() -> None:
    from tessera.base.errors import SourceFile
    from tessera.runtime.cuda.nvrtc import compile_cuda
    from tessera.transpile.driver import compile_source

    src = "@kernel tile[(32,)]\ndef k(a: i64, y: mut i64[n]):\n    y[tile_linear_id()] = -(a * 3 + y[0] - 1)\n"
    for arch in ("sm_80", "sm_90"):
        cuda = compile_source(SourceFile("k.tsr", src), options=CompileOptions(arch=arch, check_bounds=True)).cuda
        assert "tsr_checked_mul(" in cuda and "tsr_checked_neg(" in cuda
        assert compile_cuda(cuda, name="k.cu", arch=arch).warnings == ()


def test_an_index_is_computed_as_written() -> None:
    # The affine form of `(i - j) * 1000000 + 3` is i * 1000000 - j * 1000000 + 3; computing that
    # would overflow i32 where the program does not (a false overflow under check_bounds).
    mod = compile_cpu("@kernel tile[(1,)]\ndef k(i: i32, j: i32, x: f32[8], y: mut f32[1]):\n"
                      "    y[0] = x[(i - j) * 1000000 + 3]\n", check_bounds=True)
    y = np.zeros(1, np.float32)
    mod.k(5000, 5000, np.arange(8, dtype=np.float32), y, grid=1)
    assert y[0] == 3.0


def test_augmented_assignment_evaluates_the_index_first() -> None:
    # As in Python, `x[d[0]] += v` reads d[0] before v runs (C++ evaluates the right side of a
    # compound assignment first: the atomic made the store go to x[1]).
    mod = compile_cpu("@kernel tile[(1,)]\ndef k(x: mut f32[4], d: mut i32[1]):\n"
                      "    x[d[0]] += f32(atomic_add(d[0], 1)) + 5.0\n")
    x, d = np.zeros(4, np.float32), np.zeros(1, np.int32)
    mod.k(x, d, grid=1)
    assert x.tolist() == [5.0, 0.0, 0.0, 0.0] and d[0] == 1


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_many_libraries_keep_a_bounded_number_of_memory_mappings() -> None:
    """Each library pools its fiber stacks (two mappings per tile); the libraries not launched
    recently give theirs back, so that a process with many kernels stays under vm.max_map_count."""
    from tessera.runtime.host import library as cpu

    def mappings() -> int:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)

    counts = []
    for i in range(3 * cpu.KEEP_ARENAS):
        src = (f"@kernel tile[(512,)]\ndef k{i}(y: mut f32[n]):\n    t = global_linear_id()\n"
               f"    if t < n:\n        y[t] = {i}.0\n    tbarrier()\n")
        y = np.zeros(2048, np.float32)
        getattr(tessera.compile(src, backend="cpu"), f"k{i}")(y, grid=4)
        assert np.all(y == i)
        counts.append(mappings())
    # one 512-tile arena per worker is about 1026 mappings: without trimming, 12 libraries would
    # add more than 12 of them
    assert counts[-1] - counts[cpu.KEEP_ARENAS - 1] < 3 * 1030, counts


def test_a_launch_uses_the_array_now_in_the_bound_arguments() -> None:
    # Bound keeps each array's address from the argument check; whoever swaps an array in after
    # binding (the autotuner times on copies) must get the new one's address, not the old one's.
    k = tessera.compile("@kernel tile[(32,)]\ndef k(y: mut f32[n]):\n    y[tile_linear_id()] = 2.0\n",
                        backend="cpu").k
    y = np.zeros(32, np.float32)
    lib, info, bound = k.prepare((y,), {}, grid=1)
    copy = np.zeros(32, np.float32)
    bound.arrays["y"] = copy
    lib.launch(info, bound)
    assert (copy == 2).all() and (y == 0).all()
