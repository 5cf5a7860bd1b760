"""Device functions that take fragments (spec section 14; transpile/checks/device_calls.py InlineCalls): inlined
at each call. FlashAttention's online softmax as a device function equals the sample's inline step
bit for bit; tload, tmma and tstore in a function called twice on fragments of other shapes match
NumPy (float64 references) at ragged sizes, with and without check_bounds; generated programs that
move statements, loops and conditions into such functions equal their inline form and the NumPy
model; NVRTC compiles them for sm_80 and sm_90 with no warnings and no spills; misuse is a located
error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source
from tests.conftest import sample_of
from tests.language.tensor_cores.frag_expr_gen import model
from tests.language.tensor_cores.frag_inline_gen import InlineGen
from tests.transpile.checks.catalog import Case, check_catalog_case

SOFTMAX = """
@device
def qk[T](S: mut frag f32[BM, BN], Qf: frag T[BM, K], Ks: T[BN, K]):
    S[:] = 0.0
    tmma(S, Qf, Ks, trans_b=True)

@device
def pv[T](O: mut frag f32[BM, D], S: frag f32[BM, BN], P: mut frag T[BM, BN], Vs: T[BN, D]):
    P[:] = S
    tmma(O, P, Vs)

@device
def online_softmax(S: mut frag f32[BM, BN], Of: mut frag f32[BM, D], m: mut frag f32[BM], l: mut frag f32[BM],
                   m_new: mut frag f32[BM], alpha: mut frag f32[BM], j: i32, n: i32, m0: i32, qk_scale: f32,
                   causal: i32):
    S[:] = S * qk_scale if j + col_index() < n and (causal == 0 or j + col_index() <= m0 + row_index()) else -inf
    m_new[:] = max(m, tmax(S, axis=1))
    S[:] = exp2(S - m_new[:, None])
    alpha[:] = exp2(m - m_new)
    l[:] = l * alpha + tsum(S, axis=1)
    Of[:] = Of * alpha[:, None]
    m[:] = m_new

"""
STEP = """        S[:] = 0.0
        tmma(S, Qf, Ks, trans_b=True)
        S[:] = S * qk_scale if j + col_index() < N and (causal == 0 or j + col_index() <= m0 + row_index()) else -inf
        m_new[:] = max(m, tmax(S, axis=1))
        S[:] = exp2(S - m_new[:, None])
        alpha[:] = exp2(m - m_new)
        l[:] = l * alpha + tsum(S, axis=1)
        Of[:] = Of * alpha[:, None]
        m[:] = m_new
        P[:] = S
        tmma(Of, P, Vs)
"""
CALL = """        qk(S, Qf, Ks)
        online_softmax(S, Of, m, l, m_new, alpha, j, N, m0, qk_scale, causal)
        pv(Of, S, P, Vs)
