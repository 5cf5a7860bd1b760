"""Warp-uniform conditions (spec section 7): a comparison of the linear tile index with a multiple
of 32, or its division by one, is the same in the 32 lanes of a warp and may guard warp
operations; a lane-dependent condition may not, and its error shows a warp-uniform alternative."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.base.errors import CompileError, SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source

HEAD = "const W = 32\n@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n]):\n    t = tile_linear_id()\n    v = x[t]\n"


def _kernel(cond: str) -> str:
    return HEAD + f"    if {cond}:\n        v = warp_sum(v)\n    out[t] = v\n"


# (condition, what it is for the warp whose first tile is t)
WARP_UNIFORM = [("tile_linear_id() < 32", lambda t: t < 32), ("t < 64", lambda t: t < 64),
                ("t <= 31", lambda t: t <= 31), ("t >= 96", lambda t: t >= 96), ("t > 63", lambda t: t > 63),
                ("64 > t", lambda t: t < 64), ("t < W * 2", lambda t: t < 64), ("t // 32 == 1", lambda t: t // 32 == 1),
                ("t // 64 != 0", lambda t: t >= 64), ("t >> 5 == 3", lambda t: t >> 5 == 3),
                ("(t >> 6) == 1", lambda t: t >> 6 == 1), ("warp_id() == 0", lambda t: t < 32),
                ("t < 32 and warp_id() == 0", lambda t: t < 32)]
LANE_DEPENDENT = ["t < 16", "t <= 32", "t == 0", "lane_id() < 32", "t // 16 == 1", "t >> 4 == 1",
                  "global_linear_id() < 32", "t % 32 == 0"]


def _expected(x: np.ndarray, cond) -> np.ndarray:
    v = x.copy()
    for w in range(4):
        lanes = slice(32 * w, 32 * w + 32)
        if cond(32 * w):  # the condition of the warp's first lane is the warp's
            v[lanes] = v[lanes].sum()
    return v


@pytest.mark.parametrize(("cond", "per_warp"), WARP_UNIFORM, ids=[c for c, _ in WARP_UNIFORM])
def test_a_warp_uniform_condition_may_guard_a_warp_operation(cond: str, per_warp) -> None:
    src = _kernel(cond)
    mod = tessera.compile(src, backend="cpu")
    x = np.arange(128, dtype=np.float32)
    out = np.zeros(128, np.float32)
    mod.k(x, out, grid=1)
    assert np.array_equal(out, _expected(x, per_warp)), cond


@pytest.mark.parametrize("cond", LANE_DEPENDENT)
def test_a_lane_dependent_condition_is_an_error_that_shows_an_alternative(cond: str) -> None:
    with pytest.raises(CompileError) as info:
        compile_source(SourceFile("k.tsr", _kernel(cond)))
    text = str(info.value)
    assert "warp_sum() must be reached by all 32 lanes of the warp" in text
    assert "such as warp_id() == 0 or tile_linear_id() < 32" in text


def test_a_local_changed_later_is_not_the_tile_index() -> None:
    src = HEAD + "    t += 1\n    if t < 32:\n        v = warp_sum(v)\n    out[0] = v\n"
    with pytest.raises(CompileError, match="must be reached by all 32 lanes"):
        compile_source(SourceFile("k.tsr", src))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_warp_uniform_guards_compile_without_warnings(arch: str) -> None:
    result = compile_source(SourceFile("k.tsr", _kernel("t < 64")), options=CompileOptions(arch=arch))
    assert compile_cuda(result.cuda, name="k.cu", arch=arch).warnings == ()
