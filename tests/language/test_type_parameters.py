"""Element-type parameters (spec section 4; transpile/checks/generics.py): generic kernels run on the CPU
backend against NumPy for each binding, launch-time binding and its errors, `tesserac -D T=...`,
the variant cache, generic device functions, and NVRTC compiles of every binding."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
import tessera.variant
from samples.case import bf16_bits, bf16_values
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.cli.compile import run
from tessera.transpile.driver import compile_source

SCALE = """
@kernel tile[(128,)]
def scale[T](x: T[n], y: mut T[n], a: T):
    i = global_linear_id()
    if i < n:
        y[i] = x[i] * a
"""

HIST = """
@kernel tile[(256,)]
def hist[C: (u32, i32, u64)](data: u8[n], counts: mut C[256]):
    local = tshared.alloc(C[256])
    t = tile_linear_id()
    local[t] = 0
    tbarrier()
    for i in range(global_linear_id(), n, grid_tile_count()):
        atomic_add(local[i32(data[i])], C(1), scope="group")
    tbarrier()
    if local[t] > 0:
        atomic_add(counts[t], local[t])
"""

REDUCE = """
@device
def add3[T](a: T, b: T, c: T) -> T:
    return a + b + c

@kernel tile[(128,)]
def block_sum[T: (i32, i64, f32, f64)](x: T[n], out: mut T[grid_groups]):
    smem = tshared.alloc(T[128])
    t = tile_linear_id()
    acc: T = 0
    part = tregs(T[2], 0)
    for i in range(group_linear_id() * 128 + t, n, grid_tile_count()):
        part[i % 2] += x[i]
    acc = add3(acc, part[0], part[1])
    smem[t] = acc
    tbarrier()
    s = 64
    while s > 0:
        if t < s:
            smem[t] += smem[t + s]
        tbarrier()
        s //= 2
    if t == 0:
        out[group_linear_id()] = T(smem[0])
