"""Per-tile vector access (spec section 15) of the arrays a kernel does not lay out itself: a device
function's array parameters (tensors and shared arrays passed by the caller, `r[:] = v[i, j:j + 4]`
in a `@device` function, as a CUDA helper does with `float4` loads) and launch-sized shared arrays
(`tshared.alloc(f32[nb])`, spec section 7). Their addresses and row strides are known only at run
time, so each access is tested there (16-byte accesses where the address and the view's edges
allow, single elements otherwise); both used to be refused. Region mode, fiber mode and
check_bounds (the race detector sees shared memory through a parameter) against NumPy, and the
128-bit accesses NVRTC makes of them."""

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
from tests.conftest import CPU_MODES, cpu_mode_module
from tests.language.test_map_kernels import args_intact, place

pytestmark = pytest.mark.usefixtures("shared_cache")

SOURCE = """
@device
def load4(X: f32[m, n], i: i32, j: i32) -> f32:
    r = tregs(f32[4])
    r[:] = X[i, j:j + 4]
    return r[0] + r[1] * 10.0 + r[2] * 100.0 + r[3] * 1000.0

@device
def put4(Y: mut f32[m, n], i: i32, j: i32, v: f32):
    r = tregs(f32[4])
    for e in static_range(4):
        r[e] = v + f32(e)
    Y[i, j:j + 4] = r

@device
def swap8(s: mut f16[32, 8], t: i32):
    r = tregs(f16[8])
    r[:] = s[31 - t, :]
    tbarrier()
    s[t, 0:8] = r

@kernel tile[(32,)]
def dev(X: f32[m, n], Y: mut f32[m, n], Z: mut f32[m, n]):
    t = tile_id(0)
    i = group_id(0)
    j = t * 5 - 3
    v = load4(X, i, j)
    if t % 2 == 0:
        put4(Y, i, j, v)
    if t < n:
        Z[i, t] = v

@kernel tile[(32,)]
def rows16(H: f16[m, 8], G: mut f16[m, 8]):
    s = tshared.alloc(f16[32, 8], pad=8)
    t = tile_id(0)
    row = group_id(0) * 32 + t
    for e in static_range(8):
        s[t, e] = H[row, e] if row < m else f16(0.0)
    tbarrier()
    swap8(s, t)
    tbarrier()
    for e in static_range(8):
        if row < m:
            G[row, e] = s[t, e]

@kernel tile[(32,)]
def sized(X: f32[m, n], Y: mut f32[p, q], off: i32, nb: i32, rows: i32):
    d = tshared.alloc(f32[nb])
    e = tshared.alloc(f32[rows, 17], pad=3)
    t = tile_id(0)
    i = group_id(0)
    r = tregs(f32[4])
    for c in range(0, 20, 4):
        r[:] = X[i, c + off:c + off + 4]
        d[t * 20 + c + off:t * 20 + c + off + 4] = r
        if c < 17:
            e[t, c:c + 4] = r
    tbarrier()
    for c in range(0, 20, 4):
        r[:] = d[(31 - t) * 20 + c + off:(31 - t) * 20 + c + off + 4]
        Y[i * 32 + t, c:c + 4] = r
        r[:] = e[31 - t, c:c + 4]
        Y[i * 32 + t, 20 + c:24 + c] = r
"""


@pytest.fixture(scope="module", params=CPU_MODES)
def mod(request, tmp_path_factory):
    with cpu_mode_module(SOURCE, request.param, "vp.tsr", tmp_path_factory) as m:
        yield m


def _row(x: np.ndarray, i: int, j: int, count: int) -> np.ndarray:
    """Row i's elements j .. j + count - 1, zero outside the tensor."""
    out = np.zeros(count, x.dtype)
    for e in range(count):
        if 0 <= i < x.shape[0] and 0 <= j + e < x.shape[1]:
            out[e] = x[i, j + e]
    return out


