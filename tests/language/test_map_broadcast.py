"""Broadcasting map kernels (spec section 15): the tensors a map kernel reads broadcast to the
shape of the tensors it assigns by NumPy's rules (a bias row, a per-row scale, a leading dimension
left out, a shape symbol that the launch finds equal or 1). On the CPU backend against NumPy at
ragged sizes, in both alignment variants, with check_bounds; the launch error where actual shapes do
not broadcast; the 128-bit accesses of the aligned variant (the bias row is contiguous along the
vector dimension); and a seeded random generator of broadcasting shapes against NumPy (with bodies
that use locals and tuple assignments, as `hi, lo = f(X)`). The compile
errors (shapes that cannot broadcast) are in tests/transpile/checks/test_diagnostics.py."""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest

import tessera
from tessera.base.errors import LaunchError, SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.cuda.sass import disassemble, find_nvdisasm, function_sass, instructions
from tessera.transpile.driver import compile_source
from tests.conftest import session_cache
from tests.language.test_map_kernels import args_intact, place

pytestmark = pytest.mark.usefixtures("shared_cache")

SOURCE = """
@kernel tile[(64,)] vectorize(4)
def bias_relu(X: f32[M, N], b: f32[N], s: f32[M, 1], Y: mut f32[M, N]):
    Y[:] = max(X * s + b, 0.0)

@kernel tile[(64,)] vectorize(8)
def bias_f16(X: f16[M, N], b: f16[N], Y: mut f16[M, N]):
    Y[:] = X * b + b

@kernel tile[(32,)] vectorize(4)
def cube(X: f64[B, M, N], r: f64[M, 1], c: f64[1, N], k: f64[B, 1, 1], Y: mut f64[B, M, N]):
    Y[:] = X + r * 10.0 + c * 100.0 + k * 1000.0

@kernel tile[(64,)] vectorize(4)
def any_row(X: i32[M, N], c: i32[K], Y: mut i32[M, N]):
    Y[:] = X + c * 3
"""


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "check_bounds"])
def mod(request, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TESSERA_CACHE_DIR", str(session_cache(tmp_path_factory)))
        mp.delenv("TESSERA_BACKEND", raising=False)
        yield tessera.compile(SOURCE, backend="cpu", check_bounds=request.param, path="bcast.tsr")


SIZES = [(1, 1), (3, 5), (2, 16), (5, 33), (4, 64), (3, 100)]


def _ints(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
    return rng.integers(-8, 8, shape).astype(dtype)


@pytest.mark.parametrize("misalign", [0, 1], ids=["aligned", "misaligned"])
def test_bias_row_and_row_scale(mod, launched, misalign: int) -> None:
    rng = np.random.default_rng(1)
    for m, n in SIZES:
        x, b, s = (rng.standard_normal(sh).astype(np.float32) for sh in ((m, n), (n,), (m, 1)))
        args = [place(a, misalign, 0x41 + 2 * i) for i, a in enumerate((x, b, s, np.zeros((m, n), np.float32)))]
        mod.bias_relu(*args)
        assert np.array_equal(args[3], np.maximum(x * s + b, np.float32(0))) and args_intact(args), (m, n)
        aligned = misalign == 0 and n % 16 == 0
        assert launched[-1] == "bias_relu" + ("_a16" if aligned else ""), (m, n)


@pytest.mark.parametrize("misalign", [0, 1], ids=["aligned", "misaligned"])
def test_f16_pairs_with_a_bias_row(mod, misalign: int) -> None:
    rng = np.random.default_rng(2)
    for m, n in SIZES:
        x, b = _ints(rng, (m, n), np.float16), _ints(rng, (n,), np.float16)
        args = [place(a, misalign) for a in (x, b, np.zeros((m, n), np.float16))]
        mod.bias_f16(*args)
        assert np.array_equal(args[2], x * b + b), (m, n)


def test_three_dimensions_and_size_1_dimensions(mod) -> None:
    rng = np.random.default_rng(3)
    for bb, m, n in ((1, 1, 1), (2, 3, 5), (3, 4, 16), (2, 7, 9)):
        x, r, c, k = (rng.standard_normal(sh) for sh in ((bb, m, n), (m, 1), (1, n), (bb, 1, 1)))
        y = np.zeros((bb, m, n))
        mod.cube(x, r, c, k, y)
        assert np.array_equal(y, x + r * 10.0 + c * 100.0 + k * 1000.0)


def test_a_symbol_the_launch_checks(mod) -> None:
    rng = np.random.default_rng(4)
    for m, n in SIZES:
        x = _ints(rng, (m, n), np.int32)
        for k in sorted({n, 1}):
            c = _ints(rng, (k,), np.int32)
            y = np.zeros((m, n), np.int32)
            mod.any_row(x, c, y)
            assert np.array_equal(y, x + c * 3), (m, n, k)
    with pytest.raises(LaunchError, match=r"any_row\(\): parameter 'c' has shape \(3,\), which does not broadcast to "
                                          r"the shape \(2, 5\) of 'Y'"):
        mod.any_row(np.zeros((2, 5), np.int32), np.zeros(3, np.int32), np.zeros((2, 5), np.int32))
    with pytest.raises(LaunchError, match="parameter 'c'"):  # the fast path, after a launch that bound
        mod.any_row(np.zeros((2, 5), np.int32), np.zeros(2, np.int32), np.zeros((2, 5), np.int32))


def test_the_aligned_variant_loads_the_bias_row_with_vector_accesses() -> None:
    cuda = _compiled("sm_80").cuda
    aligned = cuda.split("bias_relu_a16(")[1].split("extern \"C\"")[0]
    assert "tsr_vload(tsr_lanes_b, b + (tsr_first % N))" in aligned  # contiguous along the rows
    assert "= s[(tsr_first + tsr_e) / N]" in aligned  # the scale: one per row, gathered
    assert "N % 16 == 0" in aligned.split("\n")[0]


# ---- what NVRTC makes of it ------------------------------------------------------------------------------

@functools.cache
def _compiled(arch: str):
    return compile_source(SourceFile("bcast.tsr", SOURCE), options=CompileOptions(arch=arch))


@pytest.mark.skipif(find_nvdisasm() is None, reason="nvdisasm not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_128_bit_accesses_for_the_tensors_contiguous_along_the_vector(arch: str) -> None:
    nv = compile_cuda(_compiled(arch).cuda, name="bcast.cu", arch=arch)
    assert nv.cubin is not None and nv.warnings == ()
    text = disassemble(nv.cubin)

    def wide(name: str, opcode: str) -> int:
        ops = instructions(function_sass(text, name))
        return sum(1 for op in ops if op.split(".")[0] == opcode and "128" in op.split("."))

    assert wide("bias_relu_a16", "LDG") >= 2 and wide("bias_relu_a16", "STG") >= 1  # X and b, Y
    assert wide("bias_f16_a16", "LDG") >= 2 and wide("bias_f16_a16", "STG") >= 1


# ---- a seeded random generator of broadcasting shapes against NumPy ---------------------------------------

def _random_case(rng: random.Random) -> tuple[str, list[tuple[int, ...]], tuple[int, ...]]:
    """A map kernel over a random output shape reading three tensors of random shapes that
    broadcast to it (leading dimensions left out, some 1, some a symbol of their own), and the
    actual shapes of one launch."""
    rank = rng.randint(1, 3)
    out = tuple(rng.choice([1, 2, 3, 5, 8, 16, 17]) for _ in range(rank))
    names = ["D0", "D1", "D2"][3 - rank:]
    params, shapes = [], []
    for k in range(3):
        keep = rng.randint(0, rank)
        dims, actual = [], []
        for d, (name, extent) in enumerate(zip(names[rank - keep:], out[rank - keep:])):
            how = rng.choice(["same", "same", "one", "own"])
            if how == "same":
                dims.append(name)
                actual.append(extent)
            elif how == "one":
                dims.append("1")
                actual.append(1)
            else:  # a symbol of its own: equal to the map's extent, or 1, at launch
                dims.append(f"S{k}{d}")
                actual.append(rng.choice([extent, 1]))
        params.append(f"A{k}: f32[{', '.join(dims)}]" if dims else f"A{k}: f32[1]")
        shapes.append(tuple(actual) if dims else (1,))
    width = rng.choice([1, 2, 4, 8])
    src = (f"@kernel tile[(32,)] vectorize({width})\n"
           f"def k({', '.join(params)}, Y: mut f32[{', '.join(names)}]):\n" + rng.choice(BODIES))
    return src, shapes, out


# The same value, Y = A0 * 2.0 + A1 - A2 * A0, written directly, with locals, and with tuple
# assignments (of values and of a device function's results).
BODIES = ["    Y[:] = A0 * 2.0 + A1 - A2 * A0\n",
          "    p, q = A0, A1\n    q, p = p * 2.0 + q, A2 * p\n    Y[:] = q - p\n",
          "    s = A0 * 2.0\n    s += A1\n    Y[:] = s - A2 * A0\n"]
PAIR = "@device\ndef two(a: f32, b: f32, c: f32) -> (f32, f32):\n    return a * 2.0 + b, c * a\n\n"
BODIES.append("    u, v = two(A0, A1, A2)\n    Y[:] = u - v\n")


@pytest.mark.parametrize("mode", ["regions", "fibers"])
@pytest.mark.parametrize("seed", range(6))
def test_random_broadcasting_shapes_match_numpy(seed: int, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if mode == "fibers":  # the CPU backend's other mode (region mode is the default)
        monkeypatch.setenv("TESSERA_CPU_REGIONS", "0")
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    src, shapes, out = _random_case(rng)
    mod = tessera.compile(PAIR + src, backend="cpu", path=f"bc{seed}.tsr")
    for misalign in (0, 1):
        a0, a1, a2 = (nrng.integers(-9, 9, sh).astype(np.float32) for sh in shapes)
        y = place(np.zeros(out, np.float32), misalign)
        mod.k(place(a0, misalign), place(a1, misalign), place(a2, misalign), y)
        assert np.array_equal(y, np.broadcast_to(a0 * 2.0 + a1 - a2 * a0, out)), src