"""


def flash_device_form() -> str:
    """samples/flash_attention.tsr with its K/V step as calls of device functions: S = Q K^T (generic
    over the operand type), the online softmax, and O += P V with the conversion P = S."""
    sample = Path(sample_of("flash_attention")).read_text()
    assert STEP in sample, "the sample's step changed: update STEP"
    return SOFTMAX + sample.replace(STEP, CALL)


def _attention(src: str, t: str, hd: int, causal: int, check_bounds: bool) -> tuple[np.ndarray, np.ndarray]:
    heads, n = 2, 100  # ragged: the second blocks of queries and keys are partial
    rng = np.random.default_rng(hd + causal)
    dt = np.float16 if t == "f16" else np.float32
    q, k, v = (rng.standard_normal((heads, n, hd)).astype(dt) for _ in range(3))
    if t == "bf16":  # the bf16 values as float32, for the reference
        q, k, v = (x.view(np.uint32) & np.uint32(0xFFFF0000) for x in (q, k, v))
        q, k, v = (x.view(np.float32) for x in (q, k, v))
        args = [(x.view(np.uint32) >> 16).astype(np.uint16) for x in (q, k, v)]
    else:
        args = [q, k, v]
    o = np.zeros_like(args[0])
    mod = tessera.compile(src, backend="cpu", check_bounds=check_bounds, path="fa.tsr")
    mod.flash_attention(*args, o, float(1 / np.sqrt(hd)), causal=causal, HD=hd, grid=(2, heads), T=t)
    out = o.astype(np.float64) if t == "f16" else (o.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    s = np.einsum("hnd,hmd->hnm", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(hd)
    if causal:
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return out, np.einsum("hnm,hmd->hnd", p / p.sum(-1, keepdims=True), v.astype(np.float64))


@pytest.mark.parametrize(("t", "hd", "causal", "check_bounds"),
                         [("f16", 64, 0, False), ("f16", 64, 1, True), ("bf16", 128, 1, False), ("bf16", 64, 0, True)])
def test_flash_attention_with_a_device_function_equals_the_inline_step(t: str, hd: int, causal: int,
                                                                       check_bounds: bool) -> None:
    device, want = _attention(flash_device_form(), t, hd, causal, check_bounds)
    inline, _ = _attention(Path(sample_of("flash_attention")).read_text(), t, hd, causal, check_bounds)
    np.testing.assert_array_equal(device, inline)
    np.testing.assert_allclose(device, want, atol=2e-2, rtol=2e-2)


TWICE = """
@device
def product(acc: mut frag f32[R, C], a: mut frag f16[R, K], As: f16[R, K], Bs: f16[K, C]):
    tload(a, As)
    acc[:] = 0.0
    tmma(acc, a, Bs)

@device
def softmax_rows(acc: mut frag f32[R, C], mx: mut frag f32[R], out: mut f32[m, n], sums: mut f32[m], r0: i32):
    mx[:] = tmax(acc, axis=1)
    acc[:] = exp(acc - mx[:, None])
    mx[:] = tsum(acc, axis=1)
    acc[:] = acc / mx[:, None]
    tstore(out[r0:r0 + R, 0:C], acc)
    tstore(sums[r0:r0 + R], mx)

@device
def both(acc: mut frag f32[R, C], a: mut frag f16[R, K], mx: mut frag f32[R], As: f16[R, K], Bs: f16[K, C],
         out: mut f32[m, n], sums: mut f32[m], r0: i32):
    product(acc, a, As, Bs)
    softmax_rows(acc, mx, out, sums, r0)

@kernel tile[(128,)]
def twice(A: f16[M, 32], B: f16[32, 32], B2: f16[32, 64], Y: mut f32[M, 32], Y2: mut f32[M, 64], L: mut f32[M],
          L2: mut f32[M]):
    As = tshared.alloc(f16[64, 32])
    Bs = tshared.alloc(f16[32, 32])
    B2s = tshared.alloc(f16[32, 64])
    a = tfrag(f16[64, 32])
    acc = tfrag(f32[64, 32])
    acc2 = tfrag(f32[64, 64])
    mx = tfrag(f32[64])
    r0 = group_id(0) * 64
    tcopy(As, A[r0:r0 + 64, 0:32])
    tcopy(Bs, B[0:32, 0:32])
    tcopy(B2s, B2[0:32, 0:64])
    tbarrier()
    product(acc, a, As, Bs)
    softmax_rows(acc, mx, Y, L, r0)
    both(acc2, a, mx, As, B2s, Y2, L2, r0)
