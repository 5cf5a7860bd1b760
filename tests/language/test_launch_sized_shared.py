"""Launch-sized shared memory (spec section 7): a dimension of `tshared.alloc(T[...])` may be an
integer scalar parameter. Such arrays follow the constant ones in dynamic shared memory, their
size is computed at launch and checked against the device's limit (a LaunchError naming the
array and both sizes), never silently truncated."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.base.errors import CompileError, LaunchError, SourceFile
from tessera.base.kernel_info import kernels_from_json, kernels_to_json
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source

SOURCE = """
@kernel tile[(128,)]
def stage(x: f32[n], out: mut f32[n], nbuf: i32, rows: i32):
    buf = tshared.alloc(f32[nbuf])
    c = tshared.alloc(i32[4])
    table = tshared.alloc(f32[rows, 33], pad=1)
    t = tile_linear_id()
    base = group_linear_id() * nbuf
    for i in range(t, nbuf, 128):
        buf[i] = x[base + i] if base + i < n else 0.0
    if t < 4:
        c[t] = t
    for i in range(t, rows * 33, 128):
        table[i // 33, i % 33] = f32(i)
    tbarrier()
    for i in range(t, nbuf, 128):
        if base + i < n:
            out[base + i] = buf[nbuf - 1 - i] + f32(c[i % 4]) + table[i % rows, i % 33]
"""


def _reference(x: np.ndarray, nbuf: int, rows: int) -> np.ndarray:
    n = len(x)
    out = np.zeros(n, np.float32)
    for b in range(-(-n // nbuf)):
        for i in range(min(nbuf, n - b * nbuf)):
            src = b * nbuf + nbuf - 1 - i
            out[b * nbuf + i] = (x[src] if src < n else 0.0) + i % 4 + (i % rows) * 33 + i % 33
    return out


@pytest.fixture(scope="module")
def mod():
    return tessera.compile(SOURCE, backend="cpu")


@pytest.mark.parametrize(("n", "nbuf", "rows"), [(1000, 300, 7), (129, 129, 1), (5000, 4099, 3)])
def test_arrays_sized_at_launch_match_numpy(mod, n: int, nbuf: int, rows: int) -> None:
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    mod.stage(x, out, nbuf, rows, grid=-(-n // nbuf))
    np.testing.assert_allclose(out, _reference(x, nbuf, rows), rtol=1e-6)


def test_the_race_detector_and_bounds_checks_see_them() -> None:
    checked = tessera.compile(SOURCE, backend="cpu", check_bounds=True)
    x = np.ones(600, np.float32)
    out = np.zeros(600, np.float32)
    checked.stage(x, out, 300, 5, grid=2)
    np.testing.assert_allclose(out, _reference(x, 300, 5))
    over = tessera.compile("@kernel tile[(32,)]\ndef k(out: mut f32[n], m: i32):\n    s = tshared.alloc(f32[m])\n"
                           "    s[tile_linear_id() + m - 8] = 1.0\n    out[0] = 0.0\n", backend="cpu", check_bounds=True)
    with pytest.raises(LaunchError, match="index .* out of range|out of bounds"):
        over.k(np.zeros(1, np.float32), 16, grid=1)


def test_sizes_are_checked_at_launch(mod) -> None:
    x = np.zeros(10, np.float32)
    with pytest.raises(LaunchError, match=r"parameter 'nbuf' = 0 sizes the shared array 'buf'; it must be at least 1"):
        mod.stage(x, np.zeros(10, np.float32), 0, 1, grid=1)
    with pytest.raises(LaunchError, match=r"^stage\(\): the group needs 400976 bytes of shared memory \(16 for the "
                       r"constant arrays, the rest for 'buf' \[nbuf = 100000\], 'table' \[rows = 7, 33\]\), over the "
                       r"232448 bytes"):
        mod.stage(x, np.zeros(10, np.float32), 100000, 7, grid=1)


def test_the_emitted_code_places_them_after_the_constant_arrays() -> None:
    result = compile_source(SourceFile("s.tsr", SOURCE))
    cuda = result.cuda
    assert "unsigned long long tsr_smem_end = 16;" in cuda
    assert "float* buf = reinterpret_cast<float*>(tsr_dynamic_smem + tsr_smem_end);  // sized at launch" in cuda
    assert "tsr_smem_end += ((unsigned long long)rows * (unsigned long long)(33 + 1) * 4 + 15) / 16 * 16;" in cuda
    assert "table[i / 33 * (33 + 1) + i % 33]" in cuda
    (info,) = result.kernels
    assert info.dynamic_smem == 16 and info.smem_sized == (("buf", 4, ("nbuf",), 0), ("table", 4, ("rows", 33), 1))
    assert kernels_from_json(kernels_to_json(result.kernels)) == result.kernels
    assert "shared buf, table sized at launch" in cuda


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_them_without_warnings(arch: str) -> None:
    nv = compile_cuda(compile_source(SourceFile("s.tsr", SOURCE), options=CompileOptions(arch=arch)).cuda, name="s.cu", arch=arch)
    assert nv.warnings == ()
    res = nv.kernel("stage")
    assert res.spill_stores == 0 and res.shared_bytes == 0  # all of it dynamic


def test_copies_need_constant_shapes() -> None:
    src = ("@kernel tile[(128,)]\ndef k(x: f32[n], m: i32):\n    s = tshared.alloc(f32[m])\n"
           "    tcopy(s, x[0:128])\n")
    with pytest.raises(CompileError, match="tcopy\\(\\) needs shared arrays of constant shape; 's' is sized at launch by 'm'"):
        compile_source(SourceFile("k.tsr", src))


@pytest.mark.gpu
def test_on_the_device() -> None:
    gpu = tessera.compile(SOURCE, backend="cuda")
    x = np.random.default_rng(1).standard_normal(20000).astype(np.float32)
    out = np.zeros_like(x)
    gpu.stage(x, out, 12000, 9, grid=2)  # 48000 + bytes: above the static limit, opted in at launch
    np.testing.assert_allclose(out, _reference(x, 12000, 9), rtol=1e-6)


# ---- passed to device functions (they take shared arrays, spec section 6) ---------------------------

PASSED = """
@device
def fill(s: mut f32[r, c], x: f32[n], base: i32, t: i32):
    for i in range(t, r * c, 64):
        s[i // c, i % c] = x[base + i] if base + i < n else 0.0

@device
def row_sum(s: f32[r, c], row: i32) -> f32:
    acc = 0.0
    for j in range(c):
        acc += s[row, j]
    return acc

@kernel tile[(64,)]
def rows(x: f32[n], out: mut f32[n], nrows: i32, ncols: i32):
    tab = tshared.alloc(f32[nrows, ncols], pad=1)
    t = tile_linear_id()
    base = group_linear_id() * nrows * ncols
    fill(tab, x, base, t)
    tbarrier()
    for r in range(t, nrows, 64):
        if base + r < n:
            out[base + r] = row_sum(tab, r)
"""


def _row_sums(x: np.ndarray, nrows: int, ncols: int, groups: int) -> np.ndarray:
    padded = np.zeros(groups * nrows * ncols, np.float32)
    padded[:len(x)] = x
    sums = padded.reshape(groups, nrows, ncols).sum(axis=2)
    out = np.zeros(len(x), np.float32)
    for g in range(groups):
        for r in range(nrows):
            if g * nrows * ncols + r < len(x):
                out[g * nrows * ncols + r] = sums[g, r]
    return out


@pytest.mark.parametrize("check_bounds", [False, True])
@pytest.mark.parametrize(("n", "nrows", "ncols"), [(1000, 7, 13), (77, 70, 1), (300, 3, 100)])
def test_a_launch_sized_array_passed_to_device_functions(check_bounds: bool, n: int, nrows: int, ncols: int) -> None:
    # A launch-sized shared array was refused as an argument ("'tab' is sized at launch and cannot be
    # passed to a device function"): it is passed as its pointer and its padded row length.
    mod = tessera.compile(PASSED, backend="cpu", check_bounds=check_bounds)
    x = np.random.default_rng(n).integers(-8, 9, n).astype(np.float32)
    out = np.zeros(n, np.float32)
    groups = -(-n // (nrows * ncols))
    mod.rows(x, out, nrows, ncols, grid=groups)
    np.testing.assert_array_equal(out, _row_sums(x, nrows, ncols, groups))


def test_the_race_detector_sees_a_launch_sized_array_through_a_device_function() -> None:
    racy = tessera.compile(PASSED.replace("    tbarrier()\n", ""), backend="cpu", check_bounds=True, path="racy.tsr")
    x = np.ones(200, np.float32)
    with pytest.raises(LaunchError, match=r"data race: tile \d+ reads it at line 11 and tile \d+ writes it at line 5"):
        racy.rows(x, np.zeros(200, np.float32), 10, 20, grid=1)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_passing_them_compiles_with_nvrtc(arch: str) -> None:
    cuda = compile_source(SourceFile("p.tsr", PASSED), options=CompileOptions(arch=arch)).cuda
    assert "fill(tab, (ncols + 1), x, base, t, nrows, ncols, n)" in cuda
    nv = compile_cuda(cuda, name="p.cu", arch=arch)
    assert nv.warnings == ()
    assert nv.kernel("rows").spill_stores == 0


PADDED_ONLY = """
@kernel tile[(32,)]
def k(X: f32[m, n], Y: mut f32[m, n], rows: i32):
    e = tshared.alloc(f32[rows, 20], pad=1)
    t = tile_id(0)
    if t < rows:
        e[t, 3] = X[t, 3]
    tbarrier()
    Y[t, 0] = e[t % rows, 3]
"""


def test_check_bounds_builds_a_padded_array_with_no_other_signed_arithmetic() -> None:
    # Indexing a padded launch-sized array adds the padding to its rows with an overflow check; a
    # body with no signed + - * of its own left that check's definition out of the C
    # (tsr_checked_add was not declared).
    mod = tessera.compile(PADDED_ONLY, backend="cpu", check_bounds=True, path="padded.tsr")
    x = np.arange(32 * 20, dtype=np.float32).reshape(32, 20)
    for rows in (1, 5, 32):
        y = np.zeros_like(x)
        mod.k[1](x, y, rows)
        np.testing.assert_array_equal(y[:, 0], x[np.arange(32) % rows, 3])
