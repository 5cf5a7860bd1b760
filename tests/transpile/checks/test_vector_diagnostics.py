"""The misuses of per-tile vector access (spec section 15: `r[:] = X[i, j:j + 8]`,
`Y[i, j:j + 8] = r`), each a located error with the source line and a caret, checked the way
tests/transpile/checks/test_diagnostics.py checks its catalog; and the forms that are not errors."""

from __future__ import annotations

import pytest

from tessera.cli.compile import run
from tests.transpile.checks.catalog import (
    Case,
    check_catalog_case,
    kern,
    write_source,
)

HEAD = "@kernel tile[(32,)]\ndef k(X: f32[M, N], Y: mut f32[M, N], H: f16[M, N], G: mut f16[M, N], m: i32):\n"
TABLE = "const T: f32[8] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]\n"
SHAPE = "(r[:] = X[i, j:j + 8] or X[i, j:j + 8] = r)"


def vk(body: str) -> str:
    return kern(body, HEAD)


CATALOG = [
    Case("vec-extent-not-constant", vk("r = tregs(f32[8])\nr[:] = X[0, m:m + m]"), 4, 17,
         "the extent of a view (stop - start) must be a compile-time constant"),
    Case("vec-extent-mismatch", vk("r = tregs(f32[8])\nr[:] = X[0, 0:4]"), 4, 5,
         "'r' has 8 elements but the view of 'X' has 4"),
    Case("vec-store-extent-mismatch", vk("r = tregs(f32[8], 0.0)\nY[0, 0:16] = r"), 4, 5,
         "'r' has 8 elements but the view of 'Y' has 16"),
    Case("vec-view-rank", vk("r = tregs(f32[8])\nr[:] = X[0:2, 0:4]"), 4, 12,
         ("a register array moves to and from a 1-D view", "has 2 sliced dimensions [2, 4]")),
    Case("vec-regs-rank", vk("q = tregs(f32[2, 4])\nq[:] = X[0, 0:8]"), 4, 5,
         "a vector access moves a 1-D register array; 'q' is register array f32[2, 4]"),
    Case("vec-index-rank", vk("r = tregs(f32[8])\nr[:] = X[0:8]"), 4, 12, "'X' has 2 dimensions but is indexed with 1"),
    Case("vec-dtype-load", vk("r = tregs(f32[8])\nr[:] = H[0, 0:8]"), 4, 5,
         ("'r' holds f32 but 'H' has f16 elements", "declare r = tregs(f16[8])")),
    Case("vec-dtype-store-in-a-loop", vk("r = tregs(f32[8], 0.0)\nfor i in range(m):\n    if i > 2:\n        G[i, 0:8] = r"),
         6, 13, "'r' holds f32 but 'G' has f16 elements"),
    Case("vec-store-not-mut", vk("r = tregs(f32[8], 0.0)\nX[0, 0:8] = r"), 4, 5,
         "cannot store to 'X': it is not mut; declare the parameter as 'X: mut f32[...]'"),
    Case("vec-store-not-mut-f16", vk("r = tregs(f16[8], 0.0)\nwhile m > 0:\n    H[m, 0:8] = r"), 5, 9,
         "cannot store to 'H': it is not mut"),
    Case("vec-partial-regs", vk("r = tregs(f32[8])\nr[0:4] = X[0, 0:4]"), 4, 5,
         "a vector access moves the whole register array: write r[:]"),
    Case("vec-scalar-value", vk("r = tregs(f32[8])\nr[:] = 1.0"), 4, 12,
         ("a register array is assigned from a 1-D view of a tensor or shared array", "this is a value, not a view")),
    Case("vec-one-element", vk("r = tregs(f32[8])\nr[:] = X[0, 1]"), 4, 12,
         "this is one element of 'X'; a register array is assigned from a view with a slice"),
    Case("vec-regs-to-regs", vk("r = tregs(f32[8])\nq = tregs(f32[8], 0.0)\nr[:] = q"), 5, 12,
         "this is 'q', register array f32[8]"),
    Case("vec-store-to-table", TABLE + vk("r = tregs(f32[8], 0.0)\nT[0:8] = r"), 5, 5,
         "a register array is assigned to a 1-D view of a tensor or shared array"),
    Case("vec-launch-sized-shared-whole", vk("s = tshared.alloc(f32[m])\nr = tregs(f32[8])\nr[:] = s"), 5, 12,
         "vector access needs shared arrays of constant shape; 's' is sized at launch by 'm'"),
    Case("vec-launch-sized-shared-all", vk("s = tshared.alloc(f32[m])\nr = tregs(f32[8])\nr[:] = s[:]"), 5, 14,
         "the extent of a view (stop - start) must be a compile-time constant"),
    Case("vec-undefined-view", vk("r = tregs(f32[8])\nr[:] = Z[0, 0:8]"), 4, 12, "'Z'"),
    Case("vec-device-function-store-not-mut",
         "@device\ndef put(s: f32[32, 8], i: i32):\n    r = tregs(f32[8], 0.0)\n    s[i, :] = r\n", 4, 5,
         "cannot store to 's': it is not mut; declare the parameter as 's: mut f32[...]'"),
    Case("tregs-too-many-arguments", vk("r = tregs(f32[8], 0.0, 1.0)"), 3, 9,
         "tregs() takes a type like f32[4, 4] and an initial value"),
]


