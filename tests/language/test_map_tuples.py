"""Tuple assignments in a map kernel's body (spec sections 6 and 8): `hi, lo = split(X)` of a device
function's results and `a, b = b * a, a + b` assign locals per element, like `h = X + B`. They used
to be refused as if they assigned single elements ("write Z[:] = ..."), followed by an "undefined
name" error at every later use. Region mode, fiber mode and check_bounds against NumPy, in both
alignment variants (the aligned f16 one computes in pairs), and NVRTC for sm_80 and sm_90."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source
from tests.conftest import CPU_MODES, cpu_mode_module
from tests.language.test_map_kernels import args_intact, place_args

pytestmark = pytest.mark.usefixtures("shared_cache")

SOURCE = """
const TAB: f32[4] = [1.0, 2.0, 4.0, 8.0]

@device
def split(x: f32) -> (f32, f32):
    return floor(x), x - floor(x)

@device
def sd(a: f16, b: f16) -> (f16, f16):
    return a + b, a - b

@kernel tile[(64,)] vectorize(4)
def parts(X: f32[M, N], b: f32[N], Y: mut f32[M, N], Z: mut i32[M, N]):
    hi, lo = split(X + b)
    p, q = lo, hi
    Y[:] = p * TAB[i32(q) % 4 if q >= 0.0 else 0]
    Z[:] = i32(hi)

@kernel tile[(64,)] vectorize(8)
def pairs(X: f16[n], Y: f16[n], Z: mut f16[n], W: mut f16[n]):
    a, b = X, Y
    a, b = b * a, a + b
    Z[:] = a - b
    W[:] = b

@kernel tile[(64,)] vectorize(8)
def calls(X: f16[M, N], b: f16[N], Z: mut f16[M, N], W: mut f16[M, N]):
    s, d = sd(X, b)
    Z[:] = s
    W[:] = d * d
"""


@pytest.fixture(scope="module", params=CPU_MODES)
def mod(request, tmp_path_factory):
    with cpu_mode_module(SOURCE, request.param, "tup.tsr", tmp_path_factory) as m:
        yield m


@pytest.mark.parametrize("misalign", [0, 1], ids=["aligned", "misaligned"])
def test_tuple_assignments_match_numpy(mod, misalign: int) -> None:
    rng = np.random.default_rng(21)
    for m, n in ((1, 1), (3, 7), (2, 64), (3, 100)):
        x = (rng.standard_normal((m, n)) * 3).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        args = place_args([x, b, np.zeros((m, n), np.float32), np.zeros((m, n), np.int32)], misalign)
        mod.parts(*args)
        hi = np.floor(x + b)
        lo = (x + b) - hi
        table = np.array([1, 2, 4, 8], np.float32)
        assert np.array_equal(args[2], lo * table[np.where(hi >= 0, np.fmod(hi, 4), 0).astype(int)]), (m, n)
        assert np.array_equal(args[3], hi.astype(np.int32)) and args_intact(args), (m, n)

        h, g = (rng.standard_normal(n).astype(np.float16) for _ in range(2))
        args = place_args([h, g, np.zeros(n, np.float16), np.zeros(n, np.float16)], misalign)
        mod.pairs(*args)
        a, c = g * h, h + g
        assert np.array_equal(args[2], a - c) and np.array_equal(args[3], c) and args_intact(args), n

        hm = rng.standard_normal((m, n)).astype(np.float16)
        args = place_args([hm, g, np.zeros((m, n), np.float16), np.zeros((m, n), np.float16)], misalign)
        mod.calls(*args)
        assert np.array_equal(args[2], hm + g) and np.array_equal(args[3], (hm - g) * (hm - g)), (m, n)
        assert args_intact(args)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_them_without_warnings(arch: str) -> None:
    result = compile_source(SourceFile("tup.tsr", SOURCE), options=CompileOptions(arch=arch))
    assert [k.c_name for k in result.kernels] == ["parts", "parts_a16", "pairs", "pairs_a16", "calls", "calls_a16"]
    nv = compile_cuda(result.cuda, name="tup.cu", arch=arch)
    assert nv.cubin is not None and nv.warnings == ()


@pytest.mark.parametrize("body", ["    a, b, c = two(X)\n    Y[:] = a + c\n",
                                  "    a, b = X\n    Y[:] = b\n",
                                  "    a, b, c = two(X[0])\n    Y[0] = a + c\n"],
                         ids=["map-kernel", "one-value", "plain-kernel"])
def test_a_rejected_tuple_assignment_is_one_error(body: str) -> None:
    """The names a rejected tuple assignment would declare used to be reported again, as undefined,
    at every later use."""
    source = ("@device\ndef two(a: f32) -> (f32, f32):\n    return a, a\n\n"
              "@kernel tile[(64,)]\ndef k(X: f32[n], Y: mut f32[n]):\n" + body)
    with pytest.raises(tessera.CompileError) as e:
        compile_source(SourceFile("bad.tsr", source), options=CompileOptions())
    assert len(e.value.diagnostics) == 1, str(e.value)
    assert "a tuple assignment to" in str(e.value) and e.value.diagnostics[0].loc.line == 7
