"""Map kernels (spec section 8): whole-tensor statements (`Z[:] = alpha * X + Y`) computed element
by element. Every kernel of samples/elementwise.tsr on the CPU backend, bit-exact against NumPy
(f16 and bf16 computed in f32 and rounded once per operation) at the sizes around a vector word and
a group's step, in both alignment variants (a misaligned view runs the generic one); explicit and
derived grids; what the language allows in a map kernel; the 128-bit accesses NVRTC makes of the
aligned variants; the emitted C; launch errors. The misuses are in tests/transpile/checks/test_diagnostics.py, the
lowering to an `ElementLoop` in tests/transpile/test_passes.py."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import tessera
from samples.case import bf16_bits, bf16_values
from tessera.api import Module
from tessera.base.errors import LaunchError, SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.cuda.sass import disassemble, find_nvdisasm, function_sass, instructions
from tessera.runtime.host.launch import PreparedLaunch
from tessera.runtime.launch_args import MAX_GRID, map_grid
from tessera.transpile.driver import compile_source, load_source
from tests.conftest import ROOT, session_cache

pytestmark = pytest.mark.usefixtures("shared_cache")

ELEMENTWISE = ROOT / "samples" / "elementwise.tsr"
SAMPLE_KERNELS = ("vadd_f32", "vadd_f16", "saxpy_f32", "saxpy_f16", "bias_gelu_bf16")
BIG = 10**6 + 3


def _cpu_module(tmp_path_factory: pytest.TempPathFactory, load: Callable[[], Module]) -> Iterator[Module]:
    """A module loaded once for the file, with the session's cache (as `shared_cache` sets it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TESSERA_CACHE_DIR", str(session_cache(tmp_path_factory)))
        mp.delenv("TESSERA_BACKEND", raising=False)
        yield load()


@pytest.fixture(scope="module")
def ew(tmp_path_factory):
    yield from _cpu_module(tmp_path_factory, lambda: tessera.load(ELEMENTWISE, backend="cpu"))


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[int, int, int]]]:
    """(C name, grid) of every launch on the CPU backend, in order: which variant really ran (the
    usual launch and a kernel's direct launcher both end in `PreparedLaunch.run`)."""
    calls: list[tuple[str, tuple[int, int, int]]] = []
    real = PreparedLaunch.run

    def spy(self, values, grid, *a, **kw):
        calls.append((self.fn.__name__.removeprefix("tsr_launch_"), grid))
        return real(self, values, grid, *a, **kw)

    monkeypatch.setattr(PreparedLaunch, "run", spy)
    return calls


# ---- arrays placed in memory -------------------------------------------------------------------
# Each array is copied into the middle of a larger buffer whose other bytes are a sentinel: its data
# starts on a 64-byte boundary, or `misalign` elements past it (a NumPy slice offset by one element,
# as `buf[1:]`), and a launch must leave the sentinel alone (no store past either end). The arrays
# of one launch get different sentinels, so that an output computed from the inputs' sentinels
# (a store past the end) never equals its own.

SLACK = 64  # bytes of sentinel on each side


def _fill(i: int) -> int:
    """The sentinel byte of argument i: 0x41, 0x43, ... (12.1, 195.3, ... as f32; 2.6, 3.6, ... as f16)."""
    return 0x41 + 2 * i