def test_catalog_is_unique() -> None:
    assert len({c.id for c in CATALOG}) == len(CATALOG)


@pytest.mark.parametrize("case", CATALOG, ids=lambda c: c.id)
def test_vector_access_misuse(case: Case, tmp_path, capsys) -> None:
    check_catalog_case(case, tmp_path, capsys)


VALID = {
    "global-load-store": vk("r = tregs(f32[8])\nr[:] = X[0, 0:8]\nY[1, 8:16] = r"),
    "f16-in-a-loop-and-a-branch": vk("r = tregs(f16[8])\nfor i in range(m):\n    if i % 2 == 0:\n"
                                     "        r[:] = H[i, 8:16]\n        G[i, 0:8] = r"),
    "shared-rows-and-whole": vk("s = tshared.alloc(f32[4, 8])\nt = tshared.alloc(f32[8])\nr = tregs(f32[8])\n"
                                "r[:] = s[1, :]\ns[2, 0:8] = r\nt[:] = r\nr[:] = t\nY[0, 0:8] = r"),
    "a-column": vk("r = tregs(f32[4])\nr[:] = X[0:4, 3]\nY[4:8, 0] = r"),
    "top-level-load-is-not-a-map-kernel": vk("r = tregs(f32[8])\nr[:] = X[m, 0:8]\nY[m, 0:8] = r"),
    "launch-sized-shared": vk("s = tshared.alloc(f32[m])\nq = tshared.alloc(f16[m, 8], pad=1)\nr = tregs(f32[8])\n"
                              "r[:] = s[8:16]\ns[m - 8:m] = r\nh = tregs(f16[8])\nh[:] = q[m - 1, :]\nG[0, 0:8] = h"),
    "device-function-array-parameters": "@device\ndef first(v: f32[a, b], s: mut f32[4, 8], i: i32) -> f32:\n"
                                        "    r = tregs(f32[4])\n    r[:] = v[i, i:i + 4]\n    s[i % 4, 4:8] = r\n"
                                        "    return r[0]\n" + vk("s = tshared.alloc(f32[4, 8], pad=1)\n"
                                                                "Y[0, 0] = first(X, s, m)"),
}


@pytest.mark.parametrize("name", sorted(VALID))
def test_vector_access_forms_compile_without_warnings(name: str, tmp_path, capsys) -> None:
    path = write_source(tmp_path, VALID[name])
    assert run([str(path), "-o", str(tmp_path / "v.cu"), "--arch", "sm_80", "--check"]) == 0, capsys.readouterr().err
    assert "no warnings" in capsys.readouterr().err
