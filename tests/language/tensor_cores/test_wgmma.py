"""Warpgroup MMA on sm_90a (spec section 16): which kernels use it, the accumulator layout and the
swizzled copies checked lane by lane against the independent model of the PTX ISA (ptx_wgmma.py),
planted errors in the emulation, the descriptors and the copies that must show as wrong registers,
results equal to NumPy's and bit for bit to sm_80's on the CPU backend, and HGMMA in the machine
code of the samples (NVRTC and nvdisasm, where installed)."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import tessera
from samples.case import bf16_bits, bf16_values
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.cuda.sass import disassemble, find_nvdisasm, function_sass
from tessera.runtime.host import library as cpu
from tessera.transpile.driver import compile_source, load_source
from tessera.transpile.emit.template import template_text
from tessera.transpile.lir.frag_buffers import fragment_info
from tessera.transpile.lir.frag_layout import FragLayout, wgmma_division
from tessera.transpile.lir.swizzle import matrix_of
from tests.conftest import ROOT
from tests.language.tensor_cores import ptx_wgmma as P

ARCH = "sm_90a"


def _model_position(m: int, warps: int, warp: int, lane: int, e: int, n: int) -> tuple[int, int]:
    """Element e of a lane's array: block i (64 rows of its warpgroup), register d_{e mod N/2}."""
    per_block = n // 2
    i, reg = divmod(e, per_block)
    rows_per_group = m // (warps // 4)
    row, col = P.accumulator(warp % 4, lane, reg)
    return (warp // 4) * rows_per_group + 64 * i + row, col


@pytest.mark.parametrize("m,n,warps", [(64, 64, 4), (128, 32, 4), (128, 128, 8), (256, 16, 8), (192, 24, 4)])
def test_the_wgmma_layout_is_the_ptx_isas(m: int, n: int, warps: int) -> None:
    lay = wgmma_division(m, n, warps)
    assert lay is not None and lay.wgmma
    seen = set()
    for w in range(warps):
        for lane in range(32):
            for e in range(lay.per_lane):
                pos = lay.position(w, lane, e)
                assert pos == _model_position(m, warps, w, lane, e, n)
                seen.add(pos)
            for q in range(lay.slots):  # a row vector's slot: the rows of the lane's elements
                assert lay.slot_position(w, lane, q) == lay.position(w, lane, (q >> 1) * 4 * lay.tiles_n + (q & 1) * 2)[0]
    assert len(seen) == m * n
    # the mma.sync division of the same fragment differs wherever a warp owns more than one m16 tile
    if lay.tiles_m > 1:
        sync = FragLayout(m, n, warps, 1)
        assert any(sync.position(0, 0, e) != lay.position(0, 0, e) for e in range(lay.per_lane))


def test_no_division_for_partial_warpgroups() -> None:
    assert wgmma_division(64, 64, 2) is None
    assert wgmma_division(96, 64, 4) is None  # not a multiple of 64 rows
    assert wgmma_division(128, 64, 8) is not None  # 2 warpgroups of 64 rows
    assert wgmma_division(64, 64, 8) is None


# ---- the copies' swizzled addresses (templates/tessera_copy.cuh) against the model --------------

def test_the_copy_templates_swizzled_offsets_follow_the_ptx_atoms(tmp_path) -> None:
    text = template_text("tessera_copy.cuh")
    struct = re.search(r"template <int MODE, unsigned ROWS, unsigned E>\nstruct tsr_swizzled \{.*?\n\};", text, re.S)
    assert struct is not None
    shapes = [(64, 32, 2), (32, 128, 2), (64, 64, 2), (128, 16, 2), (64, 64, 1), (16, 512, 1)]
    lines = ["#include <cstdio>", "#define __device__", "#define __forceinline__ inline", struct.group(0), "int main() {"]
    for k, (r, c, e) in enumerate(shapes):
        m = matrix_of(r, c, e)
        assert m is not None
        lines.append(f"  for (unsigned j = 0; j < {r}u; ++j) for (unsigned k = 0; k < {c}u; ++k) "
                     f"std::printf(\"{k} %u %u %u\\n\", j, k, tsr_swizzled<{m.mode}, {r}, {e}>::at(0, j, k, 0, 0, 0));")
    lines += ["  return 0;", "}"]
    (tmp_path / "t.cpp").write_text("\n".join(lines))
    subprocess.run(["c++", "-std=c++17", "-o", str(tmp_path / "t"), str(tmp_path / "t.cpp")], check=True)
    out = subprocess.run([str(tmp_path / "t")], check=True, capture_output=True, text=True).stdout.split("\n")
    for line in filter(None, out):
        k, j, col, off = map(int, line.split())
        r, c, e = shapes[k]
        m = matrix_of(r, c, e)
        assert m is not None
        assert off * e == P.swizzled_byte(r, m.mode, e, j, col), (shapes[k], j, col)


# ---- the emulation's registers lane by lane ----------------------------------------------------

LANES = """
@kernel tile[(128,)]
def lanes(A: f16[128, 32], B: f16[32, 64], Bt: f16[64, 32], C: mut f32[128, 64], D: mut f32[8192]):
    As = tshared.alloc(f16[128, 32])
    Bs = tshared.alloc(f16[32, 64])
    acc = tfrag(f32[128, 64], 0.0)
    tcopy(As, A[0:128, 0:32])
    tcopy(Bs, B[0:32, 0:64])
    tbarrier()
    tmma(acc, As, Bs)
    tstore(C[0:128, 0:64], acc)
"""

# (what the clean C says, what the planted C says instead)
PLANTS = {
    "descriptor-swizzle": ("a ^= ((a >> 7) & (mode / 16 - 1)) << 4;", "a ^= 0;"),
    "copy-swizzle": ("o ^= ((o >> 7) & (MODE / 16 - 1)) << 4;", "o ^= ((o >> 7) & 1) << 4;"),
    "a-block-row": ("(tsr_wg_row + tsr_i * 64) * 64", "(tsr_wg_row + tsr_i * 16) * 64"),
    "stride-byte-offset": (", 16u, 512u, 2u)", ", 16u, 1024u, 2u)"),
    "accumulator-rows": ("const unsigned row = row0 + g + 8 * h,", "const unsigned row = row0 + g + 4 * h,"),
}


def _lane_dump(monkeypatch: pytest.MonkeyPatch, plant: tuple[str, str] | None, a, b) -> np.ndarray:
    real = cpu.build_library

    def dumped(cuda: str, kernels):  # type: ignore[no-untyped-def]
        assert "tsr_wgmma_f16_n64_ss_mn(" in cuda
        cuda, n = re.subn(r"if \([^\n]*\) tsr_p\[[^\n]*\] = acc\[tsr_e\];", "D[tsr_tid * 64 + tsr_e] = acc[tsr_e];", cuda)
        assert n == 1
        if plant is not None:
            assert plant[0] in cuda, plant
            cuda = cuda.replace(plant[0], plant[1])
        return real(cuda, kernels)

    monkeypatch.setattr(cpu, "build_library", dumped)
    d = np.zeros(8192, np.float32)
    tag = f"# dump {plant}\n"
    mod = tessera.compile(tag + LANES, backend="cpu", path="wg_lanes.tsr", arch=ARCH)
    mod.lanes(a, b, np.zeros((64, 32), np.float16), np.zeros((128, 64), np.float32), d, grid=1)
    return d.reshape(4, 32, 64)


def _mismatches(a: np.ndarray, b: np.ndarray, d: np.ndarray) -> int:
    want = a.astype(np.float32) @ b.astype(np.float32)
    bad = 0
    for w in range(4):
        for lane in range(32):
            for e in range(64):
                row, col = _model_position(128, 4, w, lane, e, 64)
                bad += d[w, lane, e] != want[row, col]
    return int(bad)


def _inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.integers(-8, 8, (128, 32)).astype(np.float16), rng.integers(-8, 8, (32, 64)).astype(np.float16))


