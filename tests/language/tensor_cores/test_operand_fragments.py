"""Operand fragments (spec section 14): `Q = tfrag(f16[BM, K])` filled by tload (ldmatrix from a
shared array of its type, element by element from anywhere else), converted from an accumulator
(`P[:] = S`, rounded to nearest even, in place: the C layout of 16-bit elements is their A layout)
and used as tmma's first operand. The CPU backend runs the emitted per-lane code: NumPy checks at
ragged sizes with and without check_bounds, the A registers lane by lane against the PTX ISA's
layout (tests/language/tensor_cores/ptx_fragments.py) with planted bugs it catches, the race detector on the
ldmatrix loads, and NVRTC's machine code."""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest

import tessera
from samples.case import bf16_bits, bf16_values
from tessera.base.errors import LaunchError, SourceFile
from tessera.base.options import CompileOptions
from tessera.cli.compile import run
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.cuda.sass import disassemble, find_nvdisasm, function_sass
from tessera.runtime.host import library as cpu
from tessera.transpile.driver import compile_source
from tessera.transpile.lir import nodes as L
from tests.conftest import ROOT
from tests.language.tensor_cores.ptx_fragments import a_operand_16bit

TWO_MMAS = """
@kernel tile[(128,)]
def attn(Q: T[M, 64], K: T[N, 64], V: T[N, 64], O: mut f32[M, 64], P16: mut T[M, 64]):
    Qs = tshared.alloc(T[64, 64])
    Ks = tshared.alloc(T[64, 64])
    Vs = tshared.alloc(T[64, 64])
    Qf = tfrag(T[64, 64])
    S = tfrag(f32[64, 64], 0.0)
    P = tfrag(T[64, 64])
    Of = tfrag(f32[64, 64], 0.0)
    m0 = group_id(0) * 64
    tcopy(Qs, Q[m0:m0 + 64, 0:64])
    tcopy(Ks, K[0:64, 0:64])
    tcopy(Vs, V[0:64, 0:64])
    BARRIER
    LOAD_Q
    tmma(S, Qf, Ks, trans_b=True)
    P[:] = S * 0.125
    tstore(P16[m0:m0 + 64, 0:64], P)
    tmma(Of, P, Vs)
    tstore(O[m0:m0 + 64, 0:64], Of)
"""


def source(elem: str = "f16", load: str = "tload(Qf, Qs)", barrier: str = "tbarrier()") -> str:
    return TWO_MMAS.replace("T[", f"{elem}[").replace("LOAD_Q", load).replace("BARRIER", barrier)


def _inputs(elem: str, m: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    def make(shape: tuple[int, int]) -> np.ndarray:
        x = rng.standard_normal(shape)
        return x.astype(np.float16) if elem == "f16" else bf16_bits(x)
    return make((m, 64)), make((64, 64)), make((64, 64))


def _values(elem: str, x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) if elem == "f16" else bf16_values(x).astype(np.float64)


def _rounded(elem: str, x: np.ndarray) -> np.ndarray:
    """f32 values rounded to the 16-bit type (to nearest even), as values."""
    x32 = x.astype(np.float32)
    return x32.astype(np.float16).astype(np.float64) if elem == "f16" else bf16_values(bf16_bits(x32)).astype(np.float64)


@pytest.mark.parametrize("elem", ["f16", "bf16"])
@pytest.mark.parametrize("load", ["tload(Qf, Qs)", "tload(Qf, Q[m0:m0 + 64, 0:64])"], ids=["ldmatrix", "global"])
@pytest.mark.parametrize("check_bounds", [False, True])
def test_two_mmas_through_registers_match_numpy(elem: str, load: str, check_bounds: bool) -> None:
    m = 100  # ragged: the second block has 36 rows
    q, k, v = _inputs(elem, m, np.random.default_rng(7))
    o, p16 = np.zeros((m, 64), np.float32), np.zeros((m, 64), q.dtype)
    mod = tessera.compile(source(elem, load), backend="cpu", check_bounds=check_bounds, path="two.tsr")
    mod.attn(q, k, v, o, p16, grid=(2,))
    s = _values(elem, q) @ _values(elem, k).T
    p = _rounded(elem, s.astype(np.float32) * np.float32(0.125))  # S in f32, then P rounded once
    np.testing.assert_allclose(_values(elem, p16), p, rtol=0, atol=2e-2 if elem == "bf16" else 2e-3)
    np.testing.assert_allclose(o, _values(elem, p16) @ _values(elem, v), rtol=1e-5, atol=1e-4)


def test_conversion_rounds_to_nearest_even() -> None:
    src = """
@kernel tile[(128,)]
def conv(X: f32[64, 64], Y: mut f16[64, 64], Z: mut f32[64, 64]):
    S = tfrag(f32[64, 64])
    P = tfrag(f16[64, 64])
    tload(S, X[0:64, 0:64])
    P[:] = S
    S[:] = P
    tstore(Y[0:64, 0:64], P)
    tstore(Z[0:64, 0:64], S)
"""
    ties = 1 + (np.arange(64 * 64) % 7) * 2.0 ** -10 + 2.0 ** -11  # halfway between two f16 values
    x = (ties * np.where(np.arange(64 * 64) % 2, 1, -1)).reshape(64, 64).astype(np.float32)
    y, z = np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float32)
    tessera.compile(src, backend="cpu", path="conv.tsr").conv(x, y, z, grid=1)
    np.testing.assert_array_equal(y, x.astype(np.float16))  # NumPy rounds to nearest even
    np.testing.assert_array_equal(z, x.astype(np.float16).astype(np.float32))


