"""Tensor-core tile operations (spec section 12): tfrag, tmma, tload, tstore and elementwise fragment
statements. The CPU backend runs the emitted per-lane code (ldmatrix and mma.sync move data between
the lanes of a warp as the hardware does), compared with NumPy; a planted layout bug must show
there. NVRTC and nvdisasm prove the tensor-core instructions for sm_80 and sm_90; the shared
layouts the compiler chooses are checked for ldmatrix bank conflicts."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

import tessera
from samples.case import bf16_bits, bf16_values
from tessera.base.dtypes import SCALARS
from tessera.base.errors import LaunchError, SourceFile
from tessera.base.options import CompileOptions
from tessera.cli.compile import run
from tessera.runtime.cuda.nvrtc import NvrtcResult, compile_cuda
from tessera.runtime.cuda.sass import disassemble, find_nvdisasm, function_sass
from tessera.runtime.host import library as cpu
from tessera.transpile.driver import compile_source, load_source
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.frag_layout import FragLayout, choose, divisions, operand_pad, working_extents
from tests.conftest import ROOT
from tests.language.tensor_cores.test_tf32 import tf32

SAMPLES = {n: ROOT / "samples" / f"{n}.tsr" for n in ("tc_gemm_f16", "tc_gemm_bf16_bias_relu", "tc_gemm_i8")}

# One kernel per operand kind and layout, 32 x 32 blocks of C (shapes below are not multiples).
KINDS = """
const BM = 32
const BN = 32

@kernel tile[(128,)]
def mm_f16(A: f16[M, K], B: f16[K, N], C: mut f32[M, N]):
    As = tshared.alloc(f16[BM, 32])
    Bs = tshared.alloc(f16[32, BN])
    acc = tfrag(f32[BM, BN], 0.0)
    m0 = group_id(1) * BM
    n0 = group_id(0) * BN
    for k in range(0, K, 32):
        tcopy(As, A[m0:m0 + BM, k:k + 32])
        tcopy(Bs, B[k:k + 32, n0:n0 + BN])
        tbarrier()
        tmma(acc, As, Bs)
        tbarrier()
    tstore(C[m0:m0 + BM, n0:n0 + BN], acc)

@kernel tile[(32, 4)]
def mm_bf16_t(A: bf16[M, K], Bt: bf16[N, K], C: mut f32[M, N]):
    As = tshared.alloc(bf16[BM, 32])
    Bs = tshared.alloc(bf16[BN, 32])
    acc = tfrag(f32[BM, BN], 0.0)
    m0 = group_id(1) * BM
    n0 = group_id(0) * BN
    for k in range(0, K, 32):
        tcopy(As, A[m0:m0 + BM, k:k + 32])
        tcopy(Bs, Bt[n0:n0 + BN, k:k + 32])
        tbarrier()
        tmma(acc, As, Bs, trans_b=True)
        tbarrier()
    tstore(C[m0:m0 + BM, n0:n0 + BN], acc)

@kernel tile[(64,)]
def mm_tf32(A: f32[M, K], B: f32[K, N], C: mut f32[M, N]):
    As = tshared.alloc(f32[BM, 16])
    Bs = tshared.alloc(f32[16, BN])
    acc = tfrag(f32[BM, BN], 0.0)
    m0 = group_id(1) * BM
    n0 = group_id(0) * BN
    for k in range(0, K, 16):
        tcopy(As, A[m0:m0 + BM, k:k + 16])
        tcopy(Bs, B[k:k + 16, n0:n0 + BN])
        tbarrier()
        tmma(acc, As, Bs)
        tbarrier()
    tstore(C[m0:m0 + BM, n0:n0 + BN], acc)

@kernel tile[(64,)]
def mm_tf32_t(A: f32[M, K], Bt: f32[N, K], C: mut f32[M, N]):
    As = tshared.alloc(f32[BM, 8])
    Bs = tshared.alloc(f32[BN, 8])
    acc = tfrag(f32[BM, BN], 0.0)
    m0 = group_id(1) * BM
    n0 = group_id(0) * BN
    for k in range(0, K, 8):
        tcopy(As, A[m0:m0 + BM, k:k + 8])
        tcopy(Bs, Bt[n0:n0 + BN, k:k + 8])
        tbarrier()
        tmma(acc, As, Bs, trans_b=True)
        tbarrier()
    tstore(C[m0:m0 + BM, n0:n0 + BN], acc)

