"""Operand fragments of i8/u8 (mma.sync m16n8k32, i32 accumulators, mixed signedness) and of f32
as TF32 (m16n8k8), spec section 14: filled by tload from shared or global memory, converted from
accumulators by fragment assignment (C's conversions: float to integer truncates toward zero and
saturates, NaN gives 0; a narrower integer wraps), and used as tmma's first operand. Such a fragment
keeps the accumulator layout, which is not the A layout of k32 or k8: tmma packs each A register from
the lane's own column pairs and reads B's rows in the same order (lir/frag_layout.py `pair_k`). The
CPU backend's results are checked against NumPy (int64/float64) at ragged sizes; the A and B
registers tmma gives mma.sync lane by lane against the PTX ISA's tables
(tests/language/tensor_cores/ptx_fragments.py), with planted errors in the emitted packing and in
the device header's B loads that the check must catch; NVRTC's machine code for sm_80 and sm_90."""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest

import tessera
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.cuda.sass import disassemble, find_nvdisasm, function_sass
from tessera.runtime.host import library as cpu
from tessera.transpile.driver import compile_source
from tests.language.tensor_cores.ptx_fragments import (
    a_operand_8bit,
    a_operand_tf32,
    accumulator,
    b_operand_8bit,
    b_operand_tf32,
)
from tests.language.tensor_cores.test_tf32 import tf32

pytestmark = pytest.mark.usefixtures("shared_cache")

NP = {"i8": np.int8, "u8": np.uint8}

EIGHT_BIT = """
@kernel tile[(128,)]
def mm(A: AT[M, 64], B: BT[BR, BC], X: f32[M, 64], C: mut i32[M, 64], Y: mut AT[M, 64]):
    Bs = tshared.alloc(BT[BR, BC])
    As = tshared.alloc(AT[64, 64])
    Af = tfrag(AT[64, 64])
    acc = tfrag(i32[64, 64], 0)
    m0 = group_id(0) * 64
    tcopy(Bs, B[0:BR, 0:BC])
    tcopy(As, A[m0:m0 + 64, 0:64])
    tbarrier()
    LOAD
    tmma(acc, Af, Bs TRANS)
    tstore(C[m0:m0 + 64, 0:64], acc)
    tload(acc, X[m0:m0 + 64, 0:64])
    Af[:] = acc
    tstore(Y[m0:m0 + 64, 0:64], Af)
"""


def _ints(rng: np.random.Generator, elem: str, shape: tuple[int, int]) -> np.ndarray:
    info = np.iinfo(NP[elem])
    return rng.integers(info.min, int(info.max) + 1, shape).astype(NP[elem])


@pytest.mark.parametrize("a_elem,b_elem", [("i8", "i8"), ("u8", "u8"), ("i8", "u8"), ("u8", "i8")])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("load", ["shared", "global"])
def test_8bit_operands_from_registers_match_numpy(a_elem: str, b_elem: str, trans_b: bool, load: str) -> None:
    m = 100  # ragged: the second block has 36 rows
    br, bc = (64, 64)
    src = (EIGHT_BIT.replace("AT", a_elem).replace("BT", b_elem).replace("BR", str(br)).replace("BC", str(bc))
           .replace("TRANS", ", trans_b=True" if trans_b else "")
           .replace("LOAD", "tload(Af, As)" if load == "shared" else "tload(Af, A[m0:m0 + 64, 0:64])"))
    rng = np.random.default_rng(hash((a_elem, b_elem, trans_b, load)) % 2**32)
    a, b = _ints(rng, a_elem, (m, 64)), _ints(rng, b_elem, (br, bc))
    x = (rng.standard_normal((m, 64)) * 200).astype(np.float32)
    c, y = np.zeros((m, 64), np.int32), np.zeros((m, 64), NP[a_elem])
    mod = tessera.compile(src, backend="cpu", check_bounds=load == "global", path="mm8.tsr")
    mod.mm(a, b, x, c, y, grid=(2,))
    bb = b.astype(np.int64).T if trans_b else b.astype(np.int64)
    np.testing.assert_array_equal(c, (a.astype(np.int64) @ bb).astype(np.int32))
    # f32 -> i32 (the accumulator's tload: truncated, saturated) -> the 8-bit operand (wraps)
    np.testing.assert_array_equal(y, np.trunc(x).astype(np.int64).astype(NP[a_elem]))