# ---- the A registers lane by lane against the PTX ISA (tests/language/tensor_cores/ptx_fragments.py) ----------

A_PLANTS = {  # (what the clean C says, what the planted C says instead)
    # lanes 8 ... 15 give the addresses of rows 0 ... 7 in the ldmatrix of tload(Qf, Qs)
    "ldmatrix-rows": ("(tsr_i * 16 + (tsr_lane & 15))", "(tsr_i * 16 + (tsr_lane & 7))"),
    # registers 2 and 3 packed from the same n8 tile as registers 0 and 1
    "register-pairs": ("((tsr_k) >> 3) + ((tsr_x) >> 1)) * 4", "((tsr_k) >> 3) + 0) * 4"),
}
DUMP = ("for (int tsr_j = 0; tsr_j < 8; ++tsr_j) tsr_mma_m16n8k16_f16(&S[(tsr_i * 8 + tsr_j) * 4], tsr_a[tsr_i], "
        "tsr_b[tsr_j], tsr_tid);")


def _a_registers(monkeypatch: pytest.MonkeyPatch, plant: str | None, q: np.ndarray) -> np.ndarray:
    """Per warp, lane, k step and register: the A registers tmma(S, Qf, ...) gives mma.sync, dumped
    in place of the mma (into O, read as bits)."""
    real = cpu.build_library

    def dumped(cuda: str, kernels):  # type: ignore[no-untyped-def]
        assert DUMP in cuda
        cuda = cuda.replace(DUMP, "for (int tsr_x = 0; tsr_x < 4; ++tsr_x) "
                                  "O[(tsr_tid * 4 + tsr_k / 16) * 4 + tsr_x] = __uint_as_float(tsr_a[tsr_i][tsr_x]);")
        cuda, n = re.subn(r"if \(tsr_r < tsr_rows && tsr_c < tsr_cols\) tsr_p\[[^\n]*\] = Of\[tsr_e\];", "(void)0;", cuda)
        assert n >= 1  # (in every variant the module has) the store of O would overwrite the dump
        if plant is not None:
            old, new = A_PLANTS[plant]
            assert old in cuda
            cuda = cuda.replace(old, new)
        return real(cuda, kernels)

    monkeypatch.setattr(cpu, "build_library", dumped)
    k = np.zeros((64, 64), np.float16)
    o, p16 = np.zeros((64, 64), np.float32), np.zeros((64, 64), np.float16)
    # The dump and the plant in the source as a comment: other C is another library (none is reused from the cache).
    tag = f"# {DUMP} {A_PLANTS.get(plant or '')}\n"
    tessera.compile(tag + source(), backend="cpu", path="lanes.tsr").attn(q, k, k, o, p16, grid=1)
    return o.reshape(-1).view(np.uint32)[:128 * 16].reshape(4, 32, 4, 4)