def place(a: np.ndarray, misalign: int = 0, fill: int = 0x41) -> np.ndarray:
    a = np.asarray(a)
    item = a.itemsize
    buf = np.empty((2 * SLACK + 64) // item + a.size + misalign, a.dtype)
    buf.view(np.uint8)[:] = fill
    start = (SLACK + (-buf.ctypes.data) % 64) // item + misalign
    view = buf[start:start + a.size].reshape(a.shape)
    view[...] = a
    assert view.flags.c_contiguous and (a.size == 0 or (view.ctypes.data % 16 == 0) == (misalign == 0))
    return view


def intact(view: np.ndarray, fill: int = 0x41) -> bool:
    """Whether the sentinel around `view` (made by `place`) is untouched."""
    buf = view.base
    assert isinstance(buf, np.ndarray) and buf.ndim == 1
    raw = buf.view(np.uint8)
    lo = view.ctypes.data - buf.ctypes.data
    hi = lo + view.nbytes
    return bool((raw[:lo] == fill).all() and (raw[hi:] == fill).all())


def place_args(args: list, misalign: int = 0) -> list:
    """The arrays among `args` placed, each with its own sentinel; scalars as they are."""
    return [place(a, misalign, _fill(i)) if isinstance(a, np.ndarray) else a for i, a in enumerate(args)]


def args_intact(placed: list) -> bool:
    return all(intact(a, _fill(i)) for i, a in enumerate(placed) if isinstance(a, np.ndarray))


def variant(kernel: str, arrays: list) -> str:
    """The C name of the variant a CPU launch on `arrays` must run: `_a16` when every array is
    16-byte aligned (NumPy gives an empty slice its base's address)."""
    aligned = all(a.ctypes.data % 16 == 0 for a in arrays if isinstance(a, np.ndarray))
    return kernel + "_a16" if aligned else kernel


def same(got: np.ndarray, want: np.ndarray) -> bool:
    """Bit-exact equality (NaNs included), with the shape and dtype."""
    want = np.asarray(want)
    return got.shape == want.shape and got.dtype == want.dtype and got.tobytes() == want.tobytes()


# ---- references: NumPy, one rounding per operation ------------------------------------------------

def r16(v) -> np.ndarray:
    """One bf16 operation: computed in f32 and rounded to bf16 (as f32 values)."""
    return bf16_values(bf16_bits(np.asarray(v, np.float32)))


def gelu_bf16(x_bits: np.ndarray, b_bits: np.ndarray) -> np.ndarray:
    """samples/elementwise.tsr bias_gelu_bf16, every literal and every operation rounded to bf16."""
    h = r16(bf16_values(x_bits) + bf16_values(b_bits))
    inner = r16(h + r16(r16(r16(r16(0.044715) * h) * h) * h))
    t = r16(np.tanh(r16(r16(0.7978845608) * inner)))
    return bf16_bits(r16(r16(r16(0.5) * h) * r16(r16(1.0) + t)))


def _normal(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    return (rng.standard_normal(shape) * 4).astype(dtype)


# A sample kernel's case: (rng, shape) -> (arguments, index of the output among them, expected output)
SampleCase = Callable[[np.random.Generator, tuple[int, ...]], tuple[list, int, np.ndarray]]


def _vadd(dtype) -> SampleCase:
    def case(rng, shape):
        x, y = _normal(rng, shape, dtype), _normal(rng, shape, dtype)
        return [x, y, np.full(shape, 7, dtype)], 2, x + y  # NumPy f16: in f32, rounded once
    return case


def _saxpy(dtype) -> SampleCase:
    def case(rng, shape):
        x, y = _normal(rng, shape, dtype), _normal(rng, shape, dtype)
        alpha = 1.7  # not an f16 value: passed rounded to f16 for saxpy_f16, as dtype(1.7) is
        return [alpha, x, y], 2, dtype(alpha) * x + y
    return case


def _bias_gelu(rng, shape):
    x, b = bf16_bits(rng.standard_normal(shape)), bf16_bits(rng.standard_normal(shape))
    return [x, b, np.zeros(shape, np.uint16)], 2, gelu_bf16(x, b)


SAMPLE_CASES: dict[str, SampleCase] = {
    "vadd_f32": _vadd(np.float32), "vadd_f16": _vadd(np.float16), "saxpy_f32": _saxpy(np.float32),
    "saxpy_f16": _saxpy(np.float16), "bias_gelu_bf16": _bias_gelu}


def _shape(kernel: str, size: int) -> tuple[int, ...]:
    """The 1-D shape of `size` elements, or for the 2-D kernel the most square factorization."""
    if kernel != "bias_gelu_bf16":
        return (size,)
    if size == 0:
        return (0, 7)
    d = max(d for d in range(1, math.isqrt(size) + 1) if size % d == 0)
    return (size // d, d)


def run_sample(mod, launched, kernel: str, size: int, misalign: int, seed: int = 0) -> None:
    """Run `kernel` on `size` elements placed `misalign` elements off a 16-byte boundary; check
    the output bit for bit, the sentinel around every array, and which variant ran."""
    args, out, want = SAMPLE_CASES[kernel](np.random.default_rng(seed + size), _shape(kernel, size))
    placed = place_args(args, misalign)
    del launched[:]
    mod[kernel](*placed)
    assert same(placed[out], want), (kernel, size, misalign)
    assert args_intact(placed), (kernel, size, misalign)
    assert [name for name, _ in launched] == [variant(kernel, placed)]
    assert size == 0 or (launched[0][0] == kernel) == bool(misalign)


# ---- every sample, bit-exact ----------------------------------------------------------------------

def test_the_samples_widths_and_variants(ew) -> None:
    widths = {k: ew[k].info().map_width for k in SAMPLE_KERNELS}
    assert widths == {"vadd_f32": 4, "vadd_f16": 8, "saxpy_f32": 4, "saxpy_f16": 8, "bias_gelu_bf16": 8}
    assert set(ew.kernels) == set(SAMPLE_KERNELS)
    info = ew.vadd_f32.info()
    assert (info.c_name, info.aligned, info.align_tensors, info.map_tensor) == ("vadd_f32", False, ("X", "Y", "Z"), "Z")
    assert ew.saxpy_f16.info().align_tensors == ("X", "Y") and ew.saxpy_f16.info().map_tensor == "Y"


@pytest.mark.parametrize("misalign", [0, 1], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("kernel", SAMPLE_KERNELS)
def test_samples_match_numpy_around_the_word_and_the_step(ew, launched, kernel: str, misalign: int) -> None:
    info = ew[kernel].info()
    w = info.map_width
    step = w * math.prod(info.tile)  # elements per group and step
    for size in (0, 1, w - 1, w, w + 1, step - 1, step + 1, 3 * step + w + 1):
        run_sample(ew, launched, kernel, size, misalign)


@pytest.mark.parametrize("kernel,misalign", [(k, 0) for k in SAMPLE_KERNELS] + [("vadd_f32", 1), ("saxpy_f16", 1)])
def test_samples_match_numpy_at_a_million_and_three(ew, launched, kernel: str, misalign: int) -> None:
    run_sample(ew, launched, kernel, BIG, misalign)
    (_, grid), = launched
    assert grid == (-(-BIG // (ew[kernel].info().map_width * math.prod(ew[kernel].info().tile))), 1, 1)


def test_a_sliced_array_runs_the_generic_variant(ew, launched) -> None:
    """`buf[1:]` of float32 and float16 arrays: misaligned by 4 and 2 bytes."""
    rng = np.random.default_rng(5)
    for kernel, dtype in (("vadd_f32", np.float32), ("vadd_f16", np.float16)):
        n = 1000
        bufs = [np.zeros(n + 1, dtype) for _ in range(3)]
        x, y, z = (b[1:] for b in bufs)
        x[:] = _normal(rng, n, dtype)
        y[:] = _normal(rng, n, dtype)
        assert x.ctypes.data % 16 != 0
        ew[kernel](x, y, z)
        assert same(z, x + y) and bufs[2][0] == 0
        z2 = np.zeros(n, dtype)
        ew[kernel](x.copy(), y.copy(), z2)  # fresh arrays: aligned
        assert same(z2, x + y)
    assert [name for name, _ in launched] == ["vadd_f32", "vadd_f32_a16", "vadd_f16", "vadd_f16_a16"]


def test_one_misaligned_array_is_enough_for_the_generic_variant(ew, launched) -> None:
    rng = np.random.default_rng(6)
    x, y = _normal(rng, 999, np.float32), _normal(rng, 999, np.float32)
    for which in range(3):
        args = [place(a, int(i == which), _fill(i)) for i, a in enumerate((x, y, np.zeros(999, np.float32)))]
        ew.vadd_f32(*args)
        assert same(args[2], x + y) and args_intact(args)
    assert [name for name, _ in launched] == ["vadd_f32"] * 3


def test_aligned_launch_picks_the_variant_from_the_addresses(ew) -> None:
    from tessera.runtime.launch_args import bind

    info = ew.vadd_f16.info()
    a, b = place(np.zeros(20, np.float16)), place(np.zeros(20, np.float16), 1)
    assert tessera.api.aligned_launch(info, bind(info, (a, a, place(np.zeros(20, np.float16))), {}, None), False)
    assert not tessera.api.aligned_launch(info, bind(info, (a, a, b), {}, None), False)
    assert tessera.api.aligned_launch(info, bind(info, (a, a, b), {}, None), True)  # uploaded: fresh allocations


# ---- grids ------------------------------------------------------------------------------------------

def test_an_explicit_grid_strides_over_the_elements(ew, launched) -> None:
    rng = np.random.default_rng(7)
    n = 50_003  # 49 steps of 1024 elements
    x, y = _normal(rng, n, np.float32), _normal(rng, n, np.float32)
    for grid, want in ((2, (2, 1, 1)), ((2, 3), (2, 3, 1)), ((1, 1, 5), (1, 1, 5)), (1, (1, 1, 1)), (200, (200, 1, 1))):
        for misalign in (0, 1):
            args = place_args([x, y, np.zeros(n, np.float32)], misalign)
            ew.vadd_f32(*args, grid=grid)
            assert same(args[2], x + y) and args_intact(args), (grid, misalign)
            assert launched[-1] == ("vadd_f32_a16" if misalign == 0 else "vadd_f32", want)
    z = place(np.zeros(n, np.float32))
    ew.vadd_f32[3](x, y, z)
    assert same(z, x + y) and launched[-1][1] == (3, 1, 1)


def test_the_grid_is_derived_from_the_element_count(ew, launched) -> None:
    cases = [("vadd_f32", 0, 1), ("vadd_f32", 1, 1), ("vadd_f32", 1024, 1), ("vadd_f32", 1025, 2),
             ("vadd_f16", 2048 * 5, 5), ("vadd_f16", 2048 * 5 + 1, 6), ("bias_gelu_bf16", 30 * 35, 2)]
    for kernel, size, groups in cases:
        run_sample(ew, launched, kernel, size, 0)
        assert launched[-1][1] == (groups, 1, 1), (kernel, size)


def test_size_zero_launches_with_and_without_a_grid(ew, launched) -> None:
    for kernel in SAMPLE_KERNELS:
        args, out, _ = SAMPLE_CASES[kernel](np.random.default_rng(0), _shape(kernel, 0))
        for grid in (None, 4):
            placed = place_args(args)
            ew[kernel](*placed, grid=grid)
            assert placed[out].size == 0 and args_intact(placed)
    assert [g for _, g in launched] == [(1, 1, 1), (4, 1, 1)] * len(SAMPLE_KERNELS)


def test_the_derived_grid_is_capped_at_the_grid_limit(ew) -> None:
    import dataclasses

    class Shape:  # an array too large to allocate here: map_grid reads only its shape
        shape = (2**31 - 1, 3)

    info = dataclasses.replace(ew.vadd_f32.info(), tile=(1,), map_width=1)
    assert map_grid(info, Shape()) == MAX_GRID[0]
    assert map_grid(ew.vadd_f32.info(), Shape()) == -(-(2**31 - 1) * 3 // 1024)


# ---- the language in a map kernel ----------------------------------------------------------------

LANG = """\
const SCALE = 3.0
const OFF = 2

@device
def sq(v: f32) -> f32:
    return v * v

@kernel tile[(64,)] vectorize(4)
def seq(X: f32[n], Y: mut f32[n], Z: mut f32[n]):
    Y[:] = X * 2.0
    Z[:] = Y + 1.0

@kernel tile[(64,)] vectorize(4)
def locals_aug(X: f32[n], Y: mut f32[n]):
    t = X * SCALE
    t += 1.0
    Y[:] += t
    Y[:] += X

@kernel tile[(64,)] vectorize(4)
def relu(X: f32[n], Y: mut f32[n]):
    Y[:] = X if X > 0.0 else 0.0

@kernel tile[(64,)] vectorize(4)
def compare(X: f32[n], Y: f32[n], B: mut bool[n], I: mut i32[n]):
    B[:] = X < Y
    I[:] = i32(X >= Y) + i32(B)

@kernel tile[(64,)] vectorize(8)
def casts(X: f32[n], I: i32[n], H: mut f16[n], F: mut f32[n]):
    H[:] = X
    F[:] = f32(I) + X

@kernel tile[(64,)] vectorize(4)
def imap(A: i32[n], B: i32[n], C: mut i32[n]):
    C[:] = A * 3 - B // 2 + B % 5 + OFF

@kernel tile[(64,)] vectorize(16)
def u8map(A: u8[n], B: mut u8[n]):
    B[:] = A + u8(1)

@kernel tile[(32,)] vectorize(4)
def f64map(A: f64[n], B: f64[n], C: mut f64[n]):
    C[:] = A * B + 1.0

@kernel tile[(32,)] vectorize(4)
def rank3(A: f32[p, q, r], B: mut f32[p, q, r]):
    B[:] = A - 1.0

@kernel tile[(16, 8)] vectorize(4)
def tile2d(A: f32[n], B: mut f32[n]):
    B[:] = A * 0.5

@kernel tile[(64,)] vectorize(2)
def scalars(a: f32, k: i32, X: f32[n], Y: mut f32[n]):
    Y[:] = a * X + f32(k) * SCALE + f32(n) + f32(OFF)

@kernel tile[(64,)] vectorize(4)
def device_call(X: f32[n], Y: mut f32[n]):
    Y[:] = sq(X) + 1.0

@kernel tile[(64,)] vectorize(1)
def width1(X: f32[n], Y: mut f32[n]):
    Y[:] = X + 1.0

@kernel tile[(64,)]
def no_clause(X: f32[n], Y: mut f32[n]):
    Y[:] = X - 1.0
"""


@pytest.fixture(scope="module")
def lang(tmp_path_factory):
    yield from _cpu_module(tmp_path_factory, lambda: tessera.compile(LANG, backend="cpu", path="lang.tsr"))


def check_both(mod, launched, kernel: str, args: list, want: dict[int, np.ndarray], vector: bool = True) -> None:
    """Launch `kernel` on `args` placed aligned, then misaligned; the arrays at the indices of `want`
    must equal it bit for bit, the rest unchanged, and the aligned launch run the `_a16` variant
    (when the kernel has one)."""
    for misalign in (0, 1):
        placed = place_args(args, misalign)
        del launched[:]
        mod[kernel](*placed)
        for i, a in enumerate(placed):
            if isinstance(a, np.ndarray):
                assert same(a, want.get(i, args[i])), (kernel, i, misalign)
        assert args_intact(placed), (kernel, misalign)
        assert [name for name, _ in launched] == [variant(kernel, placed) if vector else kernel]


SIZES = (1, 3, 5, 255, 257, 4099)


def _f32(rng, n) -> np.ndarray:
    return _normal(rng, n, np.float32)


def test_statements_run_in_order_per_element(lang, launched) -> None:
    rng = np.random.default_rng(10)
    for n in SIZES:
        x = _f32(rng, n)
        y2 = x * np.float32(2)
        check_both(lang, launched, "seq", [x, np.zeros(n, np.float32), np.zeros(n, np.float32)],
                   {1: y2, 2: y2 + np.float32(1)})


def test_locals_and_augmented_assignment(lang, launched) -> None:
    rng = np.random.default_rng(11)
    for n in SIZES:
        x, y = _f32(rng, n), _f32(rng, n)
        t = x * np.float32(3) + np.float32(1)
        check_both(lang, launched, "locals_aug", [x, y], {1: (y + t) + x})


def test_ternary_chooses_per_element(lang, launched) -> None:
    rng = np.random.default_rng(12)
    for n in SIZES:
        x = _f32(rng, n)
        x[::7] = -0.0
        check_both(lang, launched, "relu", [x, np.full(n, 9, np.float32)], {1: np.where(x > 0, x, np.float32(0))})


def test_comparisons_into_bool_and_i32_tensors(lang, launched) -> None:
    rng = np.random.default_rng(13)
    for n in SIZES:
        x, y = _f32(rng, n), _f32(rng, n)
        y[::3] = x[::3]
        b = x < y
        check_both(lang, launched, "compare", [x, y, np.zeros(n, bool), np.full(n, -5, np.int32)],
                   {2: b, 3: (x >= y).astype(np.int32) + b.astype(np.int32)})


def test_casts(lang, launched) -> None:
    rng = np.random.default_rng(14)
    for n in SIZES:
        x = _f32(rng, n)
        i = rng.integers(-(2**24), 2**24, n).astype(np.int32)
        check_both(lang, launched, "casts", [x, i, np.zeros(n, np.float16), np.zeros(n, np.float32)],
                   {2: x.astype(np.float16), 3: i.astype(np.float32) + x})


def test_integer_maps(lang, launched) -> None:
    rng = np.random.default_rng(15)
    for n in SIZES:
        a = rng.integers(-(2**20), 2**20, n).astype(np.int32)
        b = rng.integers(-(2**20), 2**20, n).astype(np.int32)
        q = np.trunc(b / 2).astype(np.int32)  # integer // and % truncate (spec section 3)
        want = a * 3 - q + (b - np.trunc(b / 5).astype(np.int32) * 5) + 2
        check_both(lang, launched, "imap", [a, b, np.zeros(n, np.int32)], {2: want})
    for n in (1, 15, 17, 1023, 1025, 5000):  # vectorize(16): 16 bytes per tile
        u = rng.integers(0, 256, n).astype(np.uint8)
        u[::5] = 255
        check_both(lang, launched, "u8map", [u, np.zeros(n, np.uint8)], {1: u + np.uint8(1)})  # wraps


def test_f64_with_two_words_per_tile(lang, launched) -> None:
    rng = np.random.default_rng(16)
    for n in (1, 3, 5, 127, 129, 1001):
        a, b = rng.standard_normal(n), rng.standard_normal(n)
        check_both(lang, launched, "f64map", [a, b, np.zeros(n)], {2: a * b + 1.0})


def test_three_dimensional_tensors(lang, launched) -> None:
    rng = np.random.default_rng(17)
    for shape in ((0, 3, 4), (1, 1, 1), (5, 7, 9), (2, 33, 17)):
        a = _normal(rng, shape, np.float32)
        check_both(lang, launched, "rank3", [a, np.zeros(shape, np.float32)], {1: a - np.float32(1)})


def test_a_two_dimensional_group(lang, launched) -> None:
    rng = np.random.default_rng(18)
    for n in (1, 511, 513, 3 * 512 + 5):  # 16 x 8 tiles x 4 elements = 512 per step
        a = _f32(rng, n)
        check_both(lang, launched, "tile2d", [a, np.zeros(n, np.float32)], {1: a * np.float32(0.5)})


def test_scalar_parameters_constants_and_shape_symbols(lang, launched) -> None:
    rng = np.random.default_rng(19)
    for n in SIZES:
        x = _f32(rng, n)
        want = np.float32(1.25) * x + np.float32(-3) * np.float32(3) + np.float32(n) + np.float32(2)
        check_both(lang, launched, "scalars", [1.25, -3, x, np.zeros(n, np.float32)], {3: want})


def test_device_function_calls(lang, launched) -> None:
    rng = np.random.default_rng(20)
    for n in SIZES:
        x = _f32(rng, n)
        check_both(lang, launched, "device_call", [x, np.zeros(n, np.float32)], {1: x * x + np.float32(1)})


def test_width_one_has_no_aligned_variant(lang, launched) -> None:
    rng = np.random.default_rng(21)
    for kernel, want in (("width1", lambda x: x + np.float32(1)), ("no_clause", lambda x: x - np.float32(1))):
        info = lang[kernel].info()
        assert info.map_width == 1 and info.align_tensors == () and not info.aligned
        for n in (0, 1, 63, 65, 1000):
            x = _f32(rng, n)
            check_both(lang, launched, kernel, [x, np.zeros(n, np.float32)], {1: want(x)}, vector=False)
    cuda = compile_source(SourceFile("lang.tsr", LANG)).cuda
    assert "width1(" in cuda and "no_clause(" in cuda
    assert "width1_a16" not in cuda and "no_clause_a16" not in cuda and "seq_a16(" in cuda


def test_a_module_without_vector_words_leaves_out_the_map_header() -> None:
    text = LANG[LANG.index("@kernel tile[(64,)] vectorize(1)"):]
    assert "Device header sections: core\n" in compile_source(SourceFile("w.tsr", text)).cuda
    assert "Device header sections: core, f16, bf16, map\n" in compile_source(load_source(str(ELEMENTWISE))).cuda


def test_in_place_maps_without_restrict(launched) -> None:
    mod = tessera.load(ELEMENTWISE, backend="cpu", restrict=False)
    rng = np.random.default_rng(22)
    x, y = _f32(rng, 3001), _f32(rng, 3001)
    for misalign in (0, 1):
        a, b = place_args([x, y], misalign)
        mod.vadd_f32(a, b, a)  # Z is X
        assert same(a, x + y) and args_intact([a, b])
    assert [name for name, _ in launched] == ["vadd_f32_a16", "vadd_f32"]


def test_both_variants_under_the_bounds_checker(launched) -> None:
    mod = tessera.load(ELEMENTWISE, backend="cpu", check_bounds=True)
    for size in (1, 1023, 1025):
        for misalign in (0, 1):
            run_sample(mod, launched, "vadd_f16", size, misalign)
            run_sample(mod, launched, "bias_gelu_bf16", size, misalign)


# ---- launch errors --------------------------------------------------------------------------------

def test_tensors_of_different_sizes_name_the_shape_symbol(ew) -> None:
    x, y, z = np.ones(10, np.float32), np.ones(11, np.float32), np.zeros(10, np.float32)
    with pytest.raises(LaunchError, match=r"vadd_f32\(\): parameter 'Y': shape symbol 'n' is 11 here but 10"):
        ew.vadd_f32(x, y, z)
    with pytest.raises(LaunchError, match="shape symbol 'n'"):
        ew.vadd_f32(x, x, np.zeros(9, np.float32), grid=2)
    assert (z == 0).all()
    b = np.zeros((4, 6), np.uint16)
    with pytest.raises(LaunchError, match="parameter 'B': shape symbol 'N' is 5 here but 6"):
        ew.bias_gelu_bf16(b, np.zeros((4, 5), np.uint16), b)
    with pytest.raises(LaunchError, match="parameter 'Y': expected 2 dimensions"):
        ew.bias_gelu_bf16(b, b, np.zeros(24, np.uint16))


def test_bad_grids_are_launch_errors(ew) -> None:
    x = np.ones(10, np.float32)
    for grid in (0, (1, 0), (1, 2, 3, 4), 1.5):
        with pytest.raises(LaunchError, match="grid"):
            ew.vadd_f32(x, x, np.zeros(10, np.float32), grid=grid)


# ---- the emitted C ----------------------------------------------------------------------------------

@functools.cache
def _elementwise(arch: str = "sm_90"):
    return compile_source(load_source(str(ELEMENTWISE)), options=CompileOptions(arch=arch))


def _kernel_text(cuda: str, c_name: str) -> str:
    start = cuda.index(f"\n{c_name}(")
    return cuda[start:cuda.index("\n}\n", start)]


def test_both_variants_are_emitted_with_their_assumptions() -> None:
    result = _elementwise()
    names = [(k.c_name, k.aligned) for k in result.kernels]
    assert names == [(n, a) for k in SAMPLE_KERNELS for n, a in ((k, False), (k + "_a16", True))]
    cuda = result.cuda
    assert "// line 7: group 256, map kernel, 4 elements per tile and step, for 16-byte-aligned X, Y, Z\n" in cuda
    assert "map kernel, 8 elements per tile and step, for 16-byte-aligned X, Y\n" in cuda  # saxpy_f16
    assert "for 16-byte-aligned X, B, Y\n" in cuda  # bias_gelu_bf16
    generic, aligned = _kernel_text(cuda, "vadd_f32"), _kernel_text(cuda, "vadd_f32_a16")
    assert "16-byte-aligned" not in generic.splitlines()[0]
    assert "const long long tsr_j = tsr_step + tsr_e * 256 + (int)threadIdx.x;" in generic
    assert "if (tsr_j < tsr_count) {" in generic and "tsr_vload" not in generic
    assert "tsr_vload(tsr_lanes_X, X + tsr_first);" in aligned and "tsr_vstore(Z + tsr_first, tsr_lanes_Z);" in aligned
    assert "if (tsr_first + 4 <= tsr_count) {  // whole words" in aligned
    assert "for (long long tsr_j = tsr_first; tsr_j < tsr_count; ++tsr_j) {" in aligned  # the scalar tail
    gelu = _kernel_text(cuda, "bias_gelu_bf16")
    assert "const long long tsr_count = (long long)M * (long long)N;" in gelu
    # saxpy reads Y before writing it: loaded in the aligned variant; Z of vadd is only written
    assert "tsr_vload(tsr_lanes_Y, Y + tsr_first);" in _kernel_text(cuda, "saxpy_f32_a16")
    assert "tsr_vload(tsr_lanes_Z" not in aligned


def test_the_generic_variant_alone_when_asked() -> None:
    from tessera.transpile.driver import compile_variant, front_end

    front = front_end(load_source(str(ELEMENTWISE)))
    for alignment, names in (("generic", list(SAMPLE_KERNELS)), ("aligned", [k + "_a16" for k in SAMPLE_KERNELS])):
        result = compile_variant(front, options=CompileOptions(arch="sm_90", alignment=alignment))
        assert [k.c_name for k in result.kernels] == names


def test_cli_info_lists_both_variants(tmp_path, capsys) -> None:
    from tessera.cli.compile import run

    assert run([str(ELEMENTWISE), "--info", "-o", str(tmp_path / "e.cu")]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.split()}
    assert rows["vadd_f32"].endswith("generic (any alignment)")
    assert rows["vadd_f32_a16"].endswith("aligned: X, Y, Z 16-byte aligned")
    assert rows["saxpy_f16_a16"].endswith("aligned: X, Y 16-byte aligned")
    assert rows["bias_gelu_bf16_a16"].endswith("aligned: X, B, Y 16-byte aligned")
    path = tmp_path / "w.tsr"
    path.write_text(LANG)
    assert run([str(path), "--info", "-o", str(tmp_path / "w.cu")]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.split()}
    assert rows["width1"].endswith(" -") and "width1_a16" not in rows and rows["u8map_a16"].endswith("A, B 16-byte aligned")


# ---- what NVRTC makes of it ---------------------------------------------------------------------

@functools.cache
def _nvrtc(arch: str, source: str | None = None):
    result = compile_source(SourceFile("lang.tsr", source), options=CompileOptions(arch=arch)) if source else _elementwise(arch)
    return result, compile_cuda(result.cuda, name="map.cu", arch=arch)


@functools.cache
def _sass(arch: str, source: str | None = None) -> str:
    _, nv = _nvrtc(arch, source)
    assert nv.cubin is not None
    return disassemble(nv.cubin)


def _ops(text: str, c_name: str) -> list[str]:
    return instructions(function_sass(text, c_name))


def _wide(ops: list[str], opcode: str) -> int:
    """How many of `ops` are 128-bit `opcode` accesses (LDG.E.128, LDG.E.128.CONSTANT, ...)."""
    return sum(1 for op in ops if op.split(".")[0] == opcode and "128" in op.split("."))


def _local(ops: list[str]) -> list[str]:
    return [op for op in ops if op.split(".")[0] in ("LDL", "STL")]


needs_nvdisasm = pytest.mark.skipif(find_nvdisasm() is None, reason="nvdisasm not installed")


@needs_nvdisasm
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_aligned_variants_use_128_bit_global_accesses(arch: str) -> None:
    result, text = _elementwise(arch), _sass(arch)
    for k in result.kernels:
        ops = _ops(text, k.c_name)
        assert not _local(ops), (k.c_name, _local(ops))
        if k.aligned:
            assert _wide(ops, "LDG") >= 1 and _wide(ops, "STG") >= 1, (k.c_name, ops)
        else:
            assert _wide(ops, "LDG") == 0 and _wide(ops, "STG") == 0, (k.c_name, ops)
    # The two reads of vadd and saxpy each take 128-bit loads.
    for name in ("vadd_f32_a16", "vadd_f16_a16", "saxpy_f32_a16", "saxpy_f16_a16"):
        assert _wide(_ops(text, name), "LDG") >= 2, name


@needs_nvdisasm
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_wider_and_narrower_elements_use_128_bit_words(arch: str) -> None:
    text = _sass(arch, LANG)
    # (16-byte words read, written) per tile and step: 4 x f64 is two words, 16 x u8 one, 8 x f32 two
    for name, reads, writes in (("f64map_a16", 4, 2), ("u8map_a16", 1, 1), ("imap_a16", 2, 1), ("casts_a16", 4, 3)):
        ops = _ops(text, name)
        assert _wide(ops, "LDG") >= reads and _wide(ops, "STG") >= writes, (name, ops)
        assert not _local(ops), name
    assert _wide(_ops(text, "width1"), "LDG") == 0 and _wide(_ops(text, "seq"), "LDG") == 0


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("which", ["elementwise", "lang"])
def test_no_warnings_and_no_spills(arch: str, which: str) -> None:
    result, nv = _nvrtc(arch, LANG if which == "lang" else None)
    assert nv.warnings == ()
    for k in result.kernels:
        res = nv.kernel(k.c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0, (k.c_name, res)


def test_a_constant_table_lookup_is_elementwise() -> None:
    mod = tessera.compile("const T: f32[4] = [1.0, 2.0, 3.0, 4.0]\n"
                          "@kernel tile[(64,)] vectorize(4)\n"
                          "def k(x: i32[n], out: mut f32[n]):\n"
                          "    out[:] = T[x % 4] + T[1]\n", backend="cpu")
    x = np.arange(1001, dtype=np.int32)
    out = np.zeros(1001, np.float32)
    mod.k(x, out)
    assert np.array_equal(out, np.array([1, 2, 3, 4], np.float32)[x % 4] + 2)


@pytest.mark.skipif(find_nvdisasm() is None, reason="nvdisasm not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_f16_plus_minus_times_compute_in_pairs_without_fusing(arch: str) -> None:
    """saxpy_f16's aligned variant multiplies and adds two elements at a time (HMUL2, HADD2: each
    rounded, as the language computes f16); the generic variant and bias_gelu_bf16 (tanh) compute
    in f32."""
    cuda = _elementwise(arch).cuda
    aligned = _kernel_text(cuda, "saxpy_f16_a16")
    assert "alignas(16) __half2 tsr_lanes_X[4];" in aligned
    assert "tsr_lanes_Y[tsr_e] = __hadd2_rn(__hmul2_rn(__float2half2_rn(alpha), tsr_lanes_X[tsr_e]), " \
           "tsr_lanes_Y[tsr_e]);" in aligned
    assert "__hadd2_rn" not in _kernel_text(cuda, "saxpy_f16") + _kernel_text(cuda, "bias_gelu_bf16_a16")
    ops = _ops(_sass(arch), "saxpy_f16_a16")
    assert "HMUL2" in ops and "HADD2" in ops and "HFMA2" not in ops  # (HFMA2.MMA moves constants)


def test_bf16_pairs_are_bit_exact_on_the_cpu_backend() -> None:
    from samples.case import bf16_bits, bf16_values

    text = ("@kernel tile[(32,)] vectorize(8)\n"
            "def k(X: bf16[n], B: bf16[n], Y: mut bf16[n], s: bf16):\n"
            "    t = -(X - B) * s\n"
            "    Y[:] = t + X * 0.3\n"
            "    Y[:] -= B\n")
    aligned = _kernel_text(compile_source(SourceFile("p.tsr", text)).cuda, "k_a16")
    assert "__nv_bfloat162 t = __hmul2_rn(__hneg2(__hsub2_rn(" in aligned
    assert "tsr_lanes_Y[tsr_e] = __hsub2_rn(tsr_lanes_Y[tsr_e], tsr_lanes_B[tsr_e]);" in aligned
    mod = tessera.compile(text, backend="cpu")
    rng = np.random.default_rng(3)
    x, b = (bf16_bits(rng.standard_normal(1003) * 100) for _ in range(2))
    y = np.zeros(1003, np.uint16)
    mod.k(x, b, y, 1.7)

    def r(v):
        return bf16_values(bf16_bits(np.asarray(v, np.float32)))
    xv, bv, s = bf16_values(x), bf16_values(b), r(1.7)
    t = r(r(-r(xv - bv)) * s)
    want = bf16_bits(r(r(t + r(xv * r(0.3))) - bv))
    assert np.array_equal(y, want)
