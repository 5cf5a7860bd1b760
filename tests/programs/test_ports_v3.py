"""Kernels ported from Triton's tutorials, the CUDA samples and llm.c, written from the contract
(version 3) alone, as an outside user writes them: each runs on the CPU backend, with and without
check_bounds, at ragged sizes, against a NumPy float64 reference. The .tsr texts are in ports_v3/;
test_ports_v3_cli.py compiles them with NVRTC and feeds malformed variants to tesserac."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

import tessera

pytestmark = pytest.mark.usefixtures("shared_cache")

PORTS = Path(__file__).parent / "ports_v3"
BOUNDS = pytest.mark.parametrize("check_bounds", [False, True], ids=["plain", "bounds"])


@functools.cache
def load(name: str, check_bounds: bool):  # noqa: ANN201 - a tessera module
    return tessera.load(PORTS / f"{name}.tsr", backend="cpu", check_bounds=check_bounds)


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def close(got: np.ndarray, want: np.ndarray, tol: float) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol)


@BOUNDS
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_vector_add(check_bounds: bool, dtype: type) -> None:
    n = 1001
    r = rng(1)
    x, y = r.standard_normal(n).astype(dtype), r.standard_normal(n).astype(dtype)
    out = np.zeros(n, dtype)
    load("vector_add", check_bounds).vadd(x, y, out, grid=(n + 511) // 512)
    np.testing.assert_array_equal(out, x + y)


@BOUNDS
def test_broadcasting_map(check_bounds: bool) -> None:
    r = rng(2)
    X = r.standard_normal((37, 29)).astype(np.float32)
    rowscale = r.standard_normal((37, 1)).astype(np.float32)
    bias = r.standard_normal(29).astype(np.float32)
    Y = np.zeros_like(X)
    load("vector_add", check_bounds).bias_scale_relu(X, rowscale, bias, Y)
    close(Y, np.maximum(X.astype(np.float64) * rowscale + bias, 0.0), 1e-6)


@BOUNDS
def test_fused_softmax(check_bounds: bool) -> None:
    x = rng(3).standard_normal((5, 300)).astype(np.float32) * 4
    y = np.zeros_like(x)
    load("softmax", check_bounds).softmax_rows(x, y, grid=5)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    close(y, e / e.sum(axis=1, keepdims=True), 1e-6)


@BOUNDS
def test_softmax_of_long_rows_through_two_pipelines(check_bounds: bool) -> None:
    x = rng(26).standard_normal((3, 1500)).astype(np.float32) * 3
    y = np.zeros_like(x)
    load("softmax", check_bounds).softmax_long(x, y, grid=3)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    close(y, e / e.sum(axis=1, keepdims=True), 1e-6)


@BOUNDS
def test_matmul_leaky_relu_f16(check_bounds: bool) -> None:
    r = rng(4)
    M, N, K = 70, 90, 72
    A = r.standard_normal((M, K)).astype(np.float16)
    B = r.standard_normal((K, N)).astype(np.float16)
    bias = r.standard_normal(N).astype(np.float32)
    C = np.zeros((M, N), np.float16)
    load("matmul_leaky", check_bounds).matmul_leaky(A, B, bias, C, 0.1, grid=(2, 2))
    ref = A.astype(np.float64) @ B.astype(np.float64) + bias
    close(C, np.where(ref >= 0, ref, 0.1 * ref), 3e-2)


def test_matmul_leaky_relu_bf16_from_torch() -> None:
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(5)
    M, N, K = 65, 64, 48
    A = torch.randn(M, K, generator=g).to(torch.bfloat16)
    B = torch.randn(K, N, generator=g).to(torch.bfloat16)
    bias = torch.randn(N, generator=g)
    C = torch.zeros(M, N, dtype=torch.bfloat16)
    load("matmul_leaky", False).matmul_leaky(A, B, bias, C, 0.2, grid=(1, 2), STAGES=2)
    ref = A.double().numpy() @ B.double().numpy() + bias.double().numpy()
    close(C.float().numpy(), np.where(ref >= 0, ref, 0.2 * ref), 1e-1)


def hash32(v: np.ndarray) -> np.ndarray:
    x = v.astype(np.uint32)
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
    return x


@BOUNDS
def test_low_memory_dropout(check_bounds: bool) -> None:
    n, p, seed = 1000, 0.3, 1234567
    x = rng(6).standard_normal(n).astype(np.float32)
    out = np.full(n, 7.0, np.float32)
    load("dropout", check_bounds).dropout(x, out, p, np.uint32(seed), grid=4)
    with np.errstate(over="ignore"):
        offs = np.arange(n, dtype=np.uint32) ^ (np.uint32(seed) * np.uint32(0x9E3779B9))
    u = (hash32(offs) >> np.uint32(8)).astype(np.float64) / 16777216.0
    want = np.where(u > p, x.astype(np.float64) / (1 - np.float32(p)), 0.0)
    close(out, want, 1e-6)
    assert 0.2 < (out == 0).mean() < 0.4


@BOUNDS
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_layer_norm_forward(check_bounds: bool, dtype: type) -> None:
    r = rng(7)
    M, N = 6, 333
    X = (r.standard_normal((M, N)) * 3 + 1).astype(dtype)
    W, B = r.standard_normal(N).astype(np.float32), r.standard_normal(N).astype(np.float32)
    Y = np.zeros((M, N), dtype)
    mean, rstd = np.zeros(M, np.float32), np.zeros(M, np.float32)
    load("layer_norm", check_bounds).layer_norm_fwd(X, W, B, Y, mean, rstd, 1e-5, grid=M)
    x = X.astype(np.float64)
    mu, var = x.mean(axis=1), x.var(axis=1)
    close(mean, mu, 1e-5)
    close(rstd, 1 / np.sqrt(var + 1e-5), 1e-5)
    close(Y, (x - mu[:, None]) / np.sqrt(var[:, None] + 1e-5) * W + B, 1e-5 if dtype == np.float32 else 2e-2)


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
                        causal: bool) -> tuple[np.ndarray, np.ndarray]:
    s = q.astype(np.float64) @ k.astype(np.float64).T * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape, bool)), s, -np.inf)
    mx = s.max(axis=1, keepdims=True)
    p = np.exp(s - mx)
    return p / p.sum(axis=1, keepdims=True) @ v.astype(np.float64), (mx + np.log(p.sum(axis=1, keepdims=True)))[:, 0]


@BOUNDS
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_flash_attention(check_bounds: bool, causal: bool) -> None:
    r = rng(8)
    N, D = 100, 64
    q, k, v = (r.standard_normal((N, D)).astype(np.float16) for _ in range(3))
    out, lse = np.zeros((N, D), np.float32), np.zeros(N, np.float32)
    scale = D ** -0.5
    load("attention", check_bounds).attention_fwd(q, k, v, out, lse, scale, CAUSAL=causal, grid=2)
    want, want_lse = attention_reference(q, k, v, scale, causal)
    close(out, want, 2e-2)
    close(lse, want_lse, 2e-2)


@BOUNDS
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_transpose_padded_tiles(check_bounds: bool, dtype: type) -> None:
    A = rng(9).standard_normal((45, 70)).astype(dtype)
    B = np.zeros((70, 45), dtype)
    load("transpose", check_bounds).transpose(A, B, grid=(3, 2))
    np.testing.assert_array_equal(B, A.T)


@BOUNDS
def test_histogram_shared_atomics(check_bounds: bool) -> None:
    data = rng(10).integers(0, 256, 5000).astype(np.uint8)
    bins = np.zeros(100, np.uint32)
    load("histogram", check_bounds).histogram(data, bins, 100, grid=4)
    np.testing.assert_array_equal(bins, np.bincount(data % 100, minlength=100))


@BOUNDS
def test_blelloch_scan(check_bounds: bool) -> None:
    n = 600
    x = rng(11).integers(-50, 50, n).astype(np.int32)
    groups = (n + 255) // 256
    y, sums = np.zeros(n, np.int32), np.zeros(groups, np.int32)
    load("scan", check_bounds).blelloch(x, y, sums)
    for g in range(groups):
        part = x[g * 256:(g + 1) * 256]
        np.testing.assert_array_equal(y[g * 256:(g + 1) * 256], np.cumsum(part) - part)
        assert sums[g] == part.sum()


@BOUNDS
def test_warp_scan(check_bounds: bool) -> None:
    n = 700
    x = rng(12).integers(-8, 8, n).astype(np.float32)
    y = np.zeros(n, np.float32)
    load("scan", check_bounds).warp_scan(x, y, grid=3)
    want = np.concatenate([np.cumsum(x[g:g + 256]) for g in range(0, n, 256)])
    np.testing.assert_array_equal(y, want)


@BOUNDS
def test_shuffle_reductions(check_bounds: bool) -> None:
    x = rng(13).standard_normal(10001).astype(np.float32)
    out = np.zeros(1, np.float32)
    mod = load("reduce", check_bounds)
    mod.reduce_sum(x, out, grid=3)
    close(out[0], x.astype(np.float64).sum(), 1e-3)
    bits = np.zeros(1, np.uint32)
    mod.absmax(x, bits, grid=2)
    assert bits.view(np.float32)[0] == np.abs(x).max()


@BOUNDS
def test_stencils_with_halos(check_bounds: bool) -> None:
    H, W = 37, 41
    A = rng(14).standard_normal((H, W)).astype(np.float32)
    P = np.pad(A.astype(np.float64), 1)
    mod = load("stencil", check_bounds)
    out = np.zeros_like(A)
    mod.jacobi(A, out, 0.5, 0.125, grid=(3, 3))
    want = 0.5 * P[1:-1, 1:-1] + 0.125 * (P[:-2, 1:-1] + P[2:, 1:-1] + P[1:-1, :-2] + P[1:-1, 2:])
    close(out, want, 1e-6)
    w = np.array([[1, 2, 1], [2, 4, 2], [1, 2, 1]]) / 16
    conv = sum(w[dy, dx] * P[dy:dy + H, dx:dx + W] for dy in range(3) for dx in range(3))
    mod.conv3x3(A, out, grid=(3, 3))
    close(out, conv, 1e-6)


@BOUNDS
def test_sgemm_register_blocking(check_bounds: bool) -> None:
    r = rng(15)
    M, N, K = 70, 75, 37
    A, B = r.standard_normal((M, K)).astype(np.float32), r.standard_normal((K, N)).astype(np.float32)
    C = r.standard_normal((M, N)).astype(np.float32)
    want = 1.5 * (A.astype(np.float64) @ B) - 0.5 * C
    load("sgemm", check_bounds).sgemm(A, B, C, 1.5, -0.5, grid=3)
    close(C, want, 1e-4)


@BOUNDS
def test_int8_gemm_dequantized(check_bounds: bool) -> None:
    r = rng(16)
    M, N, K = 70, 66, 100
    A, Bt = r.integers(-128, 128, (M, K)).astype(np.int8), r.integers(-128, 128, (N, K)).astype(np.int8)
    sa, sb = r.random(M).astype(np.float32), r.random(N).astype(np.float32)
    C, Ci = np.zeros((M, N), np.float32), np.zeros((M, N), np.int32)
    load("int8_gemm", check_bounds).int8_gemm(A, Bt, sa, sb, C, Ci, grid=(2, 2))
    exact = A.astype(np.int64) @ Bt.astype(np.int64).T
    np.testing.assert_array_equal(Ci, exact)
    close(C, exact * sa[:, None].astype(np.float64) * sb[None, :], 1e-2)


def test_rms_norm_bf16_llmc() -> None:
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(17)
    BT, C = 7, 300
    x = torch.randn(BT, C, generator=g).to(torch.bfloat16)
    w = torch.randn(C, generator=g).to(torch.bfloat16)
    out = torch.zeros(BT, C, dtype=torch.bfloat16)
    for check_bounds in (False, True):
        load("rms_norm", check_bounds).rms_norm(x, w, out, 1e-5, grid=2)
        xd = x.double().numpy()
        want = xd / np.sqrt((xd * xd).mean(axis=1, keepdims=True) + 1e-5) * w.double().numpy()
        close(out.float().numpy(), want, 3e-2)


@BOUNDS
def test_online_softmax(check_bounds: bool) -> None:
    x = rng(18).standard_normal((5, 77)).astype(np.float32) * 5
    y = np.zeros_like(x)
    load("online_softmax", check_bounds).online_softmax(x, y, grid=3)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    close(y, e / e.sum(axis=1, keepdims=True), 1e-6)


@BOUNDS
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_argmax_rows(check_bounds: bool, dtype: type) -> None:
    x = rng(19).integers(-20, 20, (9, 100)).astype(dtype)  # many ties: the first index wins
    idx, val = np.full(9, -1, np.int32), np.zeros(9, dtype)
    load("argmax", check_bounds).argmax_rows(x, idx, val, grid=3)
    np.testing.assert_array_equal(idx, x.argmax(axis=1))
    np.testing.assert_array_equal(val, x.max(axis=1))


@BOUNDS
@pytest.mark.parametrize("K", [37, 64])
def test_batched_gemv(check_bounds: bool, K: int) -> None:
    r = rng(20)
    A, x = r.standard_normal((3, 10, K)).astype(np.float32), r.standard_normal((3, K)).astype(np.float32)
    y = r.standard_normal((3, 10)).astype(np.float32)
    want = np.einsum("bmk,bk->bm", A.astype(np.float64), x) + 0.25 * y
    load("gemv", check_bounds).batched_gemv(A, x, y, 0.25, grid=(3, 3))
    close(y, want, 1e-5)


@BOUNDS
def test_gemm_row_normalized_epilogue(check_bounds: bool) -> None:
    r = rng(21)
    M, N, K = 70, 50, 40
    A, B = r.standard_normal((M, K)).astype(np.float16), r.standard_normal((K, N)).astype(np.float16)
    Y = np.zeros((M, N), np.float32)
    load("gemm_rownorm", check_bounds).gemm_rownorm(A, B, Y, 1e-5, grid=2)
    h = A.astype(np.float64) @ B.astype(np.float64)
    close(Y, (h - h.mean(axis=1, keepdims=True)) / np.sqrt(h.var(axis=1, keepdims=True) + 1e-5), 1e-3)


@BOUNDS
def test_w8a16_gemm_dequantized_in_the_pipeline(check_bounds: bool) -> None:
    r = rng(22)
    M, N, K = 66, 70, 80
    A = r.standard_normal((M, K)).astype(np.float16)
    Wq = r.integers(-128, 128, (K, N)).astype(np.int8)
    scale = (r.random(N) / 64).astype(np.float32)
    C = np.zeros((M, N), np.float32)
    load("w8a16_gemm", check_bounds).w8a16_gemm(A, Wq, scale, C, grid=(2, 2))
    close(C, (A.astype(np.float64) @ Wq.astype(np.float64)) * scale, 1e-3)


@BOUNDS
def test_manual_double_buffering(check_bounds: bool) -> None:
    x = rng(23).standard_normal(5000).astype(np.float32)
    out = np.zeros(3, np.float32)
    load("chunk_sum", check_bounds).chunk_sum(x, out)
    chunks = [x[c:c + 512].astype(np.float64).sum() for c in range(0, 5000, 512)]
    close(out, [sum(chunks[g::3]) for g in range(3)], 1e-4)


@BOUNDS
def test_shared_memory_reuse_between_phases(check_bounds: bool) -> None:
    A = rng(24).standard_normal((64, 128)).astype(np.float32)
    out = np.zeros((128, 64), np.float32)
    load("chunk_sum", check_bounds).colsum_outer(A, out, grid=1)
    close(out, A.astype(np.float64).sum(axis=0)[:, None] * np.arange(64), 1e-4)


@BOUNDS
def test_layernorm_llmc_early_return(check_bounds: bool) -> None:
    r = rng(25)
    N, C = 7, 77
    inp = r.standard_normal((N, C)).astype(np.float32)
    w, b = r.standard_normal(C).astype(np.float32), r.standard_normal(C).astype(np.float32)
    out, mean, rstd = np.zeros_like(inp), np.zeros(N, np.float32), np.zeros(N, np.float32)
    load("layernorm_llmc", check_bounds).layernorm_llmc(inp, w, b, out, mean, rstd, grid=2)
    x = inp.astype(np.float64)
    mu, rs = x.mean(axis=1), 1 / np.sqrt(x.var(axis=1) + 1e-5)
    close(mean, mu, 1e-5)
    close(rstd, rs, 1e-5)
    close(out, (x - mu[:, None]) * rs[:, None] * w + b, 1e-5)
