"""Region mode's row-kernel forms (the layer norm of bench/cpu_streaming.py): a tree's `if t < h`
region over the first h tiles (transpile/cpu/tile_bounds.py), the mean and rstd read from shared
memory kept once for the group (cpu/quiet.py, region_plan.py's uniform locals), the group's arrays
behind one thread-local address (cpu/group_memory.py). Each gives the same bytes in region and
fiber mode and what NumPy computes; the object code calls `__tls_get_addr` once."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tessera.base.options import CompileOptions
from tessera.runtime.host.build import find_cxx, kernel_command, stub_headers
from tessera.runtime.host.library import unit_source
from tessera.transpile.driver import SourceFile, compile_source
from tests.transpile.cpu.test_cpu_region_loops import MATMUL16, both_modes
from tests.transpile.cpu.test_cpu_vectorize import LAYERNORM, _is_gcc, vectorized_tsr_lines

pytestmark = pytest.mark.usefixtures("shared_cache")
f32 = np.float32


def cpu_c(src: str, restrict: bool = True) -> str:
    return compile_source(SourceFile(path="k.tsr", text=src),
                          options=CompileOptions(cpu_regions=True, restrict=restrict)).cuda


def test_a_trees_region_runs_over_the_tiles_below_h() -> None:
    c = cpu_c(LAYERNORM)
    assert "if (t < h)" not in c
    assert len(re.findall(r"for \(unsigned tsr_x = 0; tsr_x < tsr_n\d+; \+\+tsr_x\) \{", c)) == 2
    assert re.search(r"const int tsr_u\d+ = h;  // line 14", c)


def test_the_rows_mean_and_rstd_are_kept_once() -> None:
    c = cpu_c(LAYERNORM)
    assert "float mean{};  // once per group" in c and "float inv{};  // once per group" in c
    assert re.search(r"\{  // the group's own locals, once\n.*\n *inv = rsqrtf\(tsr_gm->tsr_shm_sh\[0\] / \(float\)C \+ eps\);", c)


def test_the_groups_arrays_have_one_thread_local_address() -> None:
    c = cpu_c(LAYERNORM)
    body = c.split("region mode (CPU backend)")[1]
    assert "static thread_local struct {" in c and "__shared__" not in body and "tsr_rgp_" not in body
    assert "tsr_gm->tsr_shm_sh[t] += tsr_gm->tsr_shm_sh[t + h];" in body
    assert "auto& s = tsr_gm->tsr_rgs_s[tsr_t];" in body
    assert 'asm("" : "+r"(tsr_gm));' in c
    assert 'asm("" : "+r"(tsr_gm));' not in cpu_c(LAYERNORM, restrict=False)  # GCC must see what it points to


@pytest.mark.skipif(shutil.which("objdump") is None or not _is_gcc(), reason="reads GCC's object code with objdump")
def test_the_object_code_finds_the_thread_local_arrays_once(tmp_path: Path) -> None:
    unit = tmp_path / "unit.cpp"
    unit.write_text(unit_source(cpu_c(LAYERNORM), compile_source(
        SourceFile(path="k.tsr", text=LAYERNORM), options=CompileOptions(cpu_regions=True)).kernels))
    cmd = kernel_command(find_cxx(), unit, tmp_path / "unit.o", stub_headers(tmp_path / "stubs"), ())
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    relocs = subprocess.run(["objdump", "-dr", str(tmp_path / "unit.o")], capture_output=True, text=True).stdout
    # each function once (the kernel's clones, TSR_VECTOR_CLONES in the prelude, are two functions)
    per_function = re.split(r"\n[0-9a-f]+ <[^>]+>:\n", relocs)
    assert max(body.count("__tls_get_addr") for body in per_function) <= 1  # was 19: a call at each access
    assert "__tls_get_addr" in relocs


def test_a_stride_loop_from_the_tiles_index_tests_tile_0s_start_only() -> None:
    """`range(t, C, 128)`: tile t's counter starts at tile 0's + t, so the lockstep passes need a
    test of tile 0's start (that the last tile's does not overflow), not of every tile's."""
    c = cpu_c(LAYERNORM)
    assert c.count("<= tsr_int_limits<int>::hi - 127;  // tile t starts at tile 0's start + t") == 3
    assert "tsr_i < 128u" not in c
    other = LAYERNORM.replace("range(t, C, 128)", "range(C - 1 - t, -1, -128)")
    assert "tile 0's start + t" not in cpu_c(other)


@pytest.mark.skipif(not _is_gcc(), reason="reads GCC's vectorization report")
def test_a_dot_product_over_shared_tiles_still_vectorizes(tmp_path: Path) -> None:
    """The interchanged dot product reads two shared arrays and updates a per-tile local, all
    members of the group's struct: GCC vectorizes it only where each access names its member
    through the struct's pointer (a reference bound to a member once hid which member it was)."""
    assert 18 in vectorized_tsr_lines(MATMUL16, tmp_path)  # acc += As[ty, kk] * Bs[kk, tx]


