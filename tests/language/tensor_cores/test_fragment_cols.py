"""Column vectors of fragments (spec section 14): `c = tfrag(f32[1, BN], 0.0)`, `tsum/tmax/tmin(F,
axis=0)`, `c[None, :]` broadcasts, `tload`/`tstore` of column vectors. A column is spread over every
warp (whole rows per warp), so a column reduction is the lane's own elements, xor shuffles over the
8 lanes that hold the column, and a compiler-managed `[W, N]` shared scratch combined after a
barrier (passes/frag_scratch.py). The CPU backend runs the emitted per-lane code and is compared
with NumPy (float64 references) at several shapes and tile counts, inside loops and conditions,
with and without check_bounds; lane by lane with the PTX ISA's layout (ptx_fragments.py); the race
detector sees the scratch; NVRTC compiles without spills, with the shuffles and the barrier in SASS."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import tessera
from tessera.base.errors import CompileError, LaunchError, SourceFile
from tessera.base.options import CompileOptions
from tessera.cli.compile import run
from tessera.runtime.cuda import sass
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.host import library as cpu
from tessera.transpile.driver import compile_source
from tests.language.tensor_cores.col_gen import ColGen
from tests.language.tensor_cores.frag_vector_helpers import launch_dumped, with_consts
from tests.language.tensor_cores.ptx_fragments import accumulator

COLS = """
@kernel tile[(T,)]
def cols(X: f32[M, N], b: f32[N], Y: mut f32[M, N], C: mut f32[N], D: mut f32[N], k: i32,
         T: const i32 = 128, BM: const i32 = 64, BN: const i32 = 32):
    S = tfrag(f32[BM, BN], 0.0)
    c = tfrag(f32[1, BN], 0.0)
    mx = tfrag(f32[1, BN], -inf)
    n0 = group_id(0) * BN
    for i in range(0, M, BM):
        tload(S, X[i:i + BM, n0:n0 + BN])
        c[:] = c + tsum(S, axis=0)
        if i % (2 * BM) == k:
            mx[:] = max(mx, tmax(S, axis=0) + col_index())
    tload(S, X[0:BM, n0:n0 + BN])
    S[:] = S - tmin(S, axis=0)[None, :] + c[None, :] * 0.5 + b[n0:n0 + BN][None, :]
    tstore(Y[0:BM, n0:n0 + BN], S)
    tstore(C[n0:n0 + BN], c)
    tstore(D[n0:n0 + BN], mx)
"""


def _blocks(x: np.ndarray, bm: int, bn: int) -> np.ndarray:
    """`x` zero-padded to whole blocks (what the fragments hold: parts outside read as zero)."""
    m, n = x.shape
    out = np.zeros((-(-m // bm) * bm, -(-n // bn) * bn))
    out[:m, :n] = x
    return out


@pytest.mark.parametrize(("t", "bm", "bn", "check_bounds"), [
    (128, 64, 32, False), (128, 64, 32, True), (32, 16, 16, False), (64, 32, 64, True), (256, 128, 8, False),
    (64, 64, 24, False)])
def test_column_reductions_and_broadcasts_match_numpy(t: int, bm: int, bn: int, check_bounds: bool) -> None:
    m, n = 2 * bm + 5, bn * 2 - 3  # ragged: a partial block of rows and of columns
    rng = np.random.default_rng(t + bm + bn)
    x, b = rng.standard_normal((m, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    y, c, d = np.zeros((m, n), np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32)
    src = with_consts(COLS, T=t, BM=bm, BN=bn)
    mod = tessera.compile(src, backend="cpu", check_bounds=check_bounds, path="cols.tsr")
    mod.cols(x, b, y, c, d, bm, grid=(2,))
    xp, bp = _blocks(x, bm, bn), _blocks(b[None, :], 1, bn)[0]
    cv = xp.sum(0)
    blocks = xp.reshape(-1, bm, xp.shape[1])
    dv = np.max([blk.max(0) + np.arange(xp.shape[1]) % bn for i, blk in enumerate(blocks) if (i * bm) % (2 * bm) == bm],
                axis=0)
    first = xp[:bm]
    want = first - first.min(0)[None, :] + cv[None, :] * 0.5 + bp[None, :]
    np.testing.assert_allclose(c, cv[:n], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(d, dv[:n].astype(np.float32))
    np.testing.assert_allclose(y[:bm], want[:min(bm, m), :n], rtol=1e-5, atol=1e-5)


I32_COLS = """
@kernel tile[(64,)]
def icols(X: i32[M, N], C: mut i32[N], D: mut i32[N]):
    S = tfrag(i32[32, 16], 0)
    c = tfrag(i32[1, 16], 0)
    n0 = group_id(0) * 16
    tload(S, X[0:32, n0:n0 + 16])
    c[:] = tsum(S, axis=0) - col_index()
    tstore(C[n0:n0 + 16], c)
    tload(c, C[n0:n0 + 16])
    c[:] = c * 2 + tmin(S, axis=0)
    tstore(D[n0:n0 + 16], c)