def test_accumulator_registers_follow_the_ptx_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _inputs(1)
    assert _mismatches(a, b, _lane_dump(monkeypatch, None, a, b)) == 0


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_error_is_caught_lane_by_lane(plant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _inputs(2)
    assert _mismatches(a, b, _lane_dump(monkeypatch, PLANTS[plant], a, b)) > 0


# ---- which kernels use it ------------------------------------------------------------------------

def _info(text: str, arch: str = ARCH) -> list[str]:
    res = compile_source(SourceFile("t.tsr", text), CompileOptions(arch=arch), stop_after="plan-fragments")
    return [line for fn in res.module.functions for line in fragment_info(fn)]


def test_the_samples_use_wgmma_only_on_sm_90a() -> None:
    for name in ("tc_gemm_f16", "flash_attention"):
        src = load_source(str(ROOT / "samples" / f"{name}.tsr"))
        a = compile_source(src, CompileOptions(arch=ARCH)).cuda
        assert "wgmma.mma_async" in a and "tsr_swizzled<" in a, name
        b = compile_source(src, CompileOptions(arch="sm_90")).cuda
        assert "wgmma.mma_async" not in b and "tsr_swizzled<" not in b, name


def test_other_accesses_keep_a_kernel_on_mma_sync() -> None:
    both = LANES.replace("    tstore(C[0:128, 0:64], acc)", "    C[0, 0] = f32(As[0, 0])\n    tstore(C[0:128, 0:64], acc)")
    assert any("wgmma" in line for line in _info(LANES))
    assert not any("wgmma" in line for line in _info(both))
    assert not any("wgmma" in line for line in _info(LANES.replace("tile[(128,)]", "tile[(64,)]")))


# ---- results: NumPy's, and sm_80's bit for bit, on the CPU backend --------------------------------

KINDS = """
@kernel tile[(NT,)]
def mm[T: (f16, bf16)](A: T[M, K], B: T[K, N], C: mut f32[M, N], BM: const i32 = 128, BN: const i32 = 64, BK: const i32 = 64,
       NT: const i32 = 128):
    As = tshared.alloc(T[BM, BK])
    Bs = tshared.alloc(T[BK, BN])
    acc = tfrag(f32[BM, BN], 0.0)
    m0 = group_id(1) * BM
    n0 = group_id(0) * BN
    for k0 in tpipeline(0, K, BK, stages=2):
        tcopy_async(As, A[m0:m0 + BM, k0:k0 + BK])
        tcopy_async(Bs, B[k0:k0 + BK, n0:n0 + BN])
        tmma(acc, As, Bs)
    tstore(C[m0:m0 + BM, n0:n0 + BN], acc)

@kernel tile[(NT,)]
def mm_t[T: (f16, bf16)](A: T[M, K], Bt: T[N, K], C: mut f32[M, N], BM: const i32 = 64, BN: const i32 = 32, BK: const i32 = 32,
         NT: const i32 = 128):
    As = tshared.alloc(T[BM, BK])
    Bs = tshared.alloc(T[BN, BK])
    acc = tfrag(f32[BM, BN], 0.0)
    m0 = group_id(1) * BM
    n0 = group_id(0) * BN
    for k0 in range(0, K, BK):
        tcopy(As, A[m0:m0 + BM, k0:k0 + BK])
        tcopy(Bs, Bt[n0:n0 + BN, k0:k0 + BK])
        tbarrier()
        tmma(acc, As, Bs, trans_b=True)
        tbarrier()
    tstore(C[m0:m0 + BM, n0:n0 + BN], acc)

@kernel tile[(128,)]
def mm_i8_t(A: i8[M, K], Bt: i8[N, K], C: mut i32[M, N]):
    As = tshared.alloc(i8[64, 64])
    Bs = tshared.alloc(i8[32, 64])
    acc = tfrag(i32[64, 32], 0)
    m0 = group_id(1) * 64
    n0 = group_id(0) * 32
    for k0 in range(0, K, 64):
        tcopy(As, A[m0:m0 + 64, k0:k0 + 64])
        tcopy(Bs, Bt[n0:n0 + 32, k0:k0 + 64])
        tbarrier()
        tmma(acc, As, Bs, trans_b=True)
        tbarrier()
    tstore(C[m0:m0 + 64, n0:n0 + 32], acc)
"""


@pytest.fixture(scope="module")
def by_arch():
    return {arch: tessera.compile(KINDS, backend="cpu", path="wg_kinds.tsr", arch=arch) for arch in ("sm_80", ARCH)}


@pytest.mark.parametrize("t", ["f16", "bf16"])
@pytest.mark.parametrize("name,consts", [("mm", dict(BM=128, BN=64, BK=64, NT=128)),
                                         ("mm", dict(BM=128, BN=128, BK=32, NT=256)),
                                         ("mm_t", dict(BM=64, BN=32, BK=32, NT=128)),
                                         ("mm_t", dict(BM=128, BN=16, BK=128, NT=128))])
def test_results_equal_numpy_and_sm_80(by_arch, t: str, name: str, consts) -> None:
    rng = np.random.default_rng(7)
    m, k, n = 150, 96, 70
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    if t == "f16":
        a16, b16 = a.astype(np.float16), b.astype(np.float16)
        want = a16.astype(np.float32) @ b16.astype(np.float32)
    else:
        a16, b16 = bf16_bits(a), bf16_bits(b)
        want = bf16_values(a16) @ bf16_values(b16)
    second = b16 if name == "mm" else np.ascontiguousarray(b16.T)
    grid = (-(-n // consts["BN"]), -(-m // consts["BM"]))
    results = {}
    for arch, mod in by_arch.items():
        c = np.zeros((m, n), np.float32)
        getattr(mod, name)(a16, second, c, **consts, T=t, grid=grid)
        results[arch] = c
    np.testing.assert_allclose(results[ARCH], want, rtol=1e-5, atol=1e-4)
    assert np.array_equal(results[ARCH], results["sm_80"])


def test_8_bit_integers_with_trans_b_are_exact(by_arch) -> None:
    rng = np.random.default_rng(8)
    a, bt = rng.integers(-128, 128, (100, 128), dtype=np.int8), rng.integers(-128, 128, (40, 128), dtype=np.int8)
    c = np.zeros((100, 40), np.int32)
    by_arch[ARCH].mm_i8_t(a, bt, c, grid=(2, 2))
    np.testing.assert_array_equal(c, a.astype(np.int32) @ bt.astype(np.int32).T)
    cuda = compile_source(SourceFile("k.tsr", KINDS), CompileOptions(arch=ARCH)).cuda
    for shape in ("f16_n64_ss_mn", "bf16_n64_ss_mn", "f16_n32_ss_k", "bf16_n32_ss_k", "i8_n32_ss_k"):
        assert f"void tsr_wgmma_{shape}(" in cuda, shape  # every kernel of KINDS is a wgmma kernel


SLICES = """
@kernel tile[(256,)]
def mm_k(A: bf16[M, K], B: bf16[K, N], C: mut f32[M, N]):
    As = tshared.alloc(bf16[128, 64])
    Bs = tshared.alloc(bf16[64, 128])
    acc = tfrag(f32[128, 128], 0.0)
    m0 = group_id(1) * 128
    n0 = group_id(0) * 128
    for k0 in tpipeline(0, K, 64, stages=2):
        tcopy_async(As, A[m0:m0 + 128, k0:k0 + 64])
        tcopy_async(Bs, B[k0:k0 + 64, n0:n0 + 128])
        for kk in static_range(0, 64, 16):
            tmma(acc, As[:, kk:kk + 16], Bs[kk:kk + 16, :])
    tstore(C[m0:m0 + 128, n0:n0 + 128], acc)

@kernel tile[(128,)]
def mm_kt(A: f16[M, K], Bt: f16[N, K], C: mut f32[M, N]):
    As = tshared.alloc(f16[64, 64])
    Bs = tshared.alloc(f16[64, 64])
    acc = tfrag(f32[64, 64], 0.0)
    m0 = group_id(1) * 64
    n0 = group_id(0) * 64
    for k0 in range(0, K, 64):
        tcopy(As, A[m0:m0 + 64, k0:k0 + 64])
        tcopy(Bs, Bt[n0:n0 + 64, k0:k0 + 64])
        tbarrier()
        tmma(acc, As[:, 0:32], Bs[:, 0:32], trans_b=True)
        tmma(acc, As[:, 32:64], Bs[:, 32:64], trans_b=True)
        tbarrier()
    tstore(C[m0:m0 + 64, n0:n0 + 64], acc)
"""


def test_k_slices_of_the_operand_arrays_use_wgmma() -> None:
    """tmma on views that slice the operand arrays along K (spec section 14, written as CUTLASS
    writes its k-blocks) stays on warpgroup MMA: the descriptors start at the slice (it once fell
    back to mma.sync); results are NumPy's and sm_80's, and the machine code has HGMMA."""
    info = _info(SLICES)
    assert sum("tmma: warpgroup MMA" in line for line in info) == 2, info
    rng = np.random.default_rng(9)
    m, k, n = 140, 192, 136
    a, b = rng.integers(-4, 5, (m, k)) / 4, rng.integers(-4, 5, (k, n)) / 4
    a16, b16 = bf16_bits(a), bf16_bits(b)
    results = {}
    for arch in ("sm_80", ARCH):
        mod = tessera.compile(SLICES, backend="cpu", path="wg_slices.tsr", arch=arch)
        c, ct = np.zeros((m, n), np.float32), np.zeros((m, n), np.float32)
        mod.mm_k(a16, b16, c, grid=(2, 2))
        mod.mm_kt(a.astype(np.float16), np.ascontiguousarray(b.T.astype(np.float16)), ct, grid=(3, 3))
        results[arch] = (c, ct)
    np.testing.assert_array_equal(results[ARCH][0], bf16_values(a16) @ bf16_values(b16))
    np.testing.assert_array_equal(results[ARCH][1], a @ b)
    assert all(np.array_equal(x, y) for x, y in zip(results[ARCH], results["sm_80"]))
    if find_nvdisasm() is None:
        return
    result = compile_source(SourceFile("wg_slices.tsr", SLICES), CompileOptions(arch=ARCH))
    nv = compile_cuda(result.cuda, name="wg_slices.cu", arch=ARCH)
    sass = disassemble(nv.cubin)
    for kern in result.kernels:
        assert "HGMMA.64x" in function_sass(sass, kern.c_name), kern.c_name


# ---- the machine code ------------------------------------------------------------------------------

@pytest.mark.skipif(find_nvdisasm() is None, reason="nvdisasm not installed")
@pytest.mark.parametrize("sample", ["tc_gemm_f16", "flash_attention"])
def test_the_samples_use_hgmma_without_spills_or_warnings(sample: str) -> None:
    result = compile_source(load_source(str(ROOT / "samples" / f"{sample}.tsr")), options=CompileOptions(arch=ARCH))
    nv = compile_cuda(result.cuda, name=f"{sample}.cu", arch=ARCH)
    assert nv.warnings == ()
    assert nv.cubin is not None
    sass = disassemble(nv.cubin)
    for k in result.kernels:
        res = nv.kernel(k.c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0, res
        code = function_sass(sass, k.c_name)
        assert "HGMMA.64x" in code and "HMMA" not in code, k.c_name


# ---- the race detector sees the MMA's reads through the descriptors ---------------------------------

RACE = """
@kernel tile[(128,)]
def race(A: f16[64, 32], B: f16[32, 64], C: mut f32[64, 64]):
    As = tshared.alloc(f16[64, 32])
    Bs = tshared.alloc(f16[32, 64])
    acc = tfrag(f32[64, 64], 0.0)
    tcopy(As, A[0:64, 0:32])
    tcopy(Bs, B[0:32, 0:64])
    tmma(acc, As, Bs)
    tstore(C[0:64, 0:64], acc)
"""


def test_a_missing_barrier_before_wgmma_is_reported() -> None:
    mod = tessera.compile(RACE, backend="cpu", arch=ARCH, check_bounds=True, path="race.tsr")
    assert "wgmma.mma_async" in compile_source(SourceFile("race.tsr", RACE), CompileOptions(arch=ARCH)).cuda
    with pytest.raises(tessera.TesseraError, match=r"data race: tile \d+ reads it at line 9 and tile \d+ writes it at "
                                                   r"line [78] with no tbarrier\(\)"):
        mod.race(np.ones((64, 32), np.float16), np.ones((32, 64), np.float16), np.zeros((64, 64), np.float32), grid=1)
    fixed = RACE.replace("    tmma(acc, As, Bs)", "    tbarrier()\n    tmma(acc, As, Bs)")
    c = np.zeros((64, 64), np.float32)
    tessera.compile(fixed, backend="cpu", arch=ARCH, check_bounds=True, path="fixed.tsr").race(
        np.ones((64, 32), np.float16), np.ones((32, 64), np.float16), c, grid=1)
    assert (c == 32).all()