@pytest.mark.parametrize("misalign", [0, 1], ids=["aligned", "misaligned"])
def test_a_device_function_moves_views_of_its_tensor_parameters(mod, misalign: int) -> None:
    rng = np.random.default_rng(11)
    for m, n in ((2, 32), (3, 160), (1, 7), (2, 200)):
        x = rng.integers(0, 9, (m, n)).astype(np.float32)
        args = [place(x, misalign), place(np.full((m, n), -1, np.float32), misalign, 0x43),
                place(np.full((m, n), -1, np.float32), misalign, 0x45)]
        mod.dev[m](*args)
        want_y, want_z = np.full((m, n), -1, np.float32), np.full((m, n), -1, np.float32)
        for i in range(m):
            for t in range(32):
                j = t * 5 - 3
                v = np.float32(sum(float(a) * 10.0 ** e for e, a in enumerate(_row(x, i, j, 4))))
                if t % 2 == 0:
                    for e in range(4):
                        if 0 <= j + e < n:
                            want_y[i, j + e] = v + e
                if t < n:
                    want_z[i, t] = v
        assert np.array_equal(args[1], want_y) and np.array_equal(args[2], want_z), (m, n)
        assert args_intact(args), "a write outside the tensor"


def test_a_device_function_moves_rows_of_a_shared_parameter(mod) -> None:
    rng = np.random.default_rng(12)
    for m in (1, 32, 45):
        h = rng.standard_normal((m, 8)).astype(np.float16)
        g = np.zeros_like(h)
        mod.rows16[-(-m // 32)](h, g)
        padded = np.zeros((-(-m // 32) * 32, 8), np.float16)
        padded[:m] = h
        assert np.array_equal(g, padded.reshape(-1, 32, 8)[:, ::-1].reshape(-1, 8)[:m]), m


@pytest.mark.parametrize("off", [0, 1, 2, 4, 5])
def test_launch_sized_shared_arrays(mod, off: int) -> None:
    x = np.random.default_rng(off).integers(0, 9, (2, 40)).astype(np.float32)
    args = [place(x), place(np.full((64, 40), -1, np.float32), 0, 0x43)]
    mod.sized[2](args[0], args[1], off, 32 * 20 + 8, 32)
    want = np.zeros((64, 40), np.float32)
    for i in range(2):
        for t in range(32):
            row = _row(x, i, off, 20)
            want[i * 32 + 31 - t, :20] = row
            want[i * 32 + 31 - t, 20:37] = row[:17]  # e's rows have 17 elements: the rest reads zero
    assert np.array_equal(args[1], want) and args_intact(args)


RACY = """
@device
def put(s: mut f32[64], j: i32):
    r = tregs(f32[4], 1.0)
    s[j:j + 4] = r

@kernel tile[(32,)]
def racy(Y: mut f32[n]):
    s = tshared.alloc(f32[64])
    put(s, tile_id(0))
    tbarrier()
    Y[tile_id(0)] = s[tile_id(0)]
"""


def test_the_race_detector_sees_shared_memory_through_a_parameter() -> None:
    mod = tessera.compile(RACY, backend="cpu", check_bounds=True, path="racy.tsr")
    with pytest.raises(tessera.LaunchError, match="shared-memory data race: tile 0 writes it at line 5"):
        mod.racy[1](np.zeros(32, np.float32))


# ---- what NVRTC makes of it ------------------------------------------------------------------------------

needs_nvdisasm = pytest.mark.skipif(find_nvdisasm() is None, reason="nvdisasm not installed")


@functools.cache
def _sass(arch: str, check_bounds: bool) -> str:
    result = compile_source(SourceFile("vp.tsr", SOURCE), options=CompileOptions(arch=arch, check_bounds=check_bounds))
    nv = compile_cuda(result.cuda, name="vp.cu", arch=arch)
    assert nv.cubin is not None and nv.warnings == ()
    return disassemble(nv.cubin)


def _wide(ops: list[str], opcode: str) -> int:
    return sum(1 for op in ops if op.split(".")[0] == opcode and "128" in op.split("."))


@needs_nvdisasm
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_128_bit_accesses_where_the_run_time_test_allows(arch: str) -> None:
    text = _sass(arch, False)
    dev = instructions(function_sass(text, "dev"))
    assert _wide(dev, "LDG") >= 1 and _wide(dev, "STG") >= 1, dev
    sized = instructions(function_sass(text, "sized_a16"))
    assert _wide(sized, "LDS") >= 1 and _wide(sized, "STS") >= 1, sized
    assert _sass(arch, True)  # the race detector's build compiles without warnings too
