"""TF32 inputs of `tmma` on f32 arrays (spec section 12): each operand element is converted as
`cvt.rna.tf32.f32` converts it, element by element, compared bit for bit with a model written from
the PTX ISA's definition (`tf32`: exact arithmetic, not the emulation's bit trick) for NaN,
infinity, denormals, ties and the largest values. Every lane's A and B registers are reached (a
value in one operand element shows in a whole row or column of C). A planted error in the CPU
backend's conversion (device/mma.cuh `tsr_tf32`) must be caught. Where there is a GPU the same
comparison runs on the tensor cores themselves."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tessera
from tessera.api import Module
from tessera.runtime.host import library as cpu

pytestmark = pytest.mark.usefixtures("shared_cache")


def tf32(x: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32 (PTX ISA): a finite f32 rounded to the nearest value with 10 fraction bits
    (TF32's exponent range is f32's, its denormals step by 2**-136), ties away from zero; past the
    largest TF32 value, infinity. Infinity stays; a NaN keeps its sign, exponent and 10 high
    fraction bits, the 13 low bits cleared, as the hardware does (a NaN whose payload lies only in
    those bits becomes an infinity)."""
    x = np.asarray(x, np.float32)
    with np.errstate(invalid="ignore"):  # a signalling NaN, widened
        v = x.astype(np.float64)
    mag = np.abs(v)
    finite = np.isfinite(v)
    _, e2 = np.frexp(np.where(finite, mag, 1.0))           # mag = f * 2**e2, 0.5 <= f < 1
    ulp = np.ldexp(1.0, np.maximum(e2 - 1, -126) - 10)     # 10 fraction bits below the leading one
    rounded = np.floor(np.where(finite, mag, 0.0) / ulp + 0.5) * ulp  # exact: ties go up, away from 0
    out = np.copysign(np.where(rounded >= 2.0 ** 128, np.inf, rounded), v)
    out = np.where(np.isinf(v), v, out).astype(np.float32)
    nan = np.isnan(x)
    out[nan] = (x[nan].view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    return out


def _bits(*words: int) -> np.ndarray:
    return np.array(words, np.uint32).view(np.float32)


def test_the_model_on_values_worked_out_by_hand() -> None:
    cases = {
        0x3F800FFF: 0x3F800000,  # below the tie: down
        0x3F801000: 0x3F802000,  # a tie with an even kept part: away from zero (to even would stay)
        0xBF801000: 0xBF802000,  # the same, negative: away from zero
        0x3F803000: 0x3F804000,  # a tie with an odd kept part
        0x3FFFF000: 0x40000000,  # a tie that carries into the exponent
        0x00000FFF: 0x00000000,  # a denormal to zero
        0x00001000: 0x00002000,  # the smallest denormal tie: up
        0x807FF000: 0x80800000,  # the largest denormals round up to the smallest normal
        0x7F7FEFFF: 0x7F7FE000,  # below the largest TF32 value's tie
        0x7F7FF000: 0x7F800000,  # its tie: to infinity
        0xFF800000: 0xFF800000,  # -inf stays
        0x7FC00000: 0x7FC00000,  # a quiet NaN stays
        0x7FFFFFFF: 0x7FFFE000,  # a NaN loses its low 13 bits (no carry into the sign)
        0x7F800001: 0x7F800000,  # a signalling NaN with its payload in those bits: +inf
        0xFF801FFF: 0xFF800000,  # ... and with the sign: -inf
        0x7F802000: 0x7F802000,  # a payload bit above them: still a NaN
    }
    got = tf32(_bits(*cases)).view(np.uint32)
    assert [hex(g) for g in got] == [hex(w) for w in cases.values()]


# ---- the conversion of every operand element, lane by lane -------------------------------------------

KERNELS = """
@kernel tile[(32,)]
def a_side(A: f32[M, K], B: f32[K, N], C: mut f32[M, N]):
    As = tshared.alloc(f32[128, 8])
    Bs = tshared.alloc(f32[8, 8])
    acc = tfrag(f32[128, 8], 0.0)
    tcopy(As, A[0:128, 0:8])
    tcopy(Bs, B[0:8, 0:8])
    tbarrier()
    tmma(acc, As, Bs)
    tstore(C[0:128, 0:8], acc)

@kernel tile[(32,)]
def b_side(A: f32[M, K], B: f32[K, N], C: mut f32[M, N]):
    As = tshared.alloc(f32[16, 8])
    Bs = tshared.alloc(f32[8, 64])
    acc = tfrag(f32[16, 64], 0.0)
    tcopy(As, A[0:16, 0:8])
    tcopy(Bs, B[0:8, 0:64])
    tbarrier()
    tmma(acc, As, Bs)
    tstore(C[0:16, 0:64], acc)

@kernel tile[(32,)]
def bt_side(A: f32[M, K], Bt: f32[N, K], C: mut f32[M, N]):
    As = tshared.alloc(f32[16, 8])
    Bs = tshared.alloc(f32[64, 8])
    acc = tfrag(f32[16, 64], 0.0)
    tcopy(As, A[0:16, 0:8])
    tcopy(Bs, Bt[0:64, 0:8])
    tbarrier()
    tmma(acc, As, Bs, trans_b=True)
    tstore(C[0:16, 0:64], acc)
"""

SPECIAL = [0x00000000, 0x80000000, 0x00000001, 0x00000FFF, 0x00001000, 0x00001FFF, 0x00003000, 0x807FF000,
           0x007FFFFF, 0x00800000, 0x3F800FFF, 0x3F801000, 0xBF801000, 0x3F803000, 0x3F801001, 0x3FFFF000,
           0x7F7FEFFF, 0x7F7FF000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
           0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001, 0xFF800FFF, 0x7F801000, 0x7F801FFF, 0x7F802000, 0xFFBFFFFF]


def _values(count: int, seed: int, special: bool = True) -> np.ndarray:
    """Bit patterns: the special ones (unless not `special`), then random ties, near-ties,
    denormals, NaN payloads and any."""
    rng = np.random.default_rng(seed)
    high = rng.integers(0, 2 ** 19, count, dtype=np.uint32) << np.uint32(13)
    low = rng.choice(np.array([0x1000, 0x0FFF, 0x1001, 0x1FFF, 0x0001], np.uint32), count)
    kind = rng.integers(0, 5, count)
    words = np.where(kind == 0, high | low, rng.integers(0, 2 ** 32, count, dtype=np.uint32))
    words = np.where(kind == 1, (high & np.uint32(0x807FFFFF)) | low, words)         # denormals
    words = np.where(kind == 2, np.uint32(0x7F800000) | (high & np.uint32(0x80000000)) | low, words)  # NaNs
    if special:
        words[:len(SPECIAL)] = SPECIAL[:count]
    return words.astype(np.uint32).view(np.float32)


def _mismatches(mod: Module, seed: int = 0) -> list[str]:
    """Each A element of a 128 x 8 tile (row i holds its value in column (i % 16 + i // 16) % 8, so
    that every register of every lane carries one), then each B element of 8 x 64 tiles (column j
    in row (j % 8 + j // 8) % 8), as B[K, N] and as Bt[N, K]; the other elements are 0 and the
    other operand is 1, so an output row or column is the value as the tensor core takes it. Seed 0
    starts with the special values; others draw only random ones."""
    out = []
    va = _values(128, 3 * seed + 1, special=seed == 0)
    a = np.zeros((128, 8), np.float32)
    a[np.arange(128), (np.arange(128) % 16 + np.arange(128) // 16) % 8] = va
    c = np.zeros((128, 8), np.float32)
    mod.a_side(a, np.ones((8, 8), np.float32), c, grid=1)
    out += _compare(va, c, axis=1, what="A")
    for name, k in (("b_side", 2), ("bt_side", 3)):
        vb = _values(64, 3 * seed + k, special=seed == 0)
        b = np.zeros((8, 64), np.float32)
        b[(np.arange(64) % 8 + np.arange(64) // 8) % 8, np.arange(64)] = vb
        c = np.zeros((16, 64), np.float32)
        getattr(mod, name)(np.ones((16, 8), np.float32), b if name == "b_side" else np.ascontiguousarray(b.T), c, grid=1)
        out += _compare(vb, c, axis=0, what=name)
    return out


def _compare(values: np.ndarray, c: np.ndarray, axis: int, what: str) -> list[str]:
    want = tf32(values)
    got = c if axis == 1 else c.T  # one row per value
    bad = []
    for i, (v, w) in enumerate(zip(values, want)):
        row = got[i]
        same = np.isnan(row) if np.isnan(w) else row == w
        if not same.all():
            bad.append(f"{what} value {i}: {v.view(np.uint32):#010x} gave {row[~same][0]!r}, the ISA {w!r}")
    return bad


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_each_operand_element_converts_as_cvt_rna_tf32_f32(backend: str) -> None:
    assert _mismatches(tessera.compile(KERNELS, backend=backend, path="tf32.tsr")) == []


PLANTED = {
    # the old emulation: NaN and infinity kept whole (a NaN with a low payload stays a NaN)
    "nan-kept": ("return u & 0xffffe000u;", "return (u & 0x7f800000u) == 0x7f800000u ? u : u & 0xffffe000u;"),
    # ties to even instead of away from zero
    "ties-to-even": ("u += 0x1000u;", "u += 0xfffu + ((u >> 13) & 1u);"),
    # truncation
    "truncated": ("u += 0x1000u;", "u += 0u;"),
    # denormals flushed to zero
    "denormals-flushed": ("return u & 0xffffe000u;", "return (u & 0x7f800000u) ? u & 0xffffe000u : u & 0x80000000u;"),
    # the rounding bit added to NaN too (a carry into the sign)
    "nan-rounded": ("if ((u & 0x7f800000u) != 0x7f800000u) u += 0x1000u;", "u += 0x1000u;"),
}


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_a_planted_error_in_the_conversion_is_caught(bug: str, monkeypatch) -> None:
    old, new = PLANTED[bug]
    real = cpu.build_library

    def planted(cuda: str, kernels):
        assert old in cuda
        return real(cuda.replace(old, new), kernels)

    monkeypatch.setattr(cpu, "build_library", planted)
    # (a comment line more: other C, so that the library of the clean build is not reused)
    assert _mismatches(tessera.compile(f"# planted {bug}\n" + KERNELS, backend="cpu", path="tf32.tsr"))


if __name__ == "__main__":  # a longer run: python -m tests.language.tensor_cores.test_tf32 N (random values of N seeds)
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    kernels = tessera.compile(KERNELS, backend="cpu", path="tf32.tsr")
    bad = [m for seed in range(1, runs + 1) for m in _mismatches(kernels, seed)]
    print(f"{runs * 256} random values, {len(bad)} differ from the model", *bad[:20], sep="\n")
