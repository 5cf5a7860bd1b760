"""Code generation: the typing rules of spec section 6 as they show in the emitted C, the
kernel header, shared memory, scoping, variants and options. Every program here also
compiles with NVRTC."""

from __future__ import annotations

import pytest

from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source
from tests.conftest import ROOT


def emit(body: str, params: str = "x: f32[n], out: mut f32[n]", header: str = "@kernel tile[(128,)]",
         prelude: str = "", arch: str = "sm_90", debug: bool = False, line_info: bool = False, **kw) -> str:
    text = f"{prelude}\n{header}\ndef k({params}):\n" + "".join("    " + ln + "\n" for ln in body.splitlines())
    result = compile_source(SourceFile("t.tsr", text), CompileOptions(arch=arch, debug=debug, line_info=line_info), **kw)
    nv = compile_cuda(result.cuda, arch=arch)
    assert nv.warnings == (), nv.warnings
    return result.cuda[result.cuda.index("extern \"C\" __global__"):]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_feature_program_compiles_cleanly(arch: str) -> None:
    src = SourceFile("features.tsr", (ROOT / "tests" / "programs" / "features.tsr").read_text())
    for debug in (False, True):
        result = compile_source(src, options=CompileOptions(arch=arch, debug=debug))
        nv = compile_cuda(result.cuda, arch=arch)
        assert nv.warnings == ()
        assert nv.kernel("features").spill_stores == 0


def test_f16_arithmetic_stays_f16_and_rounds() -> None:
    c = emit("h2 = h[0] * 2\nout[0] = f32(h2)", "h: f16[n], out: mut f32[n]")
    assert "float h2 = tsr_round_f16(__half2float(h[0]) * 2.0f);" in c


def test_f16_with_bf16_gives_f32() -> None:
    c = emit("v = a[0] + b[0]\nout[0] = v", "a: f16[n], b: bf16[n], out: mut f32[n]")
    assert "float v = __half2float(a[0]) + __bfloat162float(b[0]);" in c


def test_literals_take_the_other_operand_type() -> None:
    c = emit("d = x[0] * 2\ne = 0.5 * m\nout[0] = f32(d) + e", "x: f64[n], out: mut f32[n], m: i32")
    assert "double d = x[0] * 2.0;" in c
    assert "float e = 0.5f * (float)m;" in c


def test_integer_floor_division_truncates_like_c_and_float_floors() -> None:
    c = emit("i = n // 3 + n % 3\nf = x[0] // 2.0\ng = x[0] % 2.0\nout[0] = f32(i) + f + g")
    assert "int i = n / 3 + n % 3;" in c
    assert "float f = floorf(x[0] / 2.0f);" in c
    assert "float g = fmodf(x[0], 2.0f);" in c


def test_int_with_float_gives_float() -> None:
    c = emit("i = tile_linear_id()\nv = i * x[0]\nout[0] = v")
    assert "float v = (float)i * x[0];" in c


def test_narrow_integers_wrap() -> None:
    c = emit("v = a[0] + a[1]\nout[0] = f32(v)", "a: u8[n], out: mut f32[n]")
    assert "unsigned char v = (unsigned char)(a[0] + a[1]);" in c


def test_float_to_int_cast_saturates() -> None:
    c = emit("i = i32(x[0])\nout[0] = f32(i)")
    assert "int i = tsr_f2i<int>(x[0]);" in c


def test_ternary_and_boolean_operators() -> None:
    c = emit("t = tile_linear_id()\nv = 1.0 if t > 3 and not t == 5 or t < 0 else 2.0\nout[t] = v")
    assert "float v = t > 3 && !(t == 5) || t < 0 ? 1.0f : 2.0f;" in c


def test_scoped_atomics() -> None:
    c = emit('atomic_add(out[0], 1.0, scope="group")\natomic_add(out[1], 1.0)\n'
             'atomic_add(out[2], 1.0, scope="mesh")\nold = atomic_exch(out[3], 2.0)\nout[4] = old')
    assert "atomicAdd_block(&out[0], 1.0f);" in c
    assert "atomicAdd(&out[1], 1.0f);" in c
    assert "atomicAdd_system(&out[2], 1.0f);" in c
    assert "float old = atomicExch(&out[3], 2.0f);" in c


def test_padded_shared_and_dynamic_above_48k() -> None:
    c = emit("a = tshared.alloc(f32[64, 32], pad=1)\na[0, 0] = x[0]\ntbarrier()\nout[0] = a[0, 0]")
    assert "__shared__ __align__(16) float a[64][33];" in c
    c = emit("a = tshared.alloc(f32[128, 128])\nb = tshared.alloc(f16[8])\na[0, 0] = x[0]\n"
             "b[1] = x[1]\ntbarrier()\nout[0] = a[0, 0] + f32(b[1])")
    assert "TSR_DYNAMIC_SMEM(tsr_dynamic_smem);" in c
    assert "float (*a)[128] = reinterpret_cast<float (*)[128]>(tsr_dynamic_smem + 0);" in c
    assert "__half *b = reinterpret_cast<__half*>(tsr_dynamic_smem + 65536);" in c