@kernel tile[(128,)]
def mm_i8(A: i8[M, K], B: i8[K, N], C: mut i32[M, N]):
    As = tshared.alloc(i8[BM, 32])
    Bs = tshared.alloc(i8[32, BN])
    acc = tfrag(i32[BM, BN], 0)
    m0 = group_id(1) * BM
    n0 = group_id(0) * BN
    for k in range(0, K, 32):
        tcopy(As, A[m0:m0 + BM, k:k + 32])
        tcopy(Bs, B[k:k + 32, n0:n0 + BN])
        tbarrier()
        tmma(acc, As, Bs)
        tbarrier()
    tstore(C[m0:m0 + BM, n0:n0 + BN], acc)

@kernel tile[(128,)]
def mm_u8_t(A: u8[M, K], Bt: u8[N, K], C: mut i32[M, N]):
    As = tshared.alloc(u8[BM, 64])
    Bs = tshared.alloc(u8[BN, 64])
    acc = tfrag(i32[BM, BN], 0)
    m0 = group_id(1) * BM
    n0 = group_id(0) * BN
    for k in range(0, K, 64):
        tcopy(As, A[m0:m0 + BM, k:k + 64])
        tcopy(Bs, Bt[n0:n0 + BN, k:k + 64])
        tbarrier()
        tmma(acc, As, Bs, trans_b=True)
        tbarrier()
    tstore(C[m0:m0 + BM, n0:n0 + BN], acc)

@kernel tile[(128,)]
def epilogue(X: f16[M, N], Y: mut f16[M, N], Z: mut i32[M, N], alpha: f32):
    a = tfrag(f32[BM, BN], 0.0)
    b = tfrag(f32[BM, BN], 1.0)
    s = tshared.alloc(f32[BM, BN])
    m0 = group_id(1) * BM
    n0 = group_id(0) * BN
    tload(a, X[m0:m0 + BM, n0:n0 + BN])
    b[:] += a * alpha
    a[:] = max(a * b - 1.0, 0.0)
    tstore(Y[m0:m0 + BM, n0:n0 + BN], a)
    tstore(s, b)
    tbarrier()
    tload(a, s)
    a[:] = a * 4.0
    tstore(Z[m0:m0 + BM, n0:n0 + BN], a)
"""


@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def kinds(request):
    """The KINDS kernels on the CPU backend and, where there is a GPU, on the tensor cores themselves
    (whose results the CPU backend's per-lane emulation must reproduce)."""
    return tessera.compile(KINDS, backend=request.param, path="kinds.tsr")


M, K, N = 45, 64, 70
GRID = ((N + 31) // 32, (M + 31) // 32)


def test_f16_and_bf16_match_numpy(kinds) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((M, K)).astype(np.float16), rng.standard_normal((K, N)).astype(np.float16)
    c = np.zeros((M, N), np.float32)
    kinds.mm_f16(a, b, c, grid=GRID)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-5, atol=1e-4)
    a, bt = bf16_bits(rng.standard_normal((M, K))), bf16_bits(rng.standard_normal((N, K)))
    c = np.zeros((M, N), np.float32)
    kinds.mm_bf16_t(a, bt, c, grid=GRID)
    np.testing.assert_allclose(c, bf16_values(a) @ bf16_values(bt).T, rtol=1e-5, atol=1e-4)


def test_tf32_rounds_its_inputs(kinds) -> None:
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    want = tf32(a) @ tf32(b)  # the model of cvt.rna.tf32.f32 (test_tf32.py)
    for kernel, second in ((kinds.mm_tf32, b), (kinds.mm_tf32_t, np.ascontiguousarray(b.T))):
        c = np.zeros((M, N), np.float32)
        kernel(a, second, c, grid=GRID)
        np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)
        assert np.abs(c - a @ b).max() > 1e-3  # the inputs were rounded to TF32, as on the GPU


def test_8_bit_integers_are_exact(kinds) -> None:
    rng = np.random.default_rng(3)
    a, b = rng.integers(-128, 128, (M, K), dtype=np.int8), rng.integers(-128, 128, (K, N), dtype=np.int8)
    c = np.zeros((M, N), np.int32)
    kinds.mm_i8(a, b, c, grid=GRID)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))
    a, bt = rng.integers(0, 256, (M, 100), dtype=np.uint8), rng.integers(0, 256, (N, 100), dtype=np.uint8)
    c = np.zeros((M, N), np.int32)
    kinds.mm_u8_t(a, bt, c, grid=GRID)  # K = 100: the last tile of K is partly zeros
    np.testing.assert_array_equal(c, a.astype(np.int32) @ bt.astype(np.int32).T)