"""


@pytest.fixture
def mod(shared_cache):
    def load(source: str) -> tessera.api.Module:
        return tessera.compile(source, backend="cpu")
    return load


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.uint8])
def test_scale_matches_numpy(mod, dtype) -> None:
    m = mod(SCALE)
    x = (np.arange(1000) % 11).astype(dtype)
    y = np.zeros_like(x)
    m.scale(x, y, 3, grid=8)
    want = (x * dtype(3)).astype(dtype)
    np.testing.assert_array_equal(y, want)


def test_scale_bf16_is_named_by_keyword(mod) -> None:
    m = mod(SCALE)
    x = bf16_bits(np.linspace(-4, 4, 300))
    y = np.zeros_like(x)
    m.scale(x, y, 0.5, grid=3, T="bf16")
    np.testing.assert_array_equal(bf16_values(y), bf16_values(bf16_bits(bf16_values(x) * np.float32(0.5))))
    assert m.scale.info(T="bf16").c_name == "scale_T_bf16"
    # uint16 arrays alone bind T to u16 (bf16 bits must be named): a different variant
    y16 = np.zeros_like(x)
    m.scale(x, y16, 2, grid=3)
    np.testing.assert_array_equal(y16, (x * 2).astype(np.uint16))


@pytest.mark.parametrize("dtype", [np.uint32, np.int32, np.uint64])
def test_generic_atomic_histogram(mod, dtype) -> None:
    m = mod(HIST)
    data = np.random.default_rng(1).integers(0, 256, 20_000, dtype=np.uint8)
    counts = np.zeros(256, dtype)
    m.hist(data, counts, grid=5)
    np.testing.assert_array_equal(counts, np.bincount(data, minlength=256).astype(dtype))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_generic_reduction_and_device_function(mod, dtype) -> None:
    m = mod(REDUCE)
    x = (np.arange(5003) % 7).astype(dtype)
    out = np.zeros(4, dtype)
    m.block_sum(x, out)
    assert out.sum() == x.sum()


def test_launch_errors(mod) -> None:
    m = mod(SCALE)
    with pytest.raises(tessera.LaunchError, match=r"type parameter 'T' is f16 from parameter 'x' \(dtype float16\), "
                       r"but parameter 'y' has dtype float32"):
        m.scale(np.zeros(4, np.float16), np.zeros(4, np.float32), 1.0, grid=1)
    with pytest.raises(tessera.LaunchError, match=r"type parameter 'T' is not bound.*T='f32'"):
        m.scale.info()
    with pytest.raises(tessera.LaunchError, match=r"type parameter 'T' must be a .tsr scalar type"):
        m.scale(np.zeros(4, np.float32), np.zeros(4, np.float32), 1.0, grid=1, T="float128")
    with pytest.raises(tessera.LaunchError, match=r"is bf16 from T='bf16', but parameter 'x' has dtype float32"):
        m.scale(np.zeros(4, np.float32), np.zeros(4, np.float32), 1.0, grid=1, T="bf16")
    r = mod(REDUCE)
    with pytest.raises(tessera.LaunchError, match=r"type parameter 'T' is u8 from parameter 'x' \(dtype uint8\), "
                       r"which is not one of its allowed types \(i32, i64, f32, f64\)"):
        r.block_sum(np.zeros(4, np.uint8), np.zeros(1, np.uint8))


def test_a_scalar_alone_does_not_bind(mod) -> None:
    m = mod("@kernel tile[(32,)]\ndef k[T](out: mut f32[n], a: T):\n    out[0] = f32(a)\n")
    out = np.zeros(1, np.float32)
    with pytest.raises(tessera.LaunchError, match="a Python scalar has none"):
        m.k(out, 2.5, grid=1)
    m.k(out, 2.5, grid=1, T=np.float64)
    assert out[0] == 2.5


def test_each_binding_compiles_once(mod, monkeypatch) -> None:
    m = mod(SCALE)
    calls = []
    real = tessera.variant.compile_spec
    monkeypatch.setattr(tessera.variant, "compile_spec", lambda spec, front: calls.append(spec) or real(spec, front))
    x = np.ones(10, np.float32)
    m.scale(x, np.zeros_like(x), 2.0, grid=1)
    m.scale(x, np.zeros_like(x), 2.0, grid=1)
    x16 = np.ones(10, np.float16)
    m.scale(x16, np.zeros_like(x16), 2.0, grid=1)
    m.scale(x16, np.zeros_like(x16), 2.0, grid=1)
    # at most one compile per binding (none where the shared disk cache was warm)
    assert len(calls) <= 2 and len({repr(c) for c in calls}) == len(calls)
    assert {k[0] for k in m._variants if k[0]} == {"scale"}
    assert {dict(k[1])["T"] for k in m._variants if k[0]} == {"f32", "f16"}


def test_cache_key_includes_the_binding(fresh_cache) -> None:
    m = tessera.compile(SCALE, backend="cpu")
    x = np.ones(10, np.float32)
    m.scale(x, np.zeros_like(x), 2.0, grid=1)
    again = tessera.compile(SCALE, backend="cpu")
    y = np.zeros(10, np.float64)
    again.scale(np.ones(10), y, 2.0, grid=1)  # f64: not the cached f32 variant
    np.testing.assert_array_equal(y, 2.0)


def test_tesserac_define_picks_one_binding(tmp_path, capsys) -> None:
    path = tmp_path / "s.tsr"
    path.write_text(SCALE)
    out = tmp_path / "s.cu"
    assert run([str(path), "-o", str(out), "-D", "T=f16"]) == 0
    text = out.read_text()
    assert "scale_T_f16(const __half* __restrict__ x" in text and "scale_T_f32" not in text
    assert run([str(path), "-o", str(out)]) == 1
    assert "type parameter 'T' of kernel 'scale' has no type: pass -D T=f32" in capsys.readouterr().err


def test_tesserac_emits_every_allowed_binding(tmp_path) -> None:
    path = tmp_path / "h.tsr"
    path.write_text(HIST)
    out = tmp_path / "h.cu"
    assert run([str(path), "-o", str(out)]) == 0
    text = out.read_text()
    assert "// Kernels: hist_C_u32, hist_C_i32, hist_C_u64" in text
    assert run([str(path), "-o", str(out), "-D", "C=i32", "--kernel", "hist"]) == 0
    assert "// Kernels: hist_C_i32\n" in out.read_text()


def test_device_function_instances() -> None:
    cuda = compile_source(SourceFile("r.tsr", REDUCE), defines={"T": "f64"}).cuda
    assert "add3_T_f64(double a, double b, double c)" in cuda and "block_sum_T_f64(" in cuda
    r = compile_source(SourceFile("r.tsr", REDUCE))
    assert [k.c_name for k in r.kernels] == ["block_sum_T_i32", "block_sum_T_i64", "block_sum_T_f32",
                                             "block_sum_T_f64"]


def test_errors_name_the_binding() -> None:
    src = "@kernel tile[(32,)]\ndef k[T: (f32, u8)](x: T[n], out: mut f32[n]):\n    out[0] = sqrt(x[0]) + f32(x[0] / x[1])\n"
    with pytest.raises(tessera.CompileError) as e:
        compile_source(SourceFile("e.tsr", src))
    assert "with T = u8" in e.value.text and "with T = f32" not in e.value.text


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source", [SCALE, HIST, REDUCE], ids=["scale", "hist", "reduce"])
def test_nvrtc_compiles_every_binding_without_warnings(source: str, arch: str) -> None:
    nvrtc = pytest.importorskip("tessera.runtime.cuda.nvrtc")
    bindings = [{"T": t} for t in ("f16", "bf16", "f32", "f64", "i32", "u8")] if source is SCALE else [{}]
    for defines in bindings:
        result = compile_source(SourceFile("g.tsr", source), options=CompileOptions(arch=arch), defines=defines)
        nv = nvrtc.compile_cuda(result.cuda, name="g.cu", arch=arch)
        assert nv.warnings == (), (defines, nv.warnings)
        for k in result.kernels:
            assert nv.kernel(k.c_name).registers > 0


def test_generic_device_functions_with_array_parameters_and_several_results() -> None:
    """T binds from an array argument's element type too, and a generic function may return several values."""
    mod = tessera.compile("""
@device
def sumdiff[T](a: T, b: T) -> (T, T):
    return a + b, a - b

@device
def first_plus[T](v: T[n], k: i32) -> T:
    return v[k] + v[0]

@kernel tile[(64,)]
def k[T: (f32, f64)](x: T[n], y: mut T[n], z: mut T[n]):
    i = global_linear_id()
    if i < n:
        s, d = sumdiff(x[i], T(1))
        y[i] = s
        z[i] = d + first_plus(x, i)
""", backend="cpu")
    for dtype in (np.float32, np.float64):
        x = np.arange(100, dtype=dtype)
        y, z = np.zeros_like(x), np.zeros_like(x)
        mod.k(x, y, z, grid=2)
        assert np.array_equal(y, x + 1) and np.array_equal(z, (x - 1) + (x + x[0]))