CONVERT = """
@kernel tile[(128,)]
def conv(X: f32[64, 64], I: i32[64, 64], Y: mut T[64, 64], Z: mut T[64, 64], W: mut i32[64, 64]):
    S = tfrag(f32[64, 64])
    acc = tfrag(i32[64, 64])
    P = tfrag(T[64, 64])
    Q = tfrag(T[64, 64])
    tload(S, X[0:64, 0:64])
    tload(acc, I[0:64, 0:64])
    P[:] = S
    Q[:] = acc
    acc[:] = Q
    tstore(Y[0:64, 0:64], P)
    tstore(Z[0:64, 0:64], Q)
    tstore(W[0:64, 0:64], acc)
"""


@pytest.mark.parametrize("elem", ["i8", "u8"])
def test_conversions_into_8bit_fragments_follow_c(elem: str) -> None:
    """f32 -> 8-bit truncates toward zero and saturates at the type's range (NaN gives 0), as a cast
    does; i32 -> 8-bit keeps the low 8 bits (wraps), as C's conversion does on NVCC and GCC."""
    rng = np.random.default_rng(3)
    specials = np.array([np.nan, np.inf, -np.inf, 127.9, 128.0, -128.9, -129.0, 255.9, 256.0, -0.9, 0.9, 1e30],
                        np.float32)
    x = (rng.standard_normal(64 * 64) * 300).astype(np.float32)
    x[:specials.size] = specials
    x = x.reshape(64, 64)
    i = rng.integers(-2**31, 2**31, (64, 64)).astype(np.int32)
    y, z, w = np.zeros((64, 64), NP[elem]), np.zeros((64, 64), NP[elem]), np.zeros((64, 64), np.int32)
    tessera.compile(CONVERT.replace("T[", f"{elem}["), backend="cpu", path="conv8.tsr").conv(x, i, y, z, w, grid=1)
    info = np.iinfo(NP[elem])
    with np.errstate(invalid="ignore"):
        want = np.where(np.isnan(x), 0, np.clip(np.trunc(np.nan_to_num(x, posinf=1e9, neginf=-1e9)), info.min,
                                                info.max)).astype(NP[elem])
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(z, i.astype(NP[elem]))  # NumPy's astype wraps, as C does
    np.testing.assert_array_equal(w, z.astype(np.int32))


TF32 = """
@kernel tile[(128,)]
def att(Q: f16[M, 64], K: f16[64, 64], V: f32[BR, BC], A: f32[M, 32], O: mut f32[M, 64], O2: mut f32[M, 64]):
    Qs = tshared.alloc(f16[64, 64])
    Ks = tshared.alloc(f16[64, 64])
    Vs = tshared.alloc(f32[BR, BC])
    Vs2 = tshared.alloc(f32[BR2, BC2])
    S = tfrag(f32[64, 64], 0.0)
    Af = tfrag(f32[64, 32])
    Of = tfrag(f32[64, 64], 0.0)
    m0 = group_id(0) * 64
    tcopy(Qs, Q[m0:m0 + 64, 0:64])
    tcopy(Ks, K[0:64, 0:64])
    tcopy(Vs, V[0:BR, 0:BC])
    tcopy(Vs2, V[0:BR2, 0:BC2])
    tbarrier()
    tmma(S, Qs, Ks, trans_b=True)
    S[:] = S * 0.125
    tmma(Of, S, Vs TRANS)
    tstore(O[m0:m0 + 64, 0:64], Of)
    Of[:] = 0.0
    LOAD
    tmma(Of, Af, Vs2 TRANS)
    tstore(O2[m0:m0 + 64, 0:64], Of)
"""