def test_tload_elementwise_statements_and_tstore(kinds) -> None:
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((M, N)) * 4).astype(np.float16)
    y, z = np.zeros((M, N), np.float16), np.zeros((M, N), np.int32)
    kinds.epilogue(x, y, z, 0.5, grid=GRID)
    v = x.astype(np.float32)
    b = 1.0 + v * np.float32(0.5)
    np.testing.assert_array_equal(y, np.maximum(v * b - 1.0, 0.0).astype(np.float16))
    np.testing.assert_array_equal(z, (b * 4.0).astype(np.int32))  # to i32 as f32 -> int conversions do


@pytest.mark.parametrize("consts", [dict(BM=32, BN=32, BK=16, stages=2, NT=128),
                                    dict(BM=32, BN=24, BK=32, stages=1, NT=32),   # 3 n-tiles: ldmatrix .x2
                                    dict(BM=64, BN=32, BK=16, stages=4, NT=64)],
                         ids=["2-stages", "odd-n-tiles", "4-stages"])
def test_the_pipelined_f16_sample_for_other_tilings(consts) -> None:
    mod = tessera.load(str(SAMPLES["tc_gemm_f16"]), backend="cpu")
    rng = np.random.default_rng(5)
    m, k, n = 70, 56, 50
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float32)
    grid = (-(-n // consts["BN"]), -(-m // consts["BM"]))
    mod.tc_gemm_f16(a, b, c, **consts, grid=grid)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-5, atol=1e-4)


# ---- a wrong layout gives wrong results on the CPU backend too --------------------------------

PLANTED = {
    # lanes 8 ... 15 give the rows of the first 8 instead of rows 8 ... 15 of an A tile
    "ldmatrix-address": ("(tsr_lane & 15)", "(tsr_lane & 7)"),
    # the accumulator's elements 2, 3 stored to the rows of elements 0, 1
    "accumulator-row": ("((tsr_e >> 1) & 1) * 8", "0"),
    # the mma's B operand gathered from the lanes of the wrong column
    "mma-b-lanes": ("(int)(4 * (2 * t + 1)) + q", "(int)(4 * (2 * t)) + q"),
}


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_a_planted_layout_bug_gives_wrong_results(bug: str, monkeypatch) -> None:
    old, new = PLANTED[bug]
    real = cpu.build_library

    def planted(cuda: str, kernels):
        assert old in cuda
        return real(cuda.replace(old, new), kernels)

    src = KINDS.split("@kernel")[0] + "@kernel" + KINDS.split("@kernel")[1]  # mm_f16 alone
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((M, K)).astype(np.float16), rng.standard_normal((K, N)).astype(np.float16)
    want = a.astype(np.float32) @ b.astype(np.float32)
    c = np.zeros((M, N), np.float32)
    tessera.compile(src, backend="cpu", path="planted.tsr").mm_f16(a, b, c, grid=GRID)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)  # the same program, unplanted
    monkeypatch.setattr(cpu, "build_library", planted)
    c = np.zeros((M, N), np.float32)
    # (a comment line more: other C, so that the compiled library of the clean run is not reused)
    tessera.compile("# planted\n" + src, backend="cpu", path="planted.tsr").mm_f16(a, b, c, grid=GRID)
    assert np.abs(c - want).max() > 0.1


# ---- the warp division and the fragment layout ------------------------------------------------------

def test_the_division_takes_the_squarest_per_warp_block() -> None:
    assert choose(128, 128, 8) == FragLayout(128, 128, 2, 4)
    assert choose(64, 64, 4) == FragLayout(64, 64, 2, 2)
    assert choose(64, 64, 4).describe("acc") == "acc: 2x2 warps, 32x32 per warp, 2x4 mma tiles, 32 registers per tile"
    assert choose(16, 256, 4) == FragLayout(16, 256, 1, 4)
    assert choose(40, 64, 4) is None and divisions(40, 64, 4) == []
    assert working_extents(2) == "M of 16 and N of 16 (1x2 warps); M of 32 and N of 8 (2x1 warps)"


@pytest.mark.parametrize("m,n,warps", [(64, 64, 4), (128, 128, 8), (32, 24, 1), (16, 64, 2)])
def test_every_element_is_held_by_exactly_one_lane(m: int, n: int, warps: int) -> None:
    lay = choose(m, n, warps)
    assert lay is not None
    held = [lay.position(w, lane, e) for w in range(warps) for lane in range(32) for e in range(lay.per_lane)]
    assert sorted(held) == [(r, c) for r in range(m) for c in range(n)]


