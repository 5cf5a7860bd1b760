"""Every program `tesserac` accepts compiles with NVRTC and with the host compiler (spec section 10).
First the programs that did not (each was accepted, then failed in one C compiler), run on the CPU
backend against what the language says; then a bounded number of the grammar fuzzer's well-typed
programs, compiled by both."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tessera
from tessera.base.errors import CompileError, LaunchError, SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.host.build import find_cxx, kernel_command, stub_headers
from tessera.transpile.driver import compile_source
from tests.frontend.test_fuzz import FUZZ, TYPED_PRELUDE, typed_statements

# Recursive strategies describe themselves in events with a huge repr; that is harmless.
pytestmark = [pytest.mark.filterwarnings("ignore:Generating overly large repr"),
              pytest.mark.usefixtures("shared_cache")]


def both(text: str, **kw) -> tessera.api.Module:
    """NVRTC compiles the program for sm_80 without warnings, and the CPU backend builds it."""
    cuda = compile_source(SourceFile("t.tsr", text), **kw).cuda
    assert compile_cuda(cuda, name="t.cu", arch="sm_80").warnings == ()
    return tessera.compile(text, backend="cpu")


def test_floor_division_of_narrow_unsigned_by_a_variable() -> None:
    # `31 // a` with a: u16 failed to instantiate tsr_div (unsigned int and unsigned short).
    mod = both("@kernel tile[(1,)]\ndef k(a: u16, b: i8, y: mut u16[2], z: mut i8[1]):\n"
               "    y[0] = 31 // a\n    y[1] = 31 % a\n    z[0] = b // i8(-2)\n")
    y, z = np.zeros(2, np.uint16), np.zeros(1, np.int8)
    mod.k(7, -7, y, z, grid=1)
    assert y.tolist() == [4, 3] and z[0] == 3


def test_variant_name_that_another_kernel_has() -> None:
    # `k` with A=1 is emitted as k_A1 unless a kernel is literally named k_A1 (two functions of one name).
    text = ("@kernel tile[(1,)]\ndef k(y: mut i32[1], A: const i32 = 1):\n    y[0] = A\n\n"
            "@kernel tile[(1,)]\ndef k_A1(y: mut i32[1]):\n    y[0] = 2\n")
    mod = both(text)
    y = np.zeros(1, np.int32)
    mod.k(y, grid=1)
    assert y[0] == 1
    mod.k_A1(y, grid=1)
    assert y[0] == 2
    names = [k.c_name for k in compile_source(SourceFile("t.tsr", text)).kernels]
    assert names == ["k_A1_v2", "k_A1"]


def test_non_finite_constants() -> None:
    # An f16 const parameter set to 70000 is inf; a constexpr of it was a compile error on both.
    text = ("@kernel tile[(1,)]\ndef k(y: mut f32[2], h: mut f16[1], H: const f16 = 1.0):\n"
            "    y[0] = H\n    y[1] = H - H\n    h[0] = H\n")
    mod = both(text, defines={"H": 70000.0})
    y, h = np.zeros(2, np.float32), np.zeros(1, np.float16)
    mod.k(y, h, grid=1, H=70000.0)
    assert y[0] == np.inf and np.isnan(y[1]) and h[0] == np.inf


def test_recursive_device_function() -> None:
    # A recursive device function was __forceinline__: the host compiler cannot inline recursion.
    mod = both("@device\ndef fib(n: i32) -> i32:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n"
               "@kernel tile[(1,)]\ndef k(y: mut i32[1]):\n    y[0] = fib(12)\n")
    y = np.zeros(1, np.int32)
    mod.k(y, grid=1)
    assert y[0] == 144


def test_const_parameter_declared_after_the_tensor_it_sizes() -> None:
    # `x: f32[G, n], ..., G: const i32` was refused ("parameter 'G' has the name of the shape symbol
    # 'G'"): the tensor's dimension became a shape symbol before the const parameter was seen. Any
    # order works, as for scalar parameters, and the launch checks the extent against the value.
    mod = both("@kernel tile[(32,)]\ndef k(x: f32[G, n], out: mut f32[G], G: const i32 = 8):\n"
               "    t = tile_linear_id()\n    if t < G:\n        out[t] = x[t, n - 1] * 2.0\n")
    x = np.arange(32, dtype=np.float32).reshape(16, 2)
    out = np.zeros(16, np.float32)
    mod.k(x, out, G=16, grid=1)
    np.testing.assert_array_equal(out, x[:, 1] * 2)
    with pytest.raises(LaunchError, match=r"parameter 'x': dimension 0 must be 8, got 16"):
        mod.k(x, out, grid=1)


def test_integer_minimum_literals() -> None:
    mod = both("@kernel tile[(1,)]\ndef k(a: i32, y: mut i64[3]):\n    y[0] = -2147483648\n"
               "    y[1] = -9223372036854775808\n    y[2] = i64(a + -2147483648)\n")
    y = np.zeros(3, np.int64)
    mod.k(5, y, grid=1)
    assert y.tolist() == [-2**31, -2**63, 5 - 2**31]


def test_integer_literals_in_every_base() -> None:
    """Binary and octal literals as in Python (`0b`, `0o`, with `_`); zeros alone may repeat."""
    mod = both("const MASK = 0b1111_0000\n@kernel tile[(1,)]\ndef k(y: mut i64[6]):\n    y[0] = MASK\n"
               "    y[1] = 0o17\n    y[2] = 0O7_7\n    y[3] = 0B1\n    y[4] = 00\n    y[5] = 0xf_f + 0_0\n")
    y = np.zeros(6, np.int64)
    mod.k(y, grid=1)
    assert y.tolist() == [0b1111_0000, 0o17, 0o77, 1, 0, 255]


# ---- the fuzzer's programs ------------------------------------------------------------------------------

def host_syntax_check(cuda: str) -> str:
    """The host compiler's complaints about the emitted C compiled as the CPU backend does ('' if none)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.cu"
        src.write_text(cuda)
        cmd = kernel_command(find_cxx(), src, Path(tmp) / "kernel.o", stub_headers(Path(tmp) / "stubs"),
                             ("-fsyntax-only", "-x", "c++"))
        p = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tmp)
        return (p.stdout + p.stderr).strip() if p.returncode else ""


