"""Copies and the asynchronous pipeline (spec section 7): `tcopy`, `tcopy_async`, `tcommit`,
`twait`, `tpipeline`. Results on the CPU backend against NumPy for every stage count and shapes
that are not multiples of the tile; what NVRTC makes of the pipelined kernels (LDGSTS.128 where
shapes are divisible, no spills); alignment variants picked at launch; cp.async's semantics (a
copy lands only when a wait covers it), which the race detector checks."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.base.errors import LaunchError, SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.cuda.sass import disassemble, find_nvdisasm, function_sass
from tessera.transpile.driver import compile_source, load_source
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("shared_cache")

SGEMM = ROOT / "samples" / "sgemm_pipelined.tsr"
BLUR = ROOT / "samples" / "stencil_pipelined.tsr"


def _sgemm_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


@pytest.fixture(scope="module")
def sgemm_mod():
    return tessera.load(SGEMM, backend="cpu")


# ---- results on the CPU backend ---------------------------------------------------------------

@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", [(64, 48, 80), (70, 37, 45), (128, 8, 128), (5, 3, 7)])
def test_sgemm_matches_numpy_for_every_stage_count(sgemm_mod, stages: int, shape) -> None:
    m, k, n = shape
    rng = np.random.default_rng(m * k + n + stages)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    sgemm_mod.sgemm(a, b, c, BM=32, BN=32, BK=8, stages=stages, grid=((n + 31) // 32, (m + 31) // 32))
    np.testing.assert_allclose(c, _sgemm_ref(a, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tiles", [dict(BM=16, BN=16, BK=4), dict(BM=20, BN=24, BK=3), dict(BM=48, BN=16, BK=2)])
def test_sgemm_tile_sizes_that_do_not_divide_the_group(sgemm_mod, tiles) -> None:
    m, k, n = 50, 29, 61
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    sgemm_mod.sgemm(a, b, c, stages=3, **tiles,
                    grid=(-(-n // tiles["BN"]), -(-m // tiles["BM"])))
    np.testing.assert_allclose(c, _sgemm_ref(a, b), rtol=1e-4, atol=1e-4)


def test_sgemm_with_zero_trips(sgemm_mod) -> None:
    a = np.zeros((33, 0), np.float32)
    b = np.zeros((0, 17), np.float32)
    c = np.full((33, 17), 5.0, np.float32)
    sgemm_mod.sgemm(a, b, c, BM=32, BN=32, BK=8, stages=3, grid=(1, 2))
    assert (c == 0).all()


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_pipelined_stencil_matches_numpy(stages: int) -> None:
    mod = tessera.load(BLUR, backend="cpu")
    rng = np.random.default_rng(stages)
    x = rng.standard_normal((61, 77)).astype(np.float32)
    out = np.zeros((59, 75), np.float32)
    mod.blur3(x, out, stages=stages, grid=(3, 2))
    want = sum(x[i:i + 59, j:j + 75].astype(np.float64) for i in range(3) for j in range(3)) / 9.0
    np.testing.assert_allclose(out, want.astype(np.float32), rtol=1e-5, atol=1e-5)


# ---- alignment variants -----------------------------------------------------------------------

def test_the_aligned_variant_is_picked_when_the_arrays_allow(sgemm_mod) -> None:
    rng = np.random.default_rng(3)
    for (m, k, n), aligned in (((64, 32, 48), True), ((64, 30, 48), False)):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c = np.zeros((m, n), np.float32)
        sgemm_mod.sgemm(a, b, c, BM=32, BN=32, BK=8, stages=2, grid=(2, 2))
        np.testing.assert_allclose(c, _sgemm_ref(a, b), rtol=1e-4, atol=1e-4)
        picked = {key[2] for key in sgemm_mod._variants if key[0] == "sgemm"}
        assert aligned in picked
    # A misaligned view of an aligned array: the generic variant, still right.
    big = rng.standard_normal((64, 33)).astype(np.float32)
    a = big[:, 1:]
    assert a.ctypes.data % 16 != 0 or not a.flags.c_contiguous
    a = np.ascontiguousarray(a)
    offset = np.zeros(64 * 32 + 1, np.float32)[1:].reshape(64, 32)
    offset[:] = a
    assert offset.ctypes.data % 16 != 0
    b = rng.standard_normal((32, 48)).astype(np.float32)
    c = np.zeros((64, 48), np.float32)
    sgemm_mod.sgemm(offset, b, c, BM=32, BN=32, BK=8, stages=2, grid=(2, 2))
    np.testing.assert_allclose(c, _sgemm_ref(offset, b), rtol=1e-4, atol=1e-4)


def test_alignment_variants_are_visible_in_the_emitted_code() -> None:
    cuda = compile_source(load_source(str(SGEMM))).cuda
    assert "sgemm_BM128_BN128_BK8_stages3(" in cuda and "sgemm_BM128_BN128_BK8_stages3_a16(" in cuda
    assert "for 16-byte-aligned A, B, K % 16 == 0, N % 16 == 0" in cuda
    generic, aligned = cuda.split("sgemm_BM128_BN128_BK8_stages3_a16(")
    assert "tsr_copy_async<float, 1, 128, 8, 256, 16, true>" in generic  # tested once per copy
    assert "tsr_copy_async<float, 1, 128, 8, 256, 16, false>" in aligned  # proven


def test_cli_info_names_the_variants(tmp_path, capsys) -> None:
    from tessera.cli.compile import run

    assert run([str(SGEMM), "--info", "-o", str(tmp_path / "o.cu")]) == 0
    out = capsys.readouterr().out
    assert "registers" in out and "shared" in out and "31104" in out
    assert "generic (any alignment)" in out
    assert "aligned: A, B 16-byte aligned; K, N multiples of 16" in out


# ---- what NVRTC makes of it ---------------------------------------------------------------------

def _kernel_sass(cuda: str, arch: str, c_name: str) -> str:
    nv = compile_cuda(cuda, name="t.cu", arch=arch)
    assert nv.cubin is not None
    return function_sass(disassemble(nv.cubin), c_name)


@pytest.mark.skipif(find_nvdisasm() is None, reason="nvdisasm not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_pipelined_sgemm_uses_128_bit_ldgsts_when_shapes_divide(arch: str) -> None:
    result = compile_source(load_source(str(SGEMM)), options=CompileOptions(arch=arch))
    aligned = next(k.c_name for k in result.kernels if k.aligned)
    sass = _kernel_sass(result.cuda, arch, aligned)
    assert "LDGSTS.E.BYPASS.128" in sass
    assert "LDGDEPBAR" in sass and "DEPBAR" in sass  # commit and wait_group
    assert "LDGSTS.E " not in sass.replace("LDGSTS.E.BYPASS.128", "")  # no narrow fallback in the aligned variant


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("consts", [dict(), dict(BM=64, BN=64, BK=16, stages=4), dict(BM=32, BN=64, BK=4, stages=2),
                                    dict(BM=128, BN=128, BK=16, stages=2), dict(stages=1)])
def test_no_spills_in_any_sgemm_variant(arch: str, consts) -> None:
    result = compile_source(load_source(str(SGEMM)), options=CompileOptions(arch=arch), variants={"sgemm": consts})
    nv = compile_cuda(result.cuda, name="sgemm.cu", arch=arch)
    assert nv.warnings == ()
    for k in result.kernels:
        res = nv.kernel(k.c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0, (k.c_name, res)


def test_below_sm80_async_copies_are_synchronous() -> None:
    result = compile_source(load_source(str(SGEMM)), options=CompileOptions(arch="sm_75"))
    assert "tsr_copy_async<" not in result.cuda and "tsr_cp_async_commit();" not in result.cuda
    assert "the copies are synchronous on sm_75" in result.cuda
    nv = compile_cuda(result.cuda, name="sgemm.cu", arch="sm_75")
    assert "cp.async" not in nv.ptx


# ---- cp.async semantics on the CPU backend --------------------------------------------------------

STALE = """\
@kernel tile[(64,)]
def k(x: f32[n], y: mut f32[n]):
    s = tshared.alloc(f32[64])
    s[tile_id(0)] = -1.0
    tbarrier()
    tcopy_async(s, x[0:64])
    tcommit()
    tbarrier()
    y[tile_id(0)] = s[tile_id(0)]