def _a_mismatches(q: np.ndarray, regs: np.ndarray) -> int:
    bits = q.view(np.uint16)
    bad = 0
    for w in range(4):
        for lane in range(32):
            for step in range(4):
                for x in range(4):
                    want = 0
                    for h in range(2):
                        row, col = a_operand_16bit(lane, 2 * x + h)
                        want |= int(bits[w * 16 + row, step * 16 + col]) << (16 * h)
                    bad += int(regs[w, lane, step, x]) != want
    return bad


def test_a_registers_follow_the_ptx_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    q = np.random.default_rng(8).standard_normal((64, 64)).astype(np.float16)
    assert _a_mismatches(q, _a_registers(monkeypatch, None, q)) == 0


@pytest.mark.parametrize("plant", sorted(A_PLANTS))
def test_a_planted_operand_layout_bug_is_caught_lane_by_lane(plant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    q = np.random.default_rng(9).standard_normal((64, 64)).astype(np.float16)
    assert _a_mismatches(q, _a_registers(monkeypatch, plant, q)) > 0


def test_the_race_detector_sees_the_ldmatrix_loads() -> None:
    q, k, v = _inputs("f16", 64, np.random.default_rng(10))
    o, p16 = np.zeros((64, 64), np.float32), np.zeros((64, 64), np.float16)
    mod = tessera.compile(source(barrier="pass"), backend="cpu", check_bounds=True, path="race.tsr")
    with pytest.raises(LaunchError, match="shared-memory data race") as err:
        mod.attn(q, k, v, o, p16, grid=1)
    assert "writes it at line 12" in str(err.value) and "reads it at line 16" in str(err.value)


# ---- what NVRTC makes of it ----------------------------------------------------------------------

@pytest.mark.skipif(find_nvdisasm() is None, reason="nvdisasm not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("elem", ["f16", "bf16"])
def test_operands_from_registers_move_no_data_between_lanes(arch: str, elem: str) -> None:
    result = compile_source(SourceFile("two.tsr", source(elem)), options=CompileOptions(arch=arch))
    nv = compile_cuda(result.cuda, name="two.cu", arch=arch)
    assert nv.warnings == ()
    assert nv.cubin is not None
    for k in result.kernels:
        res = nv.kernel(k.c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0, res
        ops = collections.Counter(re.findall(r"\b(HMMA\.16816\S*|LDSM\S*|SHFL\S*|F2FP\S*)",
                                             function_sass(disassemble(nv.cubin), k.c_name)))
        assert not any(op.startswith("SHFL") for op in ops), ops  # P stays in its lanes
        assert sum(n for op, n in ops.items() if op.startswith("HMMA")) == 2 * 4 * 8  # 2 mmas x 4 k steps x 8 n tiles
        assert ops["LDSM.16.M88.4"] == 4 + 4 * 4  # Q (4 k steps) and K^T (4 k steps x 4 pairs of n tiles)
        assert sum(n for op, n in ops.items() if op.startswith("F2FP")) >= 16  # P = S: 32 elements, packed in pairs


def test_flash_attention_keeps_s_p_and_the_statistics_in_registers() -> None:
    """The sample's shared memory is its Q, K and V staging only (K and V double-buffered by
    tpipeline); S, P, the row maxima and sums and the rescaling are fragments."""
    result = compile_source(SourceFile("fa.tsr", (ROOT / "samples" / "flash_attention.tsr").read_text()))
    for fn in result.module.kernels:
        spaces = {b.name: b.space for b in fn.buffers}
        shared = {b.name: [int(d.value) for d in b.shape if isinstance(d, L.Const)] for b in fn.buffers
                  if b.space == "shared"}
        assert shared == {"Qs": [64, 64], "Ks": [2, 64, 64], "Vs": [2, 64, 64]}, shared
        assert {n for n, sp in spaces.items() if sp == "frag"} == {"Qf", "S", "P", "Of", "m", "l", "m_new", "alpha"}


def test_info_prints_row_vectors_and_the_whole_row_division(tmp_path, capsys) -> None:
    src = ROOT / "samples" / "flash_attention.tsr"
    assert run([str(src), "--info", "-D", "T=f16", "-o", str(tmp_path / "fa.cu")]) == 0
    out = capsys.readouterr().out  # the table is the command's output
    assert "S: 4x1 warps, 16x64 per warp, 1x8 mma tiles, 32 registers per tile" in out
    assert "m: a row vector of 64 rows, 2 registers per tile" in out
    assert "Qs: rows padded by 8 elements (chosen by the compiler)" in out