def test_info_prints_the_division_and_the_padding(tmp_path, capsys) -> None:
    assert run([str(SAMPLES["tc_gemm_f16"]), "--info", "-o", str(tmp_path / "k.cu")]) == 0
    out = capsys.readouterr().out
    assert "acc: 2x4 warps, 64x32 per warp, 4x4 mma tiles, 64 registers per tile" in out
    assert "As: rows padded by 8 elements (chosen by the compiler)" in out


# ---- shared layouts free of bank conflicts ------------------------------------------------------

def _row_strides(cuda: str, kernel: str) -> dict[str, tuple[int, int]]:
    """Per shared array of the kernel's emitted body: (element size, row stride in elements), read
    from its declaration (`__half As[64][40]` or, in dynamic shared memory, `(*As)[3][64][40]`)."""
    body = cuda[cuda.index(f"\n{kernel}("):]
    sizes = {"__half": 2, "__nv_bfloat16": 2, "float": 4, "signed char": 1, "unsigned char": 1}
    out = {}
    for m in re.finditer(r"(?:__shared__ __align__\(16\) )?(__half|__nv_bfloat16|float|signed char|unsigned char) "
                         r"\(?\*?(\w+)\)?((?:\[\d+\])+)( = reinterpret_cast<[^;]*tsr_dynamic_smem \+ (\d+)\))?;", body):
        dims = [int(d) for d in re.findall(r"\[(\d+)\]", m.group(3))]
        out[m.group(2)] = (sizes[m.group(1)], dims[-1], int(m.group(5) or 0))
    return out


def _ldmatrix_conflicts(size: int, stride: int, base: int, row_lanes: list[tuple[int, int]]) -> int:
    """Extra shared-memory wavefronts of the ldmatrix phases over `row_lanes` (row, column of each
    lane's 16-byte row; 8 lanes a phase): 0 when the 8 rows of every phase use 32 distinct banks."""
    extra = 0
    for p in range(0, len(row_lanes), 8):
        banks: dict[int, set[int]] = {}
        for r, c in row_lanes[p:p + 8]:
            addr = base + (r * stride + c) * size
            for w in range(4):
                word = addr // 4 + w
                banks.setdefault(word % 32, set()).add(word)
        extra += max(len(words) for words in banks.values()) - 1
    return extra


def _a_rows(k: int, per16: int) -> list[tuple[int, int]]:  # ldmatrix.x4 of an A tile (cfrag.print_mma)
    return [(lane & 15, k + (lane >> 4) * per16) for lane in range(32)]


def _b_trans_rows(k: int) -> list[tuple[int, int]]:       # ldmatrix.x4.trans of B[K, N]
    return [(k + (lane & 7) + ((lane >> 3) & 1) * 8, (lane >> 4) * 8) for lane in range(32)]


def _bt_rows(k: int, per16: int) -> list[tuple[int, int]]:  # ldmatrix.x4 of Bt[N, K]
    return [((lane & 7) + (lane >> 4) * 8, k + ((lane >> 3) & 1) * per16) for lane in range(32)]


@pytest.mark.parametrize("sample,a,b,layout", [("tc_gemm_f16", "As", "Bs", "B"), ("tc_gemm_bf16_bias_relu", "As", "Bs", "B"),
                                               ("tc_gemm_i8", "As", "Bs", "Bt")])