"""


def test_a_read_before_the_wait_sees_the_old_contents() -> None:
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    tessera.compile(STALE, backend="cpu").k(x, y, grid=1)
    assert (y == -1.0).all()  # the copy has not landed: no twait
    fixed = tessera.compile(STALE.replace("    tcommit()\n    tbarrier()\n", "    tcommit()\n    twait(0)\n"),
                            backend="cpu")
    fixed.k(x, y, grid=1)
    assert (y == x).all()


def test_the_race_detector_reports_a_read_before_the_wait_with_both_lines() -> None:
    mod = tessera.compile(STALE, backend="cpu", check_bounds=True, path="stale.tsr")
    with pytest.raises(LaunchError) as e:
        mod.k(np.zeros(64, np.float32), np.zeros(64, np.float32), grid=1)
    text = str(e.value)
    assert "line 9" in text and "line 6" in text and "tcopy_async" in text


def test_twait_leaves_the_newest_groups_pending() -> None:
    src = """\
@kernel tile[(32,)]
def k(x: f32[n], y: mut f32[n]):
    a = tshared.alloc(f32[32])
    b = tshared.alloc(f32[32])
    a[tile_id(0)] = 0.0
    b[tile_id(0)] = 0.0
    tbarrier()
    tcopy_async(a, x[0:32])
    tcommit()
    tcopy_async(b, x[32:64])
    tcommit()
    twait(1)
    y[tile_id(0)] = a[tile_id(0)]
    y[32 + tile_id(0)] = b[tile_id(0)]