"""


def test_integer_column_vectors_are_exact() -> None:
    x = np.random.default_rng(5).integers(-1000, 1000, (32, 32)).astype(np.int32)
    c, d = np.zeros(32, np.int32), np.zeros(32, np.int32)
    tessera.compile(I32_COLS, backend="cpu", path="icols.tsr").icols(x, c, d, grid=(2,))
    want = x.sum(0) - np.arange(32) % 16
    np.testing.assert_array_equal(c, want)
    np.testing.assert_array_equal(d, want * 2 + x.min(0))


# ---- lane by lane against the PTX ISA's layout (ptx_fragments.py) ---------------------------------------

LANES = """
@kernel tile[(128,)]
def lanes(X: f32[64, 32], DC: mut f32[1024], C: mut f32[32]):
    S = tfrag(f32[64, 32], 0.0)
    c = tfrag(f32[1, 32], 0.0)
    tload(S, X[0:64, 0:32])
    c[:] = tsum(S, axis=0)
    tstore(C[0:32], c)
"""

COL_PLANTS = {  # (what the clean C says, what the planted C says instead)
    "column-shuffle-mask": ("__shfl_xor_sync(0xffffffffu, tsr_v, 16)", "__shfl_xor_sync(0xffffffffu, tsr_v, 2)"),
    "combined-warps": ("tsr_colpart0[tsr_w + 1]", "tsr_colpart0[tsr_w]"),
    "column-slot-element": ("((tsr_k + 1) & 1) * 2", "((tsr_k + 1) & 1) * 1"),
}


def _lane_dump(monkeypatch: pytest.MonkeyPatch, plant: tuple[str, str] | None, x: np.ndarray) -> np.ndarray:
    """Each lane's registers of the column vector c (8), as the CPU backend computes them: its store
    replaced by a dump of every lane's slots."""
    dc, c = np.zeros(1024, np.float32), np.zeros(32, np.float32)
    launch_dumped(monkeypatch, LANES, r"if \([^\n]*\) tsr_p\[[^\n]*\] = c\[tsr_cq\];",
                  "DC[tsr_tid * 8 + tsr_cq] = c[tsr_cq];", plant, x, dc, c)
    return dc.reshape(4, 32, 8)


def _model_mismatches(x: np.ndarray, dc: np.ndarray) -> int:
    """Slots that differ from the model: every lane of every warp holds the sum of the columns its
    accumulator registers c0/c1 hold in each n8 tile j (slot 2 j + h), over all 64 rows."""
    bad = 0
    for w in range(4):
        for lane in range(32):
            for j in range(4):
                for h in range(2):
                    _, col = accumulator(lane, h)
                    bad += dc[w, lane, 2 * j + h] != x[:, j * 8 + col].sum()
    return int(bad)


def test_column_vector_registers_follow_the_ptx_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(2).integers(-50, 50, (64, 32)).astype(np.float32)  # sums exact in f32
    assert _model_mismatches(x, _lane_dump(monkeypatch, None, x)) == 0