def test_ldmatrix_phases_of_the_samples_are_free_of_bank_conflicts(sample: str, a: str, b: str, layout: str) -> None:
    result = compile_source(load_source(str(SAMPLES[sample])))
    kernel = result.kernels[0].c_name
    arrays = _row_strides(result.cuda, kernel)
    for name, rows in ((a, "A"), (b, layout)):
        size, stride, base = arrays[name]
        per16 = 16 // size
        for k in range(0, 64 // size, per16):
            lanes = _a_rows(k, per16) if rows == "A" else _b_trans_rows(k) if rows == "B" else _bt_rows(k, per16)
            assert _ldmatrix_conflicts(size, stride, base, lanes) == 0, (sample, name, stride)


def test_a_pad_given_by_the_program_is_kept_and_conflicts_are_seen() -> None:
    src = SAMPLES["tc_gemm_f16"].read_text().replace("f16[BM, BK])", "f16[BM, BK], pad=0)")
    result = compile_source(SourceFile("padded.tsr", src))
    size, stride, base = _row_strides(result.cuda, result.kernels[0].c_name)["As"]
    assert stride == 32  # as written: rows of 64 bytes
    assert _ldmatrix_conflicts(size, stride, base, _a_rows(0, 8)) > 0


@pytest.mark.parametrize("elem,row,column,want", [("f16", 32, False, 8), ("f16", 40, False, 0), ("f16", 64, False, 8),
                                                  ("i8", 64, False, 16), ("f32", 16, False, 4), ("f32", 32, True, 8),
                                                  ("i8", 32, True, 8), ("i8", 8, True, 0)])
def test_operand_padding(elem: str, row: int, column: bool, want: int) -> None:
    assert operand_pad(SCALARS[elem], row, column) == want


# ---- what NVRTC makes of it ----------------------------------------------------------------------

@functools.cache
def _machine_code(cuda: str, arch: str) -> tuple[NvrtcResult, str]:
    """NVRTC's build of `cuda` and its disassembly, once for the kernels of one program."""
    nv = compile_cuda(cuda, name="t.cu", arch=arch)
    assert nv.cubin is not None
    return nv, disassemble(nv.cubin)


def _sass(cuda: str, arch: str, c_name: str) -> str:
    nv, text = _machine_code(cuda, arch)
    assert nv.warnings == ()
    res = nv.kernel(c_name)
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    return function_sass(text, c_name)


@pytest.mark.skipif(find_nvdisasm() is None, reason="nvdisasm not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("sample,mma", [("tc_gemm_f16", "HMMA.16816.F32 "), ("tc_gemm_bf16_bias_relu", "HMMA.16816.F32.BF16"),
                                        ("tc_gemm_i8", "IMMA.16832.S8.S8")])
def test_samples_use_tensor_cores_fed_by_ldmatrix(sample: str, mma: str, arch: str) -> None:
    result = compile_source(load_source(str(SAMPLES[sample])), options=CompileOptions(arch=arch))
    for k in result.kernels:
        sass = _sass(result.cuda, arch, k.c_name)
        assert mma in sass and "LDSM.16.M88.4" in sass, k.c_name


@pytest.mark.skipif(find_nvdisasm() is None, reason="nvdisasm not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_tf32_uses_hmma_and_every_kind_has_no_spills(arch: str) -> None:
    result = compile_source(SourceFile("kinds.tsr", KINDS), options=CompileOptions(arch=arch))
    names = {k.name: k.c_name for k in result.kernels if not k.aligned}
    assert "HMMA.1688.F32.TF32" in _sass(result.cuda, arch, names["mm_tf32"])
    assert "LDSM.16.MT88.4" in _sass(result.cuda, arch, names["mm_f16"])  # B[K, N] through ldmatrix.trans
    sass = _sass(result.cuda, arch, names["mm_u8_t"])
    assert "IMMA.16832.U8.U8" in sass and "LDSM" in sass


def test_the_fragment_statements_in_the_lowered_ir() -> None:
    module = compile_source(load_source(str(SAMPLES["tc_gemm_bf16_bias_relu"]))).module
    assert isinstance(module, L.Module)
    fn = module.kernels[0]
    assert {b.name: b.space for b in fn.buffers}["acc"] == "frag"
    pads = {b.name: (b.pad, b.auto_pad) for b in fn.buffers if b.space == "shared"}
    assert pads == {"As": (8, True), "Bs": (8, True), "Cs": (8, False)}


STAGED = """\
@kernel tile[(64,)]
def staged(A: f32[M, N], out: mut f32[M, N]):
    Ss = tshared.alloc(f32[32, 16])
    acc = tfrag(f32[32, 16], 0.0)
    tload(acc, A[0:32, 0:16])
    acc[:] = acc * 2.0
    tstore(Ss, acc)
    tbarrier()
    t = tile_linear_id()
    for i in range(t, 512, 64):
        out[i // 16, i % 16] = Ss[(i // 16 + 1) % 32, i % 16]
"""


def test_the_race_detector_sees_tstore_into_shared_memory() -> None:
    # The writes of `tstore` into a shared array were not seen: a missing barrier between them and
    # other tiles' reads went unreported. Reported with both lines; with the barrier, no report.
    a = np.arange(512, dtype=np.float32).reshape(32, 16)
    out = np.zeros_like(a)
    tessera.compile(STAGED, backend="cpu", check_bounds=True).staged(a, out, grid=1)
    np.testing.assert_array_equal(out, np.roll(a, -1, axis=0) * 2)
    racy = tessera.compile(STAGED.replace("    tbarrier()\n", ""), backend="cpu", check_bounds=True)
    with pytest.raises(LaunchError, match=r"data race: tile \d+ (reads|writes) it at line (10|7) and tile \d+ "
                       r"(writes|reads) it at line (7|10)"):
        racy.staged(a, out, grid=1)