@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("load", ["shared", "global"])
def test_tf32_operands_from_registers_match_numpy(trans_b: bool, load: str) -> None:
    """An accumulator used as A (P = S in place, as TF32) and an f32 fragment loaded from memory;
    each A element rounded by cvt.rna as the shared-memory operands are."""
    m = 90
    shapes = {"BR": 64, "BC": 64, "BR2": 64 if trans_b else 32, "BC2": 32 if trans_b else 64}
    src = TF32.replace("TRANS", ", trans_b=True" if trans_b else "")
    for k, v in sorted(shapes.items(), key=lambda kv: -len(kv[0])):
        src = src.replace(k, str(v))
    if load == "shared":
        src = src.replace("    LOAD", "    As = tshared.alloc(f32[64, 32])\n    tcopy(As, A[m0:m0 + 64, 0:32])\n"
                                     "    tbarrier()\n    tload(Af, As)")
    else:
        src = src.replace("LOAD", "tload(Af, A[m0:m0 + 64, 0:32])")
    rng = np.random.default_rng(5)
    q, k = rng.standard_normal((m, 64)).astype(np.float16), rng.standard_normal((64, 64)).astype(np.float16)
    v = rng.standard_normal((64, 64)).astype(np.float32)
    a = rng.standard_normal((m, 32)).astype(np.float32)
    o, o2 = np.zeros((m, 64), np.float32), np.zeros((m, 64), np.float32)
    tessera.compile(src, backend="cpu", path="tf32a.tsr").att(q, k, v, a, o, o2, grid=(2,))
    s = (q.astype(np.float64) @ k.astype(np.float64).T).astype(np.float32) * np.float32(0.125)
    vv = tf32(v).astype(np.float64)
    v1, v2 = (vv.T, vv[:, :32].T) if trans_b else (vv, vv[:32, :])
    # S is summed in f32 in another order than NumPy's: its rounding to TF32 may differ by one unit
    # (2**-10 of its magnitude) where it lies near a tie
    slack = (np.abs(s.astype(np.float64)) * 2.0 ** -10) @ np.abs(v1) + 2e-4
    assert np.all(np.abs(o - tf32(s).astype(np.float64) @ v1) <= slack)
    np.testing.assert_allclose(o2, tf32(a).astype(np.float64) @ v2, rtol=0, atol=2e-4)


# ---- the A and B registers lane by lane against the PTX ISA --------------------------------------

LANES = """
@kernel tile[(128,)]
def lanes(A: T[64, K], B: T[K, 64], D: mut ACC[384, 64]):
    Bs = tshared.alloc(T[K, 64])
    Af = tfrag(T[64, K])
    acc = tfrag(ACC[64, 64], 0)
    tcopy(Bs, B[0:K, 0:64])
    tbarrier()
    tload(Af, A[0:64, 0:K])
    tmma(acc, Af, Bs)
    tstore(D[0:64, 0:64], acc)
"""
KINDS = {  # element type: (K, k step, accumulator, mma function, the PTX models of A and B)
    "f32": (32, 8, "f32", "tsr_mma_m16n8k8_tf32", a_operand_tf32, b_operand_tf32),
    "i8": (64, 32, "i32", "tsr_mma_m16n8k32_s8", a_operand_8bit, b_operand_8bit),
}
PLANTS = {  # (kind, what the clean C says, what the planted C says instead)
    # TF32: registers 1 and 2 swapped (a1 must be row g + 8)
    "tf32-a-registers": ("f32", "((tsr_x) & 1) * 2 + ((tsr_x) >> 1)]", "((tsr_x) >> 1) * 2 + ((tsr_x) & 1)]"),
    # TF32: B's second register from row t + 4 (the shared-operand order) instead of the pair's 2t + 1
    "tf32-b-pairs": ("f32", "&p[(2 * t + 1) * s + g]", "&p[(t + 4) * s + g]"),
    # 8-bit: the second pair of an A register from the n8 tile after the next
    "8bit-a-pairs": ("i8", "((tsr_x) >> 1) * 2 + 1) * 4", "((tsr_x) >> 1) * 2 + 2) * 4"),
    # 8-bit: B's third byte from row 2t + 2 instead of 2t + 8
    "8bit-b-pairs": ("i8", "(q + 8 * s, line) << 16)", "(q + 2 * s, line) << 16)"),
}