"""
    x = np.arange(64, dtype=np.float32) + 1
    y = np.zeros(64, np.float32)
    tessera.compile(src, backend="cpu").k(x, y, grid=1)
    assert (y[:32] == x[:32]).all() and (y[32:] == 0).all()


def test_async_copies_zero_fill_outside_the_tensor() -> None:
    src = """\
@kernel tile[(16,)]
def k(x: f32[n], y: mut f32[m]):
    s = tshared.alloc(f32[64])
    tcopy_async(s, x[0:64])
    tcommit()
    twait()
    for i in range(tile_id(0), 64, 16):
        y[i] = s[i]
"""
    for n in (13, 16, 64):
        x = np.arange(1, n + 1, dtype=np.float32)
        y = np.full(64, np.nan, np.float32)
        tessera.compile(src, backend="cpu").k(x, y, grid=1)
        assert (y[:n] == x).all() and (y[n:] == 0).all()


def test_a_column_view_is_copied_by_its_stride() -> None:
    src = """\
@kernel tile[(32,)]
def k(A: f32[M, K], out: mut f32[40], c: i32):
    s = tshared.alloc(f32[40])
    tcopy(s, A[0:40, c])
    tbarrier()
    for i in range(tile_id(0), 40, 32):
        out[i] = s[i]
"""
    a = np.arange(37 * 5, dtype=np.float32).reshape(37, 5) + 1
    out = np.full(40, np.nan, np.float32)
    tessera.compile(src, backend="cpu", check_bounds=True).k(a, out, 3, grid=1)
    assert (out[:37] == a[:, 3]).all() and (out[37:] == 0).all()


def test_tpipeline_source_text_errors_are_located() -> None:
    with pytest.raises(tessera.CompileError) as e:
        compile_source(SourceFile("t.tsr", "@kernel tile[(32,)]\ndef k(x: f32[n]):\n"
                                  "    for i in tpipeline(0, n, 32, stages=2):\n        tbarrier()\n"))
    assert "t.tsr:3:5: error: a tpipeline loop starts with the tcopy_async statements it pipelines" in e.value.text
