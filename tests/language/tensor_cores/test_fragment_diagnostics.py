"""One located error per mistake in fragment kernels (spec sections 10 and 14): a fragment whose
declaration is refused, or a misspelt fragment name, is reported once, where it is, and the kernel's
later statements on it add nothing — no claim that `tload()` is not allowed in a map kernel (a
misspelt `G[:] = ...` made the kernel a map kernel), that a top-level `O[:] = ...` is "inside a
block", or that a reduction of the refused fragment "reads none". A map kernel's misspelt target
is still only an undefined name."""

from __future__ import annotations

import pytest

from tessera.base.errors import CompileError, SourceFile
from tessera.base.options import CompileOptions
from tessera.transpile.driver import compile_source

KERNEL = """@kernel tile[(128,)]
def k(A: f16[M, K], X: f32[M, N], b: f32[N], Y: mut f32[M, N]):
    As = tshared.alloc(f16[64, 32])
    Bs = tshared.alloc(f16[32, 24])
    O = tfrag(f32[64, 24], 0.0)
    l = tfrag(f32[64])
    c = tfrag(f32[1, 24])
    tmma(O, As, Bs)
    tload(O, X[0:64, 0:24])
    O[:] = O * 2.0 + b[0:24][None, :]
    l[:] = tmax(O, axis=1) + tsum(O * O, axis=1)
    c[:] = tsum(abs(O), axis=0)
    O[:] = O - tmin(O, axis=1)[:, None] + l[:, None]
    tstore(Y[0:64, 0:24], O)
"""

CASES = {
    "refused-fragment": (KERNEL.replace("f32[64, 24], 0.0", "f32[64, 20], 0.0"), 5, "64 x 20 fragment"),
    "refused-row-vector": (KERNEL.replace("f32[64])", "f32[60])"), 6, "not 60"),
    "misspelt-fragment": (KERNEL.replace("    O[:] = O * 2.0", "    Q[:] = O * 2.0"), 10, "undefined name 'Q'"),
    "misspelt-map-target": ("@kernel tile[(128,)]\ndef m(X: f32[n], Y: mut f32[n]):\n    t = X * 2.0\n"
                            "    Yy[:] = t\n", 4, "undefined name 'Yy'"),
}


def test_the_kernel_compiles_as_written() -> None:
    compile_source(SourceFile("k.tsr", KERNEL), options=CompileOptions(arch="sm_80"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_mistake_is_one_located_error(name: str) -> None:
    src, line, message = CASES[name]
    with pytest.raises(CompileError) as info:
        compile_source(SourceFile("k.tsr", src), options=CompileOptions(arch="sm_80"))
    errors = [d for d in info.value.diagnostics if d.severity == "error"]
    assert [(d.loc.line, message in d.message) for d in errors] == [(line, True)], info.value.text