@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None, reason="no C++ compiler")
@settings(FUZZ, max_examples=25)
@given(st.sampled_from(["tile[(128,)]", "tile[(64, 2)] shared(2_KiB)", "tile[(256,)] launch_bounds(2)"]),
       typed_statements)
def test_accepted_fuzz_programs_compile_with_nvrtc_and_the_host(header: str, body: list[str]) -> None:
    text = TYPED_PRELUDE + f"@kernel {header}\ndef kern(x: f32[n], out: mut f32[n], m: i32, alpha: f32):\n" + \
        "    a = 0.0\n    i = tile_linear_id()\n    sm = tshared.alloc(f32[64])\n    r = tregs(f32[2, 2], 0.0)\n" + \
        "".join(f"    {ln}\n" for ln in body)
    try:
        cuda = compile_source(SourceFile("fuzz.tsr", text), options=CompileOptions(arch="sm_80")).cuda
    except CompileError:
        assume(False)
        return
    nv = compile_cuda(cuda, name="fuzz.cu", arch="sm_80")
    assert nv.warnings == (), (text, nv.warnings)
    assert host_syntax_check(cuda) == "", text


def test_comparison_of_an_unsigned_value_with_zero() -> None:
    # NVRTC warned "pointless comparison of unsigned integer with zero" (#186) on valid code.
    mod = both("@kernel tile[(4,)]\ndef k(a: u32[4], y: mut u32[4]):\n    i = tile_linear_id()\n"
               "    if a[i] >= 0 and i < 4:\n        y[i] = a[i] + 1\n")
    y = np.zeros(4, np.uint32)
    mod.k(np.arange(4, dtype=np.uint32), y, grid=1)
    assert y.tolist() == [1, 2, 3, 4]
