"""Per-tile vector access (spec section 15): `r[:] = X[i, j:j + W]` and `Y[i, j:j + W] = r` on the
CPU backend against NumPy at ragged sizes, in both alignment variants (views of odd offsets run the
generic one), with views partly or wholly outside the tensor (zero-filled reads, skipped writes),
through shared memory, with check_bounds; the C that plan-copies asks for, and the 128-bit
accesses NVRTC makes of the aligned variants (LDG.E.128/STG.E.128, LDS.128/STS.128). The misuses
are in tests/transpile/checks/test_vector_diagnostics.py, the random differential generator in
tests/language/vectors/test_vector_fuzz.py."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import tessera
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.cuda.sass import disassemble, find_nvdisasm, function_sass, instructions
from tessera.transpile.driver import compile_source
from tests.conftest import session_cache
from tests.language.test_map_kernels import args_intact, place

pytestmark = pytest.mark.usefixtures("shared_cache")

# (.tsr type, NumPy dtype of its elements); bf16 moves as its uint16 bits.
TYPES = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "f64": np.float64, "u8": np.uint8}
T = 16  # tiles per group


def width(t: str) -> int:
    return 16 // np.dtype(TYPES[t]).itemsize


def _kernels(t: str) -> str:
    w = width(t)
    return f"""
@kernel tile[({T},)]
def rows_{t}(X: {t}[m, n], Y: mut {t}[m, n]):
    i = group_id(0)
    j = (group_id(1) * {T} + tile_id(0)) * {w}
    r = tregs({t}[{w}])
    r[:] = X[i, j:j + {w}]
    Y[i, j:j + {w}] = r

@kernel tile[({T},)]
def shift_{t}(X: {t}[m, n], Y: mut {t}[m, n], off: i32):
    i = group_id(0)
    j = (group_id(1) * {T} + tile_id(0)) * {w}
    r = tregs({t}[{w}])
    r[:] = X[i, j + off:j + off + {w}]
    Y[i, j:j + {w}] = r

@kernel tile[({T},)]
def flip_{t}(X: {t}[m, n], Y: mut {t}[m, n]):
    s = tshared.alloc({t}[{T}, {w}])
    i = group_id(0)
    t = tile_id(0)
    j = (group_id(1) * {T} + t) * {w}
    r = tregs({t}[{w}])
    r[:] = X[i, j:j + {w}]
    s[t, :] = r
    tbarrier()
    q = tregs({t}[{w}])
    q[:] = s[{T - 1} - t, 0:{w}]
    Y[i, j:j + {w}] = q