"""


@pytest.mark.parametrize("check_bounds", [False, True])
def test_device_functions_called_on_fragments_of_two_shapes_and_nested(check_bounds: bool) -> None:
    m = 100
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((m, 32)) / 4).astype(np.float16)
    b, b2 = (rng.standard_normal((32, n)).astype(np.float16) / 4 for n in (32, 64))
    y, y2, lv, lv2 = np.zeros((m, 32), np.float32), np.zeros((m, 64), np.float32), np.zeros(m, np.float32), \
        np.zeros(m, np.float32)
    mod = tessera.compile(TWICE, backend="cpu", check_bounds=check_bounds, path="twice.tsr")
    mod.twice(a, b, b2, y, y2, lv, lv2, grid=(2,))
    for got, sums, bb in ((y, lv, b), (y2, lv2, b2)):
        s = a.astype(np.float64) @ bb.astype(np.float64)
        e = np.exp(s - s.max(1)[:, None])
        np.testing.assert_allclose(sums, e.sum(1), rtol=1e-4)
        np.testing.assert_allclose(got, e / e.sum(1)[:, None], rtol=1e-4, atol=1e-6)


# ---- the random differential test (tests/language/tensor_cores/frag_inline_gen.py) ----

def run_inline_generated(seed: int, check_bounds: bool) -> None:
    inline, device, steps = InlineGen(seed).program(6)
    m, n = 100, 30
    rng = np.random.default_rng(seed)
    x = rng.uniform(-4, 4, (m, n)).astype(np.float32)
    b, c = rng.uniform(-4, 4, n).astype(np.float32), rng.uniform(-4, 4, m).astype(np.float32)
    outs = []
    for src in (inline, device):
        y, r = np.zeros((m, n), np.float32), np.zeros(m, np.float32)
        tessera.compile(src, backend="cpu", check_bounds=check_bounds, path=f"inl{seed}.tsr").gen(x, b, c, y, r, 1,
                                                                                                 grid=(2,))
        outs.append((y, r))
    np.testing.assert_array_equal(outs[1][0], outs[0][0], err_msg=device)
    np.testing.assert_array_equal(outs[1][1], outs[0][1], err_msg=device)
    want_y, want_r = model(steps, x, b, c)
    np.testing.assert_allclose(outs[1][0], want_y, rtol=1e-4, atol=1e-3, err_msg=device)
    np.testing.assert_allclose(outs[1][1], want_r, rtol=1e-4, atol=1e-3, err_msg=device)


@pytest.mark.parametrize("seed", range(4))
def test_generated_device_function_programs_equal_their_inline_form(seed: int) -> None:
    run_inline_generated(seed, check_bounds=seed % 2 == 1)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_device_function_forms_compile_with_nvrtc_without_spills(arch: str) -> None:
    sources = [(flash_device_form(), {"T": "f16", "HD": 128, "causal": 1}),
               (flash_device_form(), {"T": "bf16", "HD": 64}), (TWICE, {})]
    sources += [(InlineGen(seed).program(6)[1], {}) for seed in range(2)]
    for src, consts in sources:
        result = compile_source(SourceFile("dev.tsr", src), options=CompileOptions(arch=arch),
                                variants={"flash_attention": consts} if consts else None)
        nv = compile_cuda(result.cuda, name="dev.cu", arch=arch)
        assert nv.warnings == (), (nv.warnings, src)
        for k in result.kernels:
            res = nv.kernel(k.c_name)
            assert res.spill_stores == 0 and res.spill_loads == 0, (res, src)


# ---- misuse ----

def _kernel(body: str) -> str:
    return ("@kernel tile[(128,)]\ndef k(X: f32[M, N]):\n    S = tfrag(f32[64, 32], 0.0)\n    v = tfrag(f32[64], 0.0)\n"
            "    H = tfrag(f16[64, 32], 0.0)\n" + body)


SCALE = "@device\ndef scale(S: mut frag f32[BM, BN], x: f32):\n    S[:] = S * x\n\n"
FIXED = "@device\ndef fixed(S: mut frag f32[64, 64]):\n    S[:] = 0.0\n\n"
CATALOG = [
    Case("frag-param-rank", SCALE + _kernel("    scale(v, 1.0)\n"), 10, 11,
         "argument 'S' of scale() has 2 dimensions (mut frag f32[BM, BN]), but 'v' is a [64] fragment"),
    Case("frag-param-element-type", SCALE + _kernel("    scale(H, 1.0)\n"), 10, 11,
         "argument 'S' of scale() is a fragment of f32 (mut frag f32[BM, BN]), but 'H' holds f16"),
    Case("frag-param-extent", FIXED + _kernel("    fixed(S)\n"), 10, 11,
         "dimension 1 of argument 'S' of fixed() is 64 (mut frag f32[64, 64]), but 'S' is a [64, 32] fragment"),
    Case("frag-param-not-a-fragment", SCALE + _kernel("    scale(X, 1.0)\n"), 10, 11,
         "argument 'S' of scale() is a fragment (mut frag f32[BM, BN]): pass a fragment's name, not 'X'"),
    Case("frag-function-as-a-value", SCALE + _kernel("    y = scale(S, 1.0)\n"), 10, 9,
         "scale() takes fragments and is inlined: call it as a statement"),
    Case("frag-param-read-only-written", "@device\ndef ro(S: frag f32[BM, BN]):\n    S[:] = 0.0\n\n" + _kernel(
        "    ro(S)\n"), 3, 5, "'S' is a read-only fragment parameter of ro()", note="parameter here"),
    Case("frag-param-read-only-passed-as-mut", SCALE + "@device\ndef ro(S: frag f32[BM, BN]):\n    scale(S, 2.0)\n\n"
         + _kernel("    ro(S)\n"), 7, 11, "'S' is a read-only fragment parameter of ro(), but argument 'S' of scale() "
         "is mut", note="parameter here"),
    Case("frag-function-recursive", "@device\ndef rec(S: mut frag f32[64, 32]):\n    rec(S)\n\n" + _kernel(
        "    rec(S)\n"), 3, 5, "rec() takes fragments and is inlined, so it cannot call itself (rec -> rec)",
         note="in rec(), inlined by this call"),
    Case("frag-function-returns", "@device\ndef r(S: mut frag f32[64, 32]) -> f32:\n    return 1.0\n\n" + _kernel(
        "    r(S)\n"), 2, 35, "'r' takes fragments, so it is inlined and returns nothing"),
    Case("frag-function-declares-a-fragment", "@device\ndef d(S: mut frag f32[64, 32]):\n    U = tfrag(f32[64], 0.0)\n"
         "\n" + _kernel("    d(S)\n"), 3, 9, "a device function cannot declare fragments", note="inlined by this call"),
    Case("frag-function-break-outside-its-loop", "@device\ndef d(S: mut frag f32[64, 32]):\n    break\n\n" + _kernel(
        "    for i in range(2):\n        d(S)\n"), 3, 5, "'break' outside a loop"),
    Case("frag-function-free-name", "@device\ndef d(S: mut frag f32[64, 32]):\n    S[:] = S * x0\n\n" + _kernel(
        "    x0 = 2.0\n    d(S)\n"), 3, 16, "undefined name 'x0'"),
    Case("frag-generic-binding-differs", "@device\ndef g[T](S: mut frag f32[64, 32], H: frag T[64, 32], s: T[64, 32]):"
         "\n    S[:] = H\n\n" + _kernel("    s = tshared.alloc(f32[64, 32])\n    g(S, H, s)\n"), 11, 13,
         "type parameter 'T' is f16 from argument 'H' but f32 from argument 's'"),
    Case("frag-function-barrier-under-a-tile-condition", "@device\ndef sync(S: mut frag f32[64, 32]):\n"
         "    tbarrier()\n\n" + _kernel("    if tile_id(0) < 3:\n        sync(S)\n"), 3, 5, "tbarrier"),
    Case("frag-function-tile-dependent-argument", "@device\ndef add(S: mut frag f32[64, 32], x: f32):\n"
         "    S[:] = S + x\n\n" + _kernel("    add(S, f32(tile_id(0)))\n"), 3, 16,
         "'x' differs between tiles, but a whole-fragment statement computes each element"),
    Case("frag-param-on-a-kernel", "@kernel tile[(128,)]\ndef k(S: mut frag f32[64, 32]):\n    pass\n", 2, 7,
         "only @device functions take fragments"),
    Case("frag-extent-against-an-array", "@device\ndef f(S: mut frag f32[BM, BN], s: f32[BN]):\n    S[:] = 0.0\n\n"
         + _kernel("    s = tshared.alloc(f32[16])\n    f(S, s)\n"), 11, 10,
         "the extent 'BN' of f() is 32 from a fragment, but 's' (argument 's') has the extent 16 there"),
]


@pytest.mark.parametrize("case", CATALOG, ids=lambda c: c.id)
def test_catalog(case: Case, tmp_path, capsys) -> None:
    check_catalog_case(case, tmp_path, capsys)