@pytest.mark.parametrize("plant", sorted(COL_PLANTS))
def test_a_planted_column_layout_bug_is_caught_lane_by_lane(plant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(3).integers(-50, 50, (64, 32)).astype(np.float32)
    assert _model_mismatches(x, _lane_dump(monkeypatch, COL_PLANTS[plant], x)) > 0


# ---- the scratch: shared memory, barriers, the race detector ----------------------------------------------

def test_the_race_detector_sees_the_scratch_and_its_barriers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the barrier between the warps' parts and their combination (planted: the user cannot
    leave it out), the race detector reports the scratch's write and read at the statement's line;
    in a loop the second barrier keeps the next iteration's writes after the reads."""
    src = with_consts(COLS, T=64, BM=32)
    cuda = compile_source(SourceFile("cols.tsr", src), CompileOptions()).cuda
    line = src.splitlines().index("        c[:] = c + tsum(S, axis=0)") + 1
    assert len(re.findall(rf"__syncthreads\(\);  // line {line}\n", cuda)) == 2  # in the loop: before and after
    last = src.splitlines().index("    S[:] = S - tmin(S, axis=0)[None, :] + c[None, :] * 0.5 + b[n0:n0 + BN][None, :]") + 1
    assert len(re.findall(rf"__syncthreads\(\);  // line {last}\n", cuda)) == 1  # not in a loop: one
    x, b = np.ones((70, 60), np.float32), np.zeros(60, np.float32)
    outs = [np.zeros((70, 60), np.float32), np.zeros(60, np.float32), np.zeros(60, np.float32)]
    real = cpu.build_library
    for which in ("first", "second"):
        def planted(cuda: str, kernels, which=which):  # type: ignore[no-untyped-def]
            bar = f"    __syncthreads();  // line {line + 1}\n"  # (one line added at the top)
            at = cuda.index(bar) if which == "first" else cuda.index(bar, cuda.index(bar) + 1)
            return real(cuda[:at] + cuda[at + len(bar):], kernels)
        monkeypatch.setattr(cpu, "build_library", planted)
        mod = tessera.compile(f"# no {which} barrier\n" + src, backend="cpu", check_bounds=True, path="cols.tsr")
        with pytest.raises(LaunchError, match=rf"cols:{line + 1}: shared-memory data race: tile -?\d+ "
                                              rf"(writes|reads) it at line {line + 1} and tile -?\d+ (writes|reads) it"):
            mod.cols(x, b, *outs, 32, grid=(2,))
    monkeypatch.setattr(cpu, "build_library", real)
    tessera.compile(src, backend="cpu", check_bounds=True, path="cols.tsr").cols(x, b, *outs, 32, grid=(2,))
    np.testing.assert_array_equal(outs[1], np.full(60, 70.0, np.float32))