def test_python_scoping_hoists_declarations() -> None:
    c = emit("t = tile_linear_id()\nif t > 3:\n    v = 1.0\nelse:\n    v = 2.0\nout[t] = v")
    assert "float v;  // assigned in an inner block, used outside it" in c
    assert "v = 1.0f;  // line" in c


def test_const_parameters_make_named_variants() -> None:
    params = "x: f32[n], out: mut f32[n], BM: const i32 = 64, scale: const f32 = 0.5"
    c = emit("out[0] = x[0] * f32(BM) * scale", params)
    assert "k_BM64_scale0p5(" in c
    assert "constexpr int BM = 64;" in c
    c = emit("out[0] = x[0] * f32(BM)", "x: f32[n], out: mut f32[n], BM: const i32 = 64", defines={"BM": 32})
    assert "k_BM32(" in c


def test_header_clauses() -> None:
    c = emit("out[0] = x[0]", header="@kernel tile[(16, 8, 2)] launch_bounds(3)")
    assert "__launch_bounds__(256, 3)" in c


def test_tile_indices_use_the_group_shape() -> None:
    c = emit("out[tile_linear_id()] = f32(group_shape(1) + warp_id() + lane_id())", header="@kernel tile[(16, 8)]")
    assert "out[(int)(threadIdx.x + 16u * threadIdx.y)] = (float)(8 + ((int)(threadIdx.x + 16u * threadIdx.y) >> 5)" in c


def test_line_info_and_debug_asserts() -> None:
    c = emit('tassert(x[0] > 0.0, "positive")\nout[0] = x[0]', debug=True, line_info=True)
    assert '#line 4 "t.tsr"' in c
    assert 'tsr_assert_fail("k", "t.tsr", 4, "positive");' in c
    c = emit('tassert(x[0] > 0.0, "positive")\nout[0] = x[0]')
    assert "tsr_assert_fail" not in c


def test_tprint_formats_follow_argument_types() -> None:
    c = emit('tprint("%d %f %x\\n", q[0], x[0], u[0])', "x: f32[n], q: i64[n], u: u32[n]")
    assert 'printf("%lld %f %x\\n", (long long)(q[0]), (double)(x[0]), (unsigned)(u[0]));' in c


def test_hostile_names_are_renamed() -> None:
    c = emit("float = x[0]\nthreadIdx = 1.0\n__init = 2.0\nout[0] = float + threadIdx + __init",
             "x: f32[n], out: mut f32[n]")
    assert "float tsr_u_float = x[0];" in c
    assert "float tsr_u_threadIdx = 1.0f;" in c
    assert "float tsr_u___init = 2.0f;" in c


def test_range_forms() -> None:
    c = emit("for i in range(10):\n    out[i] = 0.0\nfor j in range(n, 0, -1):\n    out[j] = 1.0\n"
             "for m in range(0, n, s):\n    out[m] = 2.0", "out: mut f32[n], s: i32")
    assert "for (int i = 0; i < 10; ++i) {" in c
    assert "for (int j = n; j > 0; --j) {" in c
    assert "for (int m = 0; (s > 0 ? m < n : m > n); m += s) {" in c


def test_tcopy_uses_wide_accesses_and_clips_at_the_edge() -> None:
    c = emit("a = tshared.alloc(f32[8, 64])\nr0 = group_id(0) * 8\ntcopy(a, x[r0:r0 + 8, 0:64])\ntbarrier()\n"
             "out[0, 0] = a[0, 0]", "x: f32[R, C], out: mut f32[R, C]")
    # 16-byte chunks; alignment of x and C is tested once per copy in the generic variant ...
    # (r0 is proven non-negative: no lower-edge counts)
    assert "tsr_copy<float, 1, 8, 64, 128, 16, true>(&a[0][0], 0, 64, 1, 1, 8, 64, 0, 0, 0, x + (r0) * (C), 0, C, 1, " \
           "1, (int)(R - (r0)), C, 0, 0, 0," in c
    # ... and proven in the aligned one (x 16-byte aligned, C a multiple of 16)
    assert "tsr_copy<float, 1, 8, 64, 128, 16, false>(&a[0][0]" in c


def test_register_arrays_of_every_integer_type_are_filled() -> None:
    """`tsr_fill` names its element type: an i8/u16 array is filled from an `int` literal."""
    c = emit("r = tregs(i8[4], 3)\ns = tregs(u16[2, 2], 0)\nout[0] = f32(r[1] + i8(s[1, 1]))")
    assert "tsr_fill<4, signed char>(&r[0], 3);" in c
    assert "tsr_fill<4, unsigned short>(&s[0][0], 0u);" in c