"""


SOURCE = "\n".join(_kernels(t) for t in TYPES)


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "check_bounds"])
def mod(request, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TESSERA_CACHE_DIR", str(session_cache(tmp_path_factory)))
        mp.delenv("TESSERA_BACKEND", raising=False)
        yield tessera.compile(SOURCE, backend="cpu", check_bounds=request.param, path="vec.tsr")


def _data(t: str, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    if t == "bf16":
        return rng.integers(0, 1 << 16, shape).astype(np.uint16)
    if t == "u8":
        return rng.integers(0, 256, shape).astype(np.uint8)
    return rng.standard_normal(shape).astype(TYPES[t])


def _grid(m: int, n: int, t: str) -> tuple[int, int]:
    return (m, max(1, -(-n // (T * width(t)))))


def _run(mod, name: str, t: str, m: int, n: int, misalign: int, *extra: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m * 1000 + n)
    x = place(_data(t, (m, n), rng), misalign, 0x41)
    y = place(np.zeros((m, n), TYPES[t]), misalign, 0x43)
    mod[f"{name}_{t}"][_grid(m, n, t)](x, y, *extra)
    assert args_intact([x, y]), "a write outside the tensor"
    return x, y


def _shifted(x: np.ndarray, off: int) -> np.ndarray:
    """Y[i, c] = X[i, c + off], zero where c + off is outside the row."""
    m, n = x.shape
    want = np.zeros_like(x)
    for c in range(n):
        if 0 <= c + off < n:
            want[:, c] = x[:, c + off]
    return want


def _flipped(x: np.ndarray, w: int) -> np.ndarray:
    """Each group's T x w block of a row with its tiles' chunks in reverse order (zero past the end)."""
    m, n = x.shape
    blocks = -(-n // (T * w))
    padded = np.zeros((m, blocks * T * w), x.dtype)
    padded[:, :n] = x
    out = padded.reshape(m, blocks, T, w)[:, :, ::-1, :].reshape(m, blocks * T * w)
    return out[:, :n]


SIZES = [(1, 1), (3, 7), (2, 16), (2, 17), (5, 63), (4, 128), (3, 129), (2, 300)]


@pytest.mark.parametrize("t", list(TYPES))
@pytest.mark.parametrize("misalign", [0, 1], ids=["aligned", "misaligned"])
def test_rows_match_numpy_at_ragged_sizes(mod, launched, t: str, misalign: int) -> None:
    for m, n in SIZES:
        x, y = _run(mod, "rows", t, m, n, misalign)
        assert np.array_equal(y.view(np.uint8), x.view(np.uint8)), (t, m, n)
        # The aligned variant only where both arrays are 16-byte aligned and n % 16 == 0.
        aligned = misalign == 0 and n % 16 == 0
        assert launched[-1] == f"rows_{t}" + ("_a16" if aligned else ""), (t, m, n, launched[-1])


@pytest.mark.parametrize("t", list(TYPES))
def test_views_partly_or_wholly_outside_read_zero(mod, t: str) -> None:
    for m, n in ((3, 37), (2, 128)):
        for off in (-100, -9, -3, -1, 1, 2, 5, 8, 31, n, 1000):
            for misalign in (0, 1):
                x, y = _run(mod, "shift", t, m, n, misalign, off)
                assert np.array_equal(y.view(np.uint8), _shifted(x, off).view(np.uint8)), (t, m, n, off)


@pytest.mark.parametrize("t", list(TYPES))
@pytest.mark.parametrize("misalign", [0, 1], ids=["aligned", "misaligned"])
def test_shared_memory_views(mod, t: str, misalign: int) -> None:
    for m, n in SIZES:
        x, y = _run(mod, "flip", t, m, n, misalign)
        assert np.array_equal(y.view(np.uint8), _flipped(x, width(t)).view(np.uint8)), (t, m, n)


def test_a_view_of_an_odd_offset_runs_the_generic_variant(mod, launched) -> None:
    base = np.arange(3 * 65, dtype=np.float32).reshape(3, 65)
    x = base[:, 1:]  # 64 columns, each row starting 4 bytes past a 16-byte boundary (a strided view)
    x = np.ascontiguousarray(x)
    odd = place(x, 1)
    y = place(np.zeros((3, 64), np.float32), 0)
    mod.rows_f32[_grid(3, 64, "f32")](odd, y)
    assert np.array_equal(y, x) and launched[-1] == "rows_f32"
    mod.rows_f32[_grid(3, 64, "f32")](place(x), y)
    assert np.array_equal(y, x) and launched[-1] == "rows_f32_a16"


# ---- the C: the plan of each variant -------------------------------------------------------------------

@functools.cache
def _compiled(arch: str):
    return compile_source(SourceFile("vec.tsr", SOURCE), options=CompileOptions(arch=arch))


def test_the_aligned_variant_moves_16_bytes_untested() -> None:
    cuda = _compiled("sm_80").cuda
    generic, aligned = cuda.split("rows_bf16_a16(")[0].rsplit("rows_bf16(", 1)[1], \
        cuda.split("rows_bf16_a16(")[1].split("extern \"C\"")[0]
    assert "tsr_vec_load<__nv_bfloat16, 8, 16, true>" in generic
    assert "tsr_vec_load<__nv_bfloat16, 8, 16, false>" in aligned
    assert "tsr_vec_store<__nv_bfloat16, 8, 16, false>" in aligned
    # An offset of unknown divisibility is tested at run time in both variants; the store is proven.
    shift = cuda.split("shift_f32_a16(")[1].split("extern \"C\"")[0]
    assert "tsr_vec_load<float, 4, 16, true>" in shift and "tsr_vec_store<float, 4, 16, false>" in shift
    # Shared memory is 16-byte aligned with constant strides: proven in every variant.
    flip = cuda.split("flip_f16(")[1].split("extern \"C\"")[0]
    assert "tsr_vec_store<__half, 8, 16, false>(&s[0][0]" in flip


# ---- what NVRTC makes of it ------------------------------------------------------------------------------

needs_nvdisasm = pytest.mark.skipif(find_nvdisasm() is None, reason="nvdisasm not installed")


@functools.cache
def _sass(arch: str) -> tuple[str, tuple[str, ...]]:
    result = _compiled(arch)
    nv = compile_cuda(result.cuda, name="vec.cu", arch=arch)
    assert nv.cubin is not None and nv.warnings == ()
    for k in result.kernels:
        res = nv.kernel(k.c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0, (k.c_name, res)
    return disassemble(nv.cubin), tuple(k.c_name for k in result.kernels)


def _wide(ops: list[str], opcode: str) -> int:
    return sum(1 for op in ops if op.split(".")[0] == opcode and "128" in op.split("."))


@needs_nvdisasm
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_aligned_variants_use_128_bit_accesses(arch: str) -> None:
    text, names = _sass(arch)
    for t in TYPES:
        ops = instructions(function_sass(text, f"rows_{t}_a16"))
        assert _wide(ops, "LDG") == 1 and _wide(ops, "STG") == 1, (t, ops)
        assert not [op for op in ops if op.split(".")[0] in ("LDL", "STL")], t
        flip = instructions(function_sass(text, f"flip_{t}_a16"))
        assert _wide(flip, "LDG") == 1 and _wide(flip, "STG") == 1, (t, flip)
        assert _wide(flip, "LDS") == 1 and _wide(flip, "STS") == 1, (t, flip)


PIPELINED = """
@kernel tile[(32,)]
def rowsum(X: f32[m, n], out: mut f32[m]):
    s = tshared.alloc(f32[1, 128])
    i = group_id(0)
    t = tile_id(0)
    r = tregs(f32[4])
    acc = 0.0
    for c0 in tpipeline(0, n, 128, stages=2):
        tcopy_async(s, X[i:i + 1, c0:c0 + 128])
        r[:] = s[0, t * 4:t * 4 + 4]
        for k in static_range(4):
            acc += r[k]
    total = group_sum(acc)
    if t == 0 and i < m:
        out[i] = total
