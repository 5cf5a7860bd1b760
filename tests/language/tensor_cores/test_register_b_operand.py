"""tmma's second operand from registers (spec section 14: an operand fragment may be tmma's `a`
"(and `b`)" argument; passes/frag_b_operand.py stages it through a compiler-made shared array).
FlashAttention with V in registers, passed through a device function, matches NumPy on the CPU
backend for sm_80 and for sm_90a; TF32 and 8-bit products with both operands in registers are
exact to their models; NVRTC compiles them with no warnings and no spills; the staging is visible
after plan-fragments; generated kernels (regb_gen.py) equal the form with the fragment stored to
shared memory by hand, bit for bit, and their NumPy model."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source
from tests.language.tensor_cores.regb_gen import generate, inputs, model

SRC = """
@device
def pv(O: mut frag f32[BM, D], P: frag f16[BM, BN], V: frag f16[BN, D]):
    tmma(O, P, V)

@kernel tile[(128,)]
def fa(Q: f16[N, 64], K: f16[N, 64], V: f16[N, 64], Out: mut f32[N, 64], scale: f32):
    Ks = tshared.alloc(f16[64, 64])
    Vs = tshared.alloc(f16[64, 64])
    Qf = tfrag(f16[64, 64])
    Vf = tfrag(f16[64, 64])
    S = tfrag(f32[64, 64], 0.0)
    P = tfrag(f16[64, 64])
    O = tfrag(f32[64, 64], 0.0)
    m = tfrag(f32[64], -inf)
    l = tfrag(f32[64], 0.0)
    mn = tfrag(f32[64])
    m0 = group_id(0) * 64
    tload(Qf, Q[m0:m0 + 64, :])
    for j in tpipeline(0, N, 64, stages=2):
        tcopy_async(Ks, K[j:j + 64, :])
        tcopy_async(Vs, V[j:j + 64, :])
        tload(Vf, Vs)
        S[:] = 0.0
        tmma(S, Qf, Ks, trans_b=True)
        S[:] = S * scale if j + col_index() < N else -inf
        mn[:] = max(m, tmax(S, axis=1))
        S[:] = exp(S - mn[:, None])
        l[:] = l * exp(m - mn) + tsum(S, axis=1)
        O[:] = O * exp(m - mn)[:, None]
        m[:] = mn
        P[:] = S
        pv(O, P, Vf)
    O[:] = O / l[:, None]
    tstore(Out[m0:m0 + 64, :], O)

@kernel tile[(32,)]
def small(A: f32[16, 16], B: f32[16, 8], Ai: i8[16, 32], Bi: i8[32, 8], C: mut f32[16, 8], Ci: mut i32[16, 8]):
    Af = tfrag(f32[16, 16])
    Bf = tfrag(f32[16, 8])
    acc = tfrag(f32[16, 8], 0.0)
    Aq = tfrag(i8[16, 32])
    Bq = tfrag(i8[32, 8])
    acci = tfrag(i32[16, 8], 0)
    tload(Af, A[0:16, 0:16])
    tload(Bf, B[0:16, 0:8])
    tmma(acc, Af, Bf)
    tstore(C[0:16, 0:8], acc)
    tload(Aq, Ai[0:16, 0:32])
    tload(Bq, Bi[0:32, 0:8])
    tmma(acci, Aq, Bq)
    tstore(Ci[0:16, 0:8], acci)
"""


def _tf32(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_attention_with_v_in_registers_matches_numpy(arch: str) -> None:
    rng = np.random.default_rng(18)
    mod = tessera.compile(SRC, backend="cpu", check_bounds=True, arch=arch, path="regb.tsr")
    n = 100
    q, k, v = (rng.standard_normal((n, 64)).astype(np.float16) for _ in range(3))
    out = np.zeros((n, 64), np.float32)
    mod.fa(q, k, v, out, 0.125, grid=(2,))
    s = q.astype(np.float64) @ k.astype(np.float64).T * 0.125
    p = np.exp(s - s.max(1)[:, None])
    p /= p.sum(1)[:, None]
    np.testing.assert_allclose(out, p @ v.astype(np.float64), rtol=1e-2, atol=2e-3)
    a, b = rng.standard_normal((16, 16)).astype(np.float32), rng.standard_normal((16, 8)).astype(np.float32)
    ai, bi = rng.integers(-128, 128, (16, 32)).astype(np.int8), rng.integers(-128, 128, (32, 8)).astype(np.int8)
    c, ci = np.zeros((16, 8), np.float32), np.zeros((16, 8), np.int32)
    mod.small(a, b, ai, bi, c, ci, grid=1)
    np.testing.assert_allclose(c, _tf32(a).astype(np.float64) @ _tf32(b).astype(np.float64), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ci, ai.astype(np.int64) @ bi.astype(np.int64))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_register_b_without_spills(arch: str) -> None:
    result = compile_source(SourceFile("regb.tsr", SRC), options=CompileOptions(arch=arch))
    nv = compile_cuda(result.cuda, name="regb.cu", arch=arch)
    assert nv.warnings == ()
    for kern in result.kernels:
        res = nv.kernel(kern.c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0, res


def test_the_staging_is_explicit_after_plan_fragments(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    from tessera.cli.compile import run
    path = tmp_path / "regb.tsr"
    path.write_text(SRC)
    assert run([str(path), "--kernel", "fa", "--dump-after", "plan-fragments"]) == 0
    dump = capsys.readouterr().out
    staged = [line.strip() for line in dump.splitlines() if "%bstage0" in line or line.strip().startswith(
        ("barrier", "mma O"))]
    assert "buffer shared %bstage0: f16[64, 64] pad=8" in staged
    i = staged.index("fragment %bstage0[0:i32+:64, 0:i32+:64] <- Vf  # line 4")
    assert staged[i + 1:i + 4] == ["barrier  # line 4",
                                   "mma O += P[0:i32+:64, 0:i32+:64] @ %bstage0[0:i32+:64, 0:i32+:64]  # line 4",
                                   "barrier  # line 4"]


@pytest.mark.parametrize("seed", range(8))
def test_generated_register_b_equals_staging_by_hand_and_the_model(seed: int) -> None:
    case, by_hand = generate(seed), generate(seed, staged=True)
    a, b = inputs(case, seed)
    outs = []
    for c in (case, by_hand):
        out = np.zeros((32, 16), np.int32 if case.elem == "i8" else np.float32)
        tessera.compile(c.src, backend="cpu", check_bounds=True, path=f"regb{seed}.tsr").gen(a, b, out, case.loops,
                                                                                            grid=1)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1], err_msg=case.src)
    np.testing.assert_allclose(outs[0], model(case, a, b), rtol=1e-5, atol=1e-4, err_msg=case.src)