def test_the_scratch_is_shared_memory_that_the_plans_and_info_see(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    src = with_consts(COLS, T=256, BM=128)
    cuda = compile_source(SourceFile("c.tsr", src)).cuda
    # [8 warps, 32 columns] of f32 for each of the 3 reductions; plan-shared sees the lifetimes: the
    # loop's scratch and the last statement's share memory (a barrier between them), the middle one not
    assert "float (*tsr_colpart0)[32] = reinterpret_cast<float (*)[32]>(tsr_shared_pool + 0);  // 1024 bytes, " \
        "shares memory with %colpart2" in cuda
    (tmp_path / "cols.tsr").write_text(src)
    assert run([str(tmp_path / "cols.tsr"), "--info", "-o", str(tmp_path / "k.cu")]) == 0
    out = capsys.readouterr().out
    assert "c: a column vector of 32 columns, 8 registers per tile" in out
    assert "shared %colpart0 @ 0, 1024 bytes" in out  # [8 warps, 32 columns] of f32


def test_one_warp_needs_no_scratch_and_no_barrier() -> None:
    src = with_consts(COLS, T=32, BM=16)
    cuda = compile_source(SourceFile("cols.tsr", src), CompileOptions()).cuda
    assert "__syncthreads();  // line" not in cuda and "tsr_colpart" not in cuda
    assert "__shfl_xor_sync(0xffffffffu, tsr_v, 16)" in cuda


# ---- NVRTC: no spills, the shuffles and the barrier in the machine code ----------------------------------

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_column_reductions_compile_with_nvrtc_without_spills(arch: str) -> None:
    for t, bm, bn in ((128, 64, 32), (256, 128, 64), (32, 16, 16)):
        src = with_consts(COLS, T=t, BM=bm, BN=bn)
        result = compile_source(SourceFile("cols.tsr", src), CompileOptions(arch=arch))
        nv = compile_cuda(result.cuda, name="cols.cu", arch=arch)
        assert nv.warnings == ()
        res = nv.kernel(result.kernels[0].c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0, (res, t, bm, bn)
        if sass.find_nvdisasm() is not None and t == 128:
            ops = sass.instructions(sass.disassemble(nv.cubin))
            assert any(op.startswith("SHFL.BFLY") for op in ops), ops
            assert any(op.startswith("BAR.SYNC") for op in ops), ops
            assert any(op.startswith("STS") for op in ops) and any(op.startswith("LDS") for op in ops), ops


# ---- warpgroup MMA (sm_90a): the accumulator's layout has 64-row blocks, the columns are the same --------

WG = """
@kernel tile[(128,)]
def wg(A: f16[M, K], B: f16[K, N], C: mut f32[M, N], S: mut f32[N]):
    As = tshared.alloc(f16[64, 32])
    Bs = tshared.alloc(f16[32, 64])
    acc = tfrag(f32[64, 64], 0.0)
    s = tfrag(f32[1, 64], 0.0)
    m0 = group_id(1) * 64
    n0 = group_id(0) * 64
    for k0 in range(0, K, 32):
        tcopy(As, A[m0:m0 + 64, k0:k0 + 32])
        tcopy(Bs, B[k0:k0 + 32, n0:n0 + 64])
        tbarrier()
        tmma(acc, As, Bs)
        tbarrier()
    s[:] = tsum(acc, axis=0)
    acc[:] = acc - tmax(acc, axis=0)[None, :] + s[None, :]
    tstore(C[m0:m0 + 64, n0:n0 + 64], acc)
    tstore(S[n0:n0 + 64], s)
"""


def test_column_reductions_of_warpgroup_mma_accumulators() -> None:
    rng = np.random.default_rng(7)
    m, k, n = 64, 64, 100
    a, b = (rng.integers(-4, 5, (m, k)) / 4).astype(np.float16), (rng.integers(-4, 5, (k, n)) / 4).astype(np.float16)
    prod = a.astype(np.float64) @ b.astype(np.float64)
    full = np.zeros((64, 128))
    full[:, :n] = prod
    out = {}
    for arch in ("sm_80", "sm_90a"):
        cuda = compile_source(SourceFile("wg.tsr", WG), CompileOptions(arch=arch)).cuda
        assert ("wgmma.mma_async" in cuda) == (arch == "sm_90a")
        c, s = np.zeros((m, n), np.float32), np.zeros(n, np.float32)
        tessera.compile(WG, backend="cpu", path="wg.tsr", arch=arch).wg(a, b, c, s, grid=(2, 1))
        out[arch] = (c, s)
    c, s = out["sm_90a"]
    np.testing.assert_array_equal(s, full.sum(0)[:n].astype(np.float32))
    np.testing.assert_array_equal(c, (full - full.max(0)[None, :] + full.sum(0)[None, :])[:, :n].astype(np.float32))
    assert np.array_equal(c, out["sm_80"][0]) and np.array_equal(s, out["sm_80"][1])


def test_warpgroup_column_reductions_compile_with_nvrtc() -> None:
    result = compile_source(SourceFile("wg.tsr", WG), CompileOptions(arch="sm_90a"))
    nv = compile_cuda(result.cuda, name="wg.cu", arch="sm_90a")
    res = nv.kernel(result.kernels[0].c_name)
    assert res.spill_stores == 0 and res.spill_loads == 0, res


# ---- located errors --------------------------------------------------------------------------------------

ERR_HEAD = """
@kernel tile[(128,)]
def k(X: f32[M, N], Y: mut f32[M, N], C: mut f32[N]):
    S = tfrag(f32[64, 32], 0.0)
    c = tfrag(f32[1, 32], 0.0)
    v = tfrag(f32[64], 0.0)
"""


@pytest.mark.parametrize(("body", "message"), [
    ("S[:] = S + c", "'c' is a column vector: broadcast it along the rows with c[None, :]"),
    ("v[:] = tsum(S, axis=0)", "tsum(F, axis=0) is a column vector: use it in a column-vector statement"),
    ("c[:] = tsum(S, axis=1)", "tsum(F, axis=1) is a row vector"),
    ("c[:] = S", "'S' is a [64, 32] fragment, but here one value per column is computed: reduce it"),
    ("c[:] = v", "'v' is a row vector, but here one value per column is computed"),
    ("v[:] = c", "'c' is a column vector, but here one value per row is computed"),
    ("c[:] = row_index()", "row_index() has no value in a statement that assigns a column vector"),
    ("tstore(C[0:64], c)", "tstore() needs a view of the fragment's extents [32], got [64]"),
    ("As = tshared.alloc(f16[64, 16])\n    Bs = tshared.alloc(f16[16, 32])\n    tmma(c, As, Bs)",
     "the accumulator of tmma() is a 2-D fragment"),
    ("d = tfrag(f32[1, 12], 0.0)", "the column count must be a multiple of 8, not 12"),
    ("d = tfrag(f16[1, 32])", "a column vector holds f32 or i32 values, not f16"),
    ("d = tfrag(f32[1, 64], 0.0)\n    S[:] = S + d[None, :]", "'d' is a column vector of 64 columns, but here the fragments have 32"),
])
def test_column_vector_misuse_is_a_located_error(body: str, message: str) -> None:
    src = ERR_HEAD + "    " + body + "\n"
    with pytest.raises(CompileError) as info:
        compile_source(SourceFile("err.tsr", src), CompileOptions())
    text = str(info.value)
    assert re.search(r"err\.tsr:\d+:\d+: error: [^\n]*" + re.escape(message), text), text


# ---- a random differential test (tests/language/tensor_cores/col_gen.py) ----------------------------------

CASES = int(os.environ.get("TESSERA_COLGEN_CASES", "8"))


def run_col_generated(seed: int, check_bounds: bool, rows_only: bool = False) -> None:
    gen = ColGen(seed, rows_only)
    src, model = gen.program(5)
    sh = gen.shape
    rng = np.random.default_rng(seed)
    m = sh.bm * int(rng.integers(1, 4)) - int(rng.integers(0, 9))  # ragged rows, one or more row blocks
    n = sh.bn * 2 - int(rng.integers(0, sh.bn // 2 + 1))            # ragged columns, two groups
    x = (rng.integers(-8, 9, (m, n)) / 4).astype(np.float32)        # exact sums in f32
    b = (rng.integers(-8, 9, n) / 4).astype(np.float32)
    k = seed % 3
    y, c, r = np.zeros((m, n), np.float32), np.zeros(n, np.float32), np.zeros((2, m), np.float32)
    tessera.compile(src, backend="cpu", check_bounds=check_bounds, path=f"colgen{seed}.tsr").gen(
        x, b, y, c, r, k, grid=(-(-n // sh.bn),))
    want_y, want_c, want_r = model(x.astype(np.float64), b.astype(np.float64), k)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5, err_msg=src)
    np.testing.assert_allclose(r, want_r, rtol=1e-5, atol=1e-5, err_msg=src)
    if not rows_only:
        np.testing.assert_allclose(c, want_c, rtol=1e-5, atol=1e-5, err_msg=src)


@pytest.mark.parametrize("seed", range(CASES))
def test_generated_column_programs_match_the_numpy_model(seed: int) -> None:
    run_col_generated(seed, check_bounds=seed % 4 == 3)


@pytest.mark.parametrize("seed", range(CASES))
def test_generated_programs_with_rows_across_warps_match_the_numpy_model(seed: int) -> None:
    run_col_generated(seed, check_bounds=seed % 4 == 1, rows_only=True)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_generated_column_programs_compile_with_nvrtc_without_spills(arch: str) -> None:
    for seed in range(4):
        src, _ = ColGen(seed, rows_only=seed % 2 == 1).program(5)
        result = compile_source(SourceFile(f"colgen{seed}.tsr", src), options=CompileOptions(arch=arch))
        nv = compile_cuda(result.cuda, name="colgen.cu", arch=arch)
        assert nv.warnings == (), (nv.warnings, src)
        res = nv.kernel(result.kernels[0].c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0, (res, src)


DEVICE = """
@device
def colnorm(S: mut frag f32[BM, BN], c: mut frag f32[1, BN]):
    c[:] = tmax(S, axis=0)
    S[:] = S - c[None, :]

@kernel tile[(128,)]
def k(X: f32[M, N], Y: mut f32[M, N]):
    S = tfrag(f32[64, 32], 0.0)
    c = tfrag(f32[1, 32], 0.0)
    tload(S, X[0:64, 0:32])
    colnorm(S, c)
    tstore(Y[0:64, 0:32], S)
"""


def test_device_functions_take_column_vectors() -> None:
    x = np.random.default_rng(9).standard_normal((64, 32)).astype(np.float32)
    y = np.zeros((64, 32), np.float32)
    tessera.compile(DEVICE, backend="cpu", path="dev.tsr").k(x, y, grid=1)
    np.testing.assert_array_equal(y, x - x.max(0)[None, :])


PIPELINED = """
@kernel tile[(128,)]
def pk(A: f16[M, K], B: f16[K, N], C: mut f32[M, N], S: mut f32[N]):
    As = tshared.alloc(f16[64, 32])
    Bs = tshared.alloc(f16[32, 64])
    acc = tfrag(f32[64, 64], 0.0)
    s = tfrag(f32[1, 64], 0.0)
    m0 = group_id(1) * 64
    n0 = group_id(0) * 64
    for k0 in tpipeline(0, K, 32, stages=2):
        tcopy_async(As, A[m0:m0 + 64, k0:k0 + 32])
        tcopy_async(Bs, B[k0:k0 + 32, n0:n0 + 64])
        acc[:] = 0.0
        tmma(acc, As, Bs)
        s[:] = s + tmax(acc, axis=0)
    tstore(C[m0:m0 + 64, n0:n0 + 64], acc)
    tstore(S[n0:n0 + 64], s)
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_column_reductions_in_a_pipelined_loop_are_race_free(arch: str) -> None:
    """The scratch's barriers inside a tpipeline body, next to the pipeline's own: the race
    detector finds nothing, and the result is NumPy's, bit for bit (exact products and sums)."""
    rng = np.random.default_rng(7)
    m, k, n = 64, 96, 100
    a, b = (rng.integers(-4, 5, (m, k)) / 4).astype(np.float16), (rng.integers(-4, 5, (k, n)) / 4).astype(np.float16)
    want = np.zeros(n)
    for k0 in range(0, k, 32):
        p = np.zeros((64, 128))
        p[:, :n] = a[:, k0:k0 + 32].astype(np.float64) @ b[k0:k0 + 32].astype(np.float64)
        want += p.max(0)[:n]
    c, s = np.zeros((m, n), np.float32), np.zeros(n, np.float32)
    tessera.compile(PIPELINED, backend="cpu", path="pk.tsr", arch=arch, check_bounds=True).pk(a, b, c, s, grid=(2, 1))
    np.testing.assert_array_equal(s, want.astype(np.float32))


def test_fragment_kernels_run_in_fiber_mode_on_the_cpu_backend() -> None:
    """Region mode (transpile/cpu/regions.py) runs kernels whose tiles need not meet between
    barriers; the lanes of a warp meet at every shuffle, so a kernel with fragment statements keeps
    fiber mode, and its scratch barriers are fibers' barriers: no second mode to compare with."""
    mod = tessera.compile(COLS, backend="cpu", path="cols.tsr")
    assert mod["cols"].info().regions is False