"""


@pytest.mark.parametrize("check_bounds", [False, True])
def test_a_vector_load_of_a_pipelined_shared_array_reads_the_iterations_stage(check_bounds: bool) -> None:
    mod = tessera.compile(PIPELINED, backend="cpu", check_bounds=check_bounds, path="pipelined.tsr")
    rng = np.random.default_rng(9)
    for m, n in ((3, 128), (2, 300), (4, 1000)):
        x = rng.integers(-5, 5, (m, n)).astype(np.float32)
        out = np.zeros(m, np.float32)
        mod.rowsum[m](x, out)
        assert np.array_equal(out, x.sum(axis=1)), (m, n)


@needs_nvdisasm
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_llmc_sample_moves_8_bf16_per_access(arch: str) -> None:
    """samples/llmc_bf16.tsr in its aligned variants: GELU one 128-bit load and store per tile (a
    1-D tensor: its length is assumed a multiple of 16 there), the layer norm 128-bit loads of X, w
    and b and stores of Y, untested."""
    from tessera.transpile.driver import load_source
    from tests.conftest import ROOT

    result = compile_source(load_source(str(ROOT / "samples" / "llmc_bf16.tsr")), options=CompileOptions(arch=arch))
    assert "tsr_vec_load<__nv_bfloat16, 8, 16, false>" in result.cuda.split("gelu_bf16_a16(")[1]
    nv = compile_cuda(result.cuda, name="llmc.cu", arch=arch)
    assert nv.cubin is not None
    text = disassemble(nv.cubin)
    gelu = instructions(function_sass(text, "gelu_bf16_a16"))
    assert _wide(gelu, "LDG") == 1 and _wide(gelu, "STG") == 1, gelu
    norm = instructions(function_sass(text, "layernorm_bf16_a16"))
    assert _wide(norm, "LDG") >= 5 and _wide(norm, "STG") >= 2, norm