def _dump(monkeypatch: pytest.MonkeyPatch, elem: str, plant: str | None, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per tile, k step, n8 tile: the 4 A and 2 B registers tmma(acc, Af, Bs) gives mma.sync, dumped
    in place of the mma (into D, as bits)."""
    k_total, step, acc, fn, _, _ = KINDS[elem]
    steps = k_total // step
    call = f"{fn}(&acc[(tsr_i * 8 + tsr_j) * 4], tsr_a[tsr_i], tsr_b[tsr_j], tsr_tid);"
    cast = "__uint_as_float" if acc == "f32" else "(int)"
    dump = (f"for (int tsr_x = 0; tsr_x < 6; ++tsr_x) D[((tsr_tid * {steps} + tsr_k / {step}) * 8 + tsr_j) * 6 + "
            f"tsr_x] = {cast}(tsr_x < 4 ? tsr_a[tsr_i][tsr_x] : tsr_b[tsr_j][tsr_x - 4]);")
    real = cpu.build_library

    def dumped(cuda: str, kernels):  # type: ignore[no-untyped-def]
        assert call in cuda
        cuda = cuda.replace(call, dump)
        cuda, n = re.subn(r"if \(tsr_r < tsr_rows && tsr_c < tsr_cols\) tsr_p\[[^\n]*\] = acc\[tsr_e\];", "(void)0;",
                          cuda)
        assert n >= 1  # the store of acc would overwrite the dump
        if plant is not None:
            old, new = PLANTS[plant][1:]
            assert old in cuda
            cuda = cuda.replace(old, new)
        return real(cuda, kernels)

    monkeypatch.setattr(cpu, "build_library", dumped)
    src = LANES.replace("T[", f"{elem}[").replace("ACC", acc).replace("K", str(k_total))
    tag = f"# {dump} {PLANTS.get(plant or '')}\n"  # other C is another library (none is reused from the cache)
    d = np.zeros((384, 64), np.float32 if acc == "f32" else np.int32)
    tessera.compile(tag + src, backend="cpu", path="lanes.tsr").lanes(a, b, d, grid=1)
    return d.reshape(-1).view(np.uint32)[:128 * steps * 8 * 6].reshape(4, 32, steps, 8, 6)


def _positions(monkeypatch: pytest.MonkeyPatch, elem: str, plant: str | None) -> tuple[np.ndarray, np.ndarray]:
    """The (row, column) of A and the (row, column) of B that each register element holds:
    [warp, lane, step, n tile, register, element, 2]."""
    k_total = KINDS[elem][0]
    if elem == "f32":  # unique values, exact in TF32 (below 2**11)
        r, c = np.mgrid[0:64, 0:k_total]
        kk, n = np.mgrid[0:k_total, 0:64]
        regs = _dump(monkeypatch, elem, plant, (r * k_total + c).astype(np.float32), (kk * 64 + n).astype(np.float32))
        vals = regs.view(np.float32).astype(np.int64)[..., None]
        a = np.stack([vals[..., :4, :] // k_total, vals[..., :4, :] % k_total], -1)
        b = np.stack([vals[..., 4:, :] // 64, vals[..., 4:, :] % 64], -1)
        return a, b
    r, c = np.mgrid[0:64, 0:k_total].astype(np.int8)
    kk, n = np.mgrid[0:k_total, 0:64].astype(np.int8)
    rows = _dump(monkeypatch, elem, plant, r, kk)
    cols = _dump(monkeypatch, elem, plant, c, n)
    shifts = np.arange(4, dtype=np.uint32) * 8

    def split(x: np.ndarray) -> np.ndarray:
        return ((x[..., None] >> shifts) & 0xFF).astype(np.int64)
    a = np.stack([split(rows[..., :4]), split(cols[..., :4])], -1)
    b = np.stack([split(rows[..., 4:]), split(cols[..., 4:])], -1)
    return a, b


def _mismatches(elem: str, a: np.ndarray, b: np.ndarray) -> list[str]:
    """Against the PTX tables: each A element in its row, and a column that the lane holds in the
    accumulator layout (no data moved between lanes); each B element in its column; and one
    permutation of each k step's positions for A and B alike (the product is then A @ B)."""
    _, step, _, _, a_model, b_model = KINDS[elem]
    per_reg = 1 if elem == "f32" else 4
    bad: list[str] = []
    order: dict[tuple[int, int], set[int]] = collections.defaultdict(set)  # (step, k position) -> columns of K
    for w in range(4):
        for lane in range(32):
            own = {col for _, col in (accumulator(lane, i) for i in range(4))}
            for s in range(a.shape[2]):
                for j in range(8):
                    for x in range(4):
                        for e in range(per_reg):
                            row, kpos = a_model(lane, x * per_reg + e)
                            got_r, got_c = a[w, lane, s, j, x, e]
                            if got_r != w * 16 + row or got_c // step != s or got_c % 8 not in own:
                                bad.append(f"A warp {w} lane {lane} step {s} a{x}.{e}: ({got_r}, {got_c})")
                            order[s, kpos].add(int(got_c) % step)
                    for y in range(2):
                        for e in range(per_reg):
                            kpos, col = b_model(lane, y * per_reg + e)
                            got_k, got_n = b[w, lane, s, j, y, e]
                            if got_n != j * 8 + col or got_k // step != s:
                                bad.append(f"B warp {w} lane {lane} step {s} b{y}.{e}: ({got_k}, {got_n})")
                            order[s, kpos].add(int(got_k) % step)
    for (s, kpos), cols in order.items():
        if len(cols) != 1:
            bad.append(f"step {s}: k position {kpos} reads columns {sorted(cols)} of A and rows of B")
    for s in range(a.shape[2]):
        if sorted(next(iter(order[s, p])) for p in range(step) if len(order[s, p]) == 1) != list(range(step)):
            bad.append(f"step {s}: the k positions are not a permutation of the step's columns")
    return bad


@pytest.mark.parametrize("elem", sorted(KINDS))
def test_registers_follow_the_ptx_layout(elem: str, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _positions(monkeypatch, elem, None)
    assert _mismatches(elem, a, b) == []


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_register_layout_bug_is_caught_lane_by_lane(plant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _positions(monkeypatch, PLANTS[plant][0], plant)
    assert _mismatches(PLANTS[plant][0], a, b)


def test_a_planted_bug_in_the_cpu_mma_is_caught_by_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU backend's m16n8k32 decodes B's bytes with A's signedness (mixed signedness lost)."""
    real = cpu.build_library

    def planted(cuda: str, kernels):  # type: ignore[no-untyped-def]
        old = 'TSR_MMA_8BIT(tsr_mma_m16n8k32_s8u8, "s8.u8", tsr_dec_s8, tsr_dec_u8)'
        assert old in cuda
        return real(cuda.replace(old, old.replace("tsr_dec_u8)", "tsr_dec_s8)")), kernels)

    monkeypatch.setattr(cpu, "build_library", planted)
    src = (EIGHT_BIT.replace("AT", "i8").replace("BT", "u8").replace("BR", "64").replace("BC", "64")
           .replace("TRANS", "").replace("LOAD", "tload(Af, As)"))
    rng = np.random.default_rng(4)
    a, b = _ints(rng, "i8", (64, 64)), _ints(rng, "u8", (64, 64))
    c, y = np.zeros((64, 64), np.int32), np.zeros((64, 64), np.int8)
    tessera.compile("# planted s8u8\n" + src, backend="cpu", path="p.tsr").mm(a, b, np.zeros((64, 64), np.float32),
                                                                             c, y, grid=1)
    assert not np.array_equal(c, (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32))


# ---- what NVRTC makes of it ----------------------------------------------------------------------

@pytest.mark.skipif(find_nvdisasm() is None, reason="nvdisasm not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", ["i8", "u8s8", "tf32"])
def test_tensor_core_instructions_from_registers(arch: str, case: str) -> None:
    if case == "tf32":
        src = TF32.replace("TRANS", "").replace("LOAD", "tload(Af, A[m0:m0 + 64, 0:32])")
        for k, v in (("BR2", "32"), ("BC2", "64"), ("BR", "64"), ("BC", "64")):
            src = src.replace(k, v)
    else:
        a_elem, b_elem = ("i8", "i8") if case == "i8" else ("u8", "i8")
        src = (EIGHT_BIT.replace("AT", a_elem).replace("BT", b_elem).replace("BR", "64").replace("BC", "64")
               .replace("TRANS", ", trans_b=True").replace("LOAD", "tload(Af, As)"))
    result = compile_source(SourceFile("ops.tsr", src), options=CompileOptions(arch=arch))
    nv = compile_cuda(result.cuda, name="ops.cu", arch=arch)
    assert nv.warnings == ()
    assert nv.cubin is not None
    want = {"i8": r"IMMA\.16832\.S8\.S8", "u8s8": r"IMMA\.16832\.U8\.S8", "tf32": r"HMMA\.1688\.F32\.TF32"}[case]
    for k in result.kernels:
        res = nv.kernel(k.c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0, res
        sass = function_sass(disassemble(nv.cubin), k.c_name)
        count = len(re.findall(want, sass))  # 8 n8 tiles x k steps (and for TF32 two mmas: K 64 and 32)
        assert count == {"i8": 16, "u8s8": 16, "tf32": 96}[case], (case, count)
        assert "SHFL" not in sass  # the operands stay in their lanes
