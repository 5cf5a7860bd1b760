"""The extent of a view is `stop - start` when that is a compile-time constant (spec section 7),
however the two bounds spell the same run-time terms: a stencil's halo `A[y0 - 1:y0 + BY + 1]`
(extent BY + 2), `A[2 * r - R:2 * r + R + 1]`, `A[-x0:4 - x0]`. A seeded generator writes random
linear bounds (run-time terms with constant coefficients, subtractions, negations and products
by constants, spelled differently in start and stop) and checks the checker against a model: the
view is accepted exactly when the run-time terms cancel, and then copies what NumPy's slice of
the zero-padded tensor holds."""

from __future__ import annotations

import random

import numpy as np
import pytest

import tessera
from tessera.base.errors import CompileError, SourceFile
from tessera.transpile.driver import compile_source

pytestmark = pytest.mark.usefixtures("shared_cache")

STENCIL = """
const BY = 8

@kernel tile[(16,)]
def halo(A: f32[n], out: mut f32[grid_groups, BY + 2]):
    s = tshared.alloc(f32[BY + 2])
    y0 = group_id(0) * BY
    tcopy(s, A[y0 - 1:y0 + BY + 1])
    tbarrier()
    if tile_linear_id() < BY + 2:
        out[group_id(0), tile_linear_id()] = s[tile_linear_id()]
"""


def padded_windows(A: np.ndarray, groups: int, width: int, start) -> np.ndarray:  # noqa: ANN001 - start: g -> int
    """Row g: A[start(g):start(g) + width], zero outside A."""
    out = np.zeros((groups, width), A.dtype)
    for g in range(groups):
        for k in range(width):
            i = start(g) + k
            if 0 <= i < len(A):
                out[g, k] = A[i]
    return out


@pytest.mark.parametrize("check_bounds", [False, True])
def test_a_halo_spelled_around_the_group_start_is_a_constant_extent(check_bounds: bool) -> None:
    A = np.arange(1, 21, dtype=np.float32)
    out = np.full((3, 10), -1.0, np.float32)
    tessera.compile(STENCIL, backend="cpu", check_bounds=check_bounds).halo(A, out)
    np.testing.assert_array_equal(out, padded_windows(A, 3, 10, lambda g: 8 * g - 1))


@pytest.mark.parametrize("view", ["A[2 * y0 - 3:2 * y0 + 7]", "A[-y0:10 - y0]", "A[y0 - (3 - 1):y0 + 8]",
                                  "A[3 * (y0 - 1):3 * y0 + 7]", "A[+y0 - 1:y0 + 9]"])
def test_bounds_with_the_same_run_time_terms_compile(view: str) -> None:
    compile_source(SourceFile("v.tsr", STENCIL.replace("A[y0 - 1:y0 + BY + 1]", view)))


@pytest.mark.parametrize("view", ["A[y0 - 1:2 * y0 + 9]", "A[y0:n]", "A[y0 * y0:y0 + 10]"])
def test_bounds_whose_difference_is_not_constant_are_located_errors(view: str) -> None:
    with pytest.raises(CompileError) as e:
        compile_source(SourceFile("v.tsr", STENCIL.replace("A[y0 - 1:y0 + BY + 1]", view)))
    assert "v.tsr:8:16: error: the extent of a view (stop - start) must be a compile-time constant" in str(e.value)


# ---- the generator -------------------------------------------------------------------------

VARS = ("y0", "a", "(a * y0)")  # run-time terms; the product is one opaque term, always spelled alike


def spell(coeffs: dict[str, int], const: int, r: random.Random) -> str:
    """A random spelling of sum(k * v) + const."""
    items: list[tuple[str, int]] = []  # (term, sign)
    for v, k in coeffs.items():
        if k:
            items.append((v if abs(k) == 1 else r.choice([f"{abs(k)} * {v}", f"{v} * {abs(k)}",
                                                          f"({v} + {v} * {abs(k) - 1})"]), 1 if k > 0 else -1))
    split = r.randint(-4, 4) if r.random() < 0.4 else 0
    for c in (const - split, split):
        if c or not items:
            items.append((str(abs(c)), 1 if c >= 0 else -1))
    if r.random() < 0.3:
        items.append((r.choice(["(BY - BY)", "BY * 0"]), 1))
    r.shuffle(items)
    text = ""
    for term, sign in items:
        if not text:
            text = term if sign > 0 else r.choice([f"-{term}", f"0 - {term}"])
        elif sign > 0:
            text = r.choice([f"{text} + {term}", f"{term} + ({text})"])
        else:
            text = r.choice([f"{text} - {term}", f"-{term} + ({text})", f"{text} - ({term})"])
    return text


def bounds_value(coeffs: dict[str, int], const: int, a: int, y0: int) -> int:
    env = {"y0": y0, "a": a, "(a * y0)": a * y0}
    return sum(k * env[v] for v, k in coeffs.items()) + const


def generated(r: random.Random) -> tuple[str, bool, dict[str, int], int, int]:
    """A kernel copying A[lo:hi] into a shared array of `width`; whether the view must compile."""
    width = r.randint(1, 12)
    lo = {v: r.randint(-3, 3) for v in r.sample(VARS, r.randint(0, 3))}
    lo_const = r.randint(-12, 12)
    hi = dict(lo)
    constant = r.random() < 0.75
    if not constant:
        v = r.choice(VARS)
        hi[v] = hi.get(v, 0) + r.choice([-2, -1, 1, 2])
    source = f"""
const BY = 8

@kernel tile[(16,)]
def view(A: f32[n], out: mut f32[grid_groups, {width}], a: i32):
    s = tshared.alloc(f32[{width}])
    y0 = group_id(0) * BY
    tcopy(s, A[{spell(lo, lo_const, r)}:{spell(hi, lo_const + width, r)}])
    tbarrier()
    if tile_linear_id() < {width}:
        out[group_id(0), tile_linear_id()] = s[tile_linear_id()]
"""
    return source, constant, lo, lo_const, width


def check_generated(seed: int, run: bool) -> None:
    r = random.Random(seed)
    source, constant, lo, lo_const, width = generated(r)
    src = SourceFile("g.tsr", source)
    if not constant:
        with pytest.raises(CompileError, match="must be a compile-time constant"):
            compile_source(src)
        return
    compile_source(src)
    if run:
        a = r.randint(-2, 3)
        A = np.arange(1, 30, dtype=np.float32)
        out = np.full((3, width), -1.0, np.float32)
        tessera.compile(source, backend="cpu", check_bounds=True).view(A, out, a)
        want = padded_windows(A, 3, width, lambda g: bounds_value(lo, lo_const, a, 8 * g))
        np.testing.assert_array_equal(out, want, err_msg=source)


@pytest.mark.parametrize("seed", range(60))
def test_generated_bounds_match_the_model(seed: int) -> None:
    check_generated(seed, run=seed % 20 == 0)