@pytest.mark.parametrize("cols", [1, 5, 64, 127, 128, 129, 300, 1024])
def test_layer_norm_rows(cols: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows shorter than the group, not a multiple of it, and long: region and fiber mode agree
    bytewise, and with NumPy within rounding (NumPy sums in another order)."""
    def make() -> dict[str, np.ndarray]:
        x = np.random.default_rng(cols).standard_normal((3, cols)).astype(f32) * 3 + 1
        return {"x": x, "y": np.zeros_like(x)}

    got = both_modes(LAYERNORM, "layernorm", lambda k, d: k(d["x"], d["y"], 1e-5, grid=3), make, monkeypatch)
    x = make()["x"].astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    want = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    assert np.allclose(got["y"], want, rtol=1e-4, atol=1e-4)


GUARDS = """
@kernel tile[(TILES,)]
def guards(x: f32[n], y: mut f32[n], u: i32, w: i64):
    sh = tshared.alloc(f32[TILES])
    t = tile_linear_id()
    t64 = i64(t)
    sh[t] = x[group_id(0) * TILES + t]
    tbarrier()
    if t < u: sh[t] += 1.0
    tbarrier()
    if u - 2 > t: sh[t] *= 2.0
    tbarrier()
    if t64 < w: sh[t] -= 3.0
    tbarrier()
    if t <= u: sh[t] += 0.5
    tbarrier()
    if tile_linear_id() < u + 1: sh[t] += 0.25
    tbarrier()
    y[group_id(0) * TILES + t] = sh[t]
"""


@pytest.mark.parametrize("tiles", [1, 7, 32])
@pytest.mark.parametrize("u,w", [(-3, -1), (0, 0), (3, 2), (7, 40), (1 << 30, (1 << 40) + 5), (-(1 << 30), -(1 << 40))])
def test_guarded_regions_with_bounds_outside_the_group(tiles: int, u: int, w: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    src = GUARDS.replace("TILES", str(tiles))
    assert len(re.findall(r"a prefix of the group", cpu_c(src))) == 4  # not `t <= u`

    def make() -> dict[str, np.ndarray]:
        return {"x": np.arange(2 * tiles, dtype=f32), "y": np.zeros(2 * tiles, f32)}

    got = both_modes(src, "guards", lambda k, d: k(d["x"], d["y"], u, w, grid=2), make, monkeypatch)
    t = np.arange(2 * tiles) % tiles
    v = make()["x"]
    v = np.where(t < u, v + f32(1), v)
    v = np.where(u - 2 > t, v * f32(2), v)
    v = np.where(t < w, v - f32(3), v)
    v = np.where(t <= u, v + f32(0.5), v)
    v = np.where(t < u + 1, v + f32(0.25), v)
    assert got["y"].tobytes() == v.tobytes()


QUIET = """
@kernel tile[(8,)]
def quiet(x: f32[n], y: mut f32[n], z: mut f32[n]):
    sh = tshared.alloc(f32[9])
    t = tile_linear_id()
    g = global_linear_id()
    sh[t] = x[g]
    if t == 0: sh[8] = x[0]
    tbarrier()
    m = sh[8] * 2.0
    tbarrier()
    z[g] = m
    k = x[1] + m
    tbarrier()
    sh[t] = m
    q = sh[8] + 1.0
    tbarrier()
    y[g] = m + k + q + sh[t]
"""


def test_a_local_read_where_the_stretch_writes_memory_stays_per_tile(monkeypatch: pytest.MonkeyPatch) -> None:
    """`m` reads shared memory that no statement between its barriers writes: once for the group.
    `k` reads global memory where `z[g] = m` writes global memory, and `q` shared memory where
    `sh[t] = m` writes it: both per tile (quiet.py does not tell the elements apart)."""
    c = cpu_c(QUIET)
    assert "float m{};  // once per group" in c
    assert "float tsr_rgs_k[8];" in c and "float tsr_rgs_q[8];" in c

    def make() -> dict[str, np.ndarray]:
        return {"x": np.arange(16, dtype=f32) / 4, "y": np.zeros(16, f32), "z": np.zeros(16, f32)}

    got = both_modes(QUIET, "quiet", lambda k, d: k(d["x"], d["y"], d["z"], grid=2), make, monkeypatch)
    x = make()["x"]
    m = np.repeat(x[[0, 0]] * f32(2), 8)
    q = np.repeat(x[[0, 0]], 8) + f32(1)
    assert got["y"].tobytes() == (m + (x[1] + m) + q + m).astype(f32).tobytes()


LEAD = """
@kernel tile[(8,)]
def lead(x: f32[n], y: mut f32[n], a: i32):
    sh = tshared.alloc(f32[8])
    t = tile_linear_id()
    g = global_linear_id()
    m = 0.0
    u = 0.0
    sh[t] = x[g]
    tbarrier()
    m = sh[a % 8] + 1.0
    acc = m * f32(t)
    u = sh[0]
    r = u * f32(t)
    u = u + 1.0
    r2 = u + r + acc
    tbarrier()
    y[g] = r2 + u + m
"""


def test_an_assignment_that_leads_its_region_runs_once_before_the_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """`m` reads shared memory no tile writes before the next barrier, and no statement of the
    region before it touches `m` or what it reads: assigned once, before the tile loop
    (group_locals.split). `u` is read (`r = u * f32(t)`) before its second assignment, which
    neither leads nor ends the region: `u` stays per tile."""
    c = cpu_c(LEAD)
    assert re.search(r"\{  // the group's own locals, once, before the tiles\n.*\n *m = tsr_gm->tsr_shm_sh\[a % 8\] \+ 1\.0f;", c)
    assert "float m{};  // once per group" in c and "float tsr_rgs_u[8];" in c

    def make() -> dict[str, np.ndarray]:
        return {"x": np.arange(16, dtype=f32) * f32(0.5), "y": np.zeros(16, f32)}

    for a in (0, 3, 13):
        monkeypatch.setenv("TESSERA_CPU_REGIONS", "1")  # both_modes ends in fiber mode
        got = both_modes(LEAD, "lead", lambda k, d, a=a: k(d["x"], d["y"], a, grid=2), make, monkeypatch)
        x, t = make()["x"], np.arange(16) % 8
        base = (np.arange(16) // 8) * 8
        m = x[base + a % 8] + f32(1)
        u0 = x[base]
        r2 = (u0 + f32(1)) + u0 * t.astype(f32) + m * t.astype(f32)
        assert got["y"].tobytes() == (r2 + (u0 + f32(1)) + m).astype(f32).tobytes()


AFTER = """
@kernel tile[(8,)]
def after(x: f32[n], y: mut f32[n]):
    sh = tshared.alloc(f32[8])
    t = tile_linear_id()
    g = global_linear_id()
    u = 0.0
    sh[t] = x[g]
    tbarrier()
    acc = u * f32(t)
    u = sh[0]
    w = u * 2.0
    acc += w
    tbarrier()
    y[g] = acc + u
"""


def test_an_assignment_after_one_that_cannot_lead_stays_in_the_tile_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """`w = u * 2.0` reads `u`, which the tile loop assigns (`u = sh[0]` cannot lead: `acc = u * f32(t)`
    reads the old `u` before it): `w` is computed in the loop, after `u`, not before it."""
    c = cpu_c(AFTER)
    assert "once, before the tiles" not in c and "float tsr_rgs_w[8];" not in c  # w: used in one region

    def make() -> dict[str, np.ndarray]:
        return {"x": np.arange(16, dtype=f32) + f32(1), "y": np.zeros(16, f32)}

    got = both_modes(AFTER, "after", lambda k, d: k(d["x"], d["y"], grid=2), make, monkeypatch)
    u = np.repeat(make()["x"][[0, 8]], 8)
    assert got["y"].tobytes() == (u * f32(2) + u).astype(f32).tobytes()


NAMES = """
@kernel tile[(4, 2)]
def names(a: f32[n], b: mut f32[n]):
    x = tshared.alloc(f32[8])
    w = tshared.alloc(f32[2, 4])
    t = tile_linear_id()
    g0 = group_id(0) * 8
    tcopy(x, a[g0:g0 + 8])
    w[tile_id(1), tile_id(0)] = a[g0 + t] * 2.0
    tbarrier()
    b[g0 + t] = x[7 - t] + w[1 - tile_id(1), tile_id(0)] + f32(tile_id(0))
"""


def test_shared_arrays_named_like_members(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shared arrays named `x` and `w` (members of CUDA's index and vector types: `threadIdx.x`)
    in the group's struct, one filled by a copy that takes its address."""
    def make() -> dict[str, np.ndarray]:
        return {"a": np.arange(16, dtype=f32), "b": np.zeros(16, f32)}

    got = both_modes(NAMES, "names", lambda k, d: k(d["a"], d["b"], grid=2), make, monkeypatch)
    a, t = make()["a"], np.arange(16) % 8
    base = np.arange(16) // 8 * 8
    want = a[base + 7 - t] + a[base + (t + 4) % 8] * f32(2) + (t % 4).astype(f32)
    assert got["b"].tobytes() == want.astype(f32).tobytes()
