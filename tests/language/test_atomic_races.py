"""The CPU backend's shared-memory race detector (check_bounds) and atomics (spec section 7): an
atomic update of a shared element counts as a write that does not race with other tiles' atomic
updates, but does race with another tile's plain read or write in the same barrier interval
(runtime/host/engine.cpp race_atomic; the printer routes atomics' addresses through
`tsr_race_atomic`). Planted missing barriers are reported with both lines; a random generator
(race_gen.py) checks the verdict and, without a race, the results against a model."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import tessera
from tests.language.race_gen import L, model, program

HISTOGRAM = """
@kernel tile[(64,)]
def k(X: i32[n], Y: mut i32[n]):
    s = tshared.alloc(i32[8])
    t = tile_linear_id()
    if t < 8:
        s[t] = 0
    FIRST
    atomic_add(s[X[t] % 8], 1)
    SECOND
    Y[t] = s[t % 8]
"""


def _hist(first: str, second: str) -> np.ndarray:
    x = np.arange(64, dtype=np.int32) * 3
    y = np.zeros(64, np.int32)
    src = HISTOGRAM.replace("FIRST", first).replace("SECOND", second)
    tessera.compile(src, backend="cpu", check_bounds=True, path="hist.tsr").k(x, y, grid=1)
    return y


def test_atomic_updates_by_many_tiles_are_not_a_race() -> None:
    y = _hist("tbarrier()", "tbarrier()")
    np.testing.assert_array_equal(y, np.full(64, 8, np.int32))


@pytest.mark.parametrize(("first", "second", "lines"), [
    ("tbarrier()", "pass", (9, 11)),   # a plain read of what other tiles update atomically
    ("pass", "tbarrier()", (7, 9)),    # an atomic update of what another tile wrote
])
def test_a_missing_barrier_around_an_atomic_is_a_race(first: str, second: str, lines: tuple[int, int]) -> None:
    with pytest.raises(tessera.LaunchError) as e:
        _hist(first, second)
    text = str(e.value)
    a, b = lines
    m = re.search(r"shared-memory data race: tile \d+ (\w+|atomically updates) it at line (\d+) and tile \d+ "
                  r"(reads|writes|atomically updates) it at line (\d+)", text)
    assert m is not None, text
    assert {int(m.group(2)), int(m.group(4))} == {a, b}, text
    assert "atomically updates" in text, text


DEVICE = """
@device
def bump(s: mut i32[m], i: i32):
    atomic_max(s[i], i)

@kernel tile[(32,)]
def k(Y: mut i32[n]):
    s = tshared.alloc(i32[4])
    t = tile_linear_id()
    if t < 4:
        s[t] = 0
    tbarrier()
    bump(s, t % 4)
    BARRIER
    Y[t] = s[(t + 1) % 4]
"""


def test_an_atomic_through_a_device_functions_array_parameter_is_seen() -> None:
    y = np.zeros(32, np.int32)
    tessera.compile(DEVICE.replace("BARRIER", "tbarrier()"), backend="cpu", check_bounds=True, path="dev.tsr").k(
        y, grid=1)
    np.testing.assert_array_equal(y, (np.arange(32) + 1) % 4)
    with pytest.raises(tessera.LaunchError, match=r"data race: .*atomically updates it at line 4"):
        tessera.compile(DEVICE.replace("BARRIER", "pass"), backend="cpu", check_bounds=True, path="dev.tsr").k(
            y, grid=1)


def test_atomics_of_other_types_go_through_the_detector() -> None:
    src = """
@kernel tile[(32,)]
def k(Y: mut f32[n]):
    s = tshared.alloc(f32[2])
    h = tshared.alloc(f16[2])
    t = tile_linear_id()
    if t < 2:
        s[t] = 0.0
        h[t] = 0.0
    tbarrier()
    atomic_max(s[0], f32(t))
    atomic_add(h[1], f16(1.0))
    READ
    tbarrier()
    Y[t] = s[0] + f32(h[1])
"""
    y = np.zeros(32, np.float32)
    tessera.compile(src.replace("READ", "pass"), backend="cpu", check_bounds=True, path="types.tsr").k(y, grid=1)
    np.testing.assert_array_equal(y, np.full(32, 31.0 + 32.0, np.float32))
    for read in ("Y[t] = s[0]", "Y[t] = f32(h[1])"):
        with pytest.raises(tessera.LaunchError, match=r"data race: .*atomically updates"):
            tessera.compile(src.replace("READ", read), backend="cpu", check_bounds=True, path="types.tsr").k(
                y, grid=1)


# ---- the random generator (race_gen.py) ---------------------------------------------------------------

CASES = int(os.environ.get("TESSERA_RACE_GEN_CASES", "10"))


def run_generated(seed: int) -> bool:
    """Whether the generated program races (as the model says and the detector reports)."""
    src, intervals, tiles = program(seed)
    x = np.random.default_rng(seed).integers(-50, 50, tiles).astype(np.int32)
    races, want_y, want_s = model(intervals, tiles, x)
    y, s = np.zeros(tiles, np.int32), np.zeros(L, np.int32)
    mod = tessera.compile(src, backend="cpu", check_bounds=True, path=f"race{seed}.tsr")
    if races:
        with pytest.raises(tessera.LaunchError, match="shared-memory data race"):
            mod.k(x, y, s, grid=1)
    else:
        mod.k(x, y, s, grid=1)
        np.testing.assert_array_equal(y, want_y, err_msg=src)
        np.testing.assert_array_equal(s, want_s, err_msg=src)
    return races


def test_generated_races_match_the_model() -> None:
    verdicts = [run_generated(seed) for seed in range(CASES)]
    assert any(verdicts) and not all(verdicts)  # both kinds of program are tried
