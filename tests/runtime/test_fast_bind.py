"""The per-kernel fast path of argument checking (runtime/bind_plan.py): a launch after launches
with good arguments still catches every wrong argument, with the same message as a first launch."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.runtime import bind_plan

pytestmark = pytest.mark.usefixtures("shared_cache")

SRC = """@kernel tile[(32,)]
def axpy(x: f32[n], y: mut f32[n], a: f32, k: u8):
    i = tile_linear_id()
    if i < n:
        y[i] = y[i] + a * x[i]
"""


@pytest.fixture(scope="module")
def mod():
    return tessera.compile(SRC, backend="cpu")


def _good():
    return np.arange(32, dtype=np.float32), np.zeros(32, np.float32)


def _bad_cases():
    base = np.zeros(64, np.float32)
    return [
        ("dtype", lambda x, y: ((x.astype(np.float64), y, 2.0, 1), {}), r"parameter 'x': expected dtype float32"),
        ("rank", lambda x, y: ((x.reshape(4, 8), y, 2.0, 1), {}), r"parameter 'x': expected 1 dimension"),
        ("symbols", lambda x, y: ((x, y[:16], 2.0, 1), {}), r"parameter 'y': shape symbol 'n' is 16 here but 32"),
        ("strided", lambda x, y: ((x, np.zeros(64, np.float32)[::2], 2.0, 1), {}), r"parameter 'y': .*not C-contig"),
        ("readonly", lambda x, y: ((x, _readonly(y), 2.0, 1), {}), r"parameter 'y': the array is read-only"),
        ("count", lambda x, y: ((x, y, 2.0, 1, 5), {}), r"axpy\(\) takes 4 arguments"),
        ("missing", lambda x, y: ((x, y, 2.0), {}), r"missing argument: k"),
        ("twice", lambda x, y: ((x, y, 2.0, 1), {"a": 1.0}), r"two values for parameter 'a'"),
        ("range", lambda x, y: ((x, y, 2.0, 300), {}), r"parameter 'k': 300 is out of range for u8"),
        ("intkind", lambda x, y: ((x, y, 2.0, 1.5), {}), r"parameter 'k': expected an integer"),
        ("float", lambda x, y: ((x, y, "2", 1), {}), r"parameter 'a': expected a number"),
        ("list", lambda x, y: ((x, list(y), 2.0, 1), {}), r"parameter 'y': expected a NumPy array"),
        ("alias", lambda x, y: ((base[:32], base[16:48], 2.0, 1), {}), r"'x' and 'y' overlap in memory"),
        ("grid", lambda x, y: ((x, y, 2.0, 1), {"grid": 0}), r"grid dimension 0 is out of range"),
    ]


def _readonly(a):
    a = a.copy()
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("bad,match", [c[1:] for c in _bad_cases()], ids=[c[0] for c in _bad_cases()])
def test_wrong_argument_after_fast_launches(mod, bad, match) -> None:
    x, y = _good()
    for _ in range(3):  # the plan is made and used
        mod.axpy[1](x, y, 2.0, 1)
    assert np.array_equal(y, 6 * x)
    args, kw = bad(x, y)
    grid = kw.pop("grid", 1)
    before = y.copy()
    with pytest.raises(tessera.LaunchError, match=match):
        mod.axpy(*args, grid=grid, **kw)
    assert np.array_equal(y, before)
    fresh = tessera.compile(SRC, backend="cpu")  # the same message on a first launch (no plan yet)
    with pytest.raises(tessera.LaunchError, match=match):
        args, kw = bad(x, y.copy())
        kw.pop("grid", None)
        fresh.axpy(*args, grid=grid, **kw)


def test_repeated_launches_skip_the_full_check(mod, monkeypatch) -> None:
    calls = []
    full = bind_plan.bind

    def counting(*a, **k):
        calls.append(1)
        return full(*a, **k)

    monkeypatch.setattr(bind_plan, "bind", counting)
    x, y = _good()
    mod.axpy(x, y, 1.0, 3, grid=1)
    mod.axpy(x, y, a=1.0, k=3, grid=1)       # another argument structure: its own plan
    mod.axpy(x[:16].copy(), y[:16], 1.0, 3, grid=1)  # another n: the same plan
    assert calls == [] and np.array_equal(y[:16], 3 * x[:16]) and np.array_equal(y[16:], 2 * x[16:])
    with pytest.raises(tessera.LaunchError, match="parameter 'k'"):
        mod.axpy(x, y, 1.0, -1, grid=1)
    assert calls == [1]
    mod.axpy(x, y, 1.0, np.uint8(1), grid=1)  # a NumPy scalar: still the plan
    assert calls == [1]
    mod.axpy(x, y.view(_Sub), 1.0, 3, grid=1)  # an ndarray subclass: the full check, which accepts it
    assert calls == [1, 1] and np.array_equal(y, 5 * x + np.where(np.arange(32) < 16, 0, -x))


class _Sub(np.ndarray):
    pass


def test_grid_from_shape_and_shape_symbol_scalars() -> None:
    m = tessera.compile("@kernel tile[(32,)]\ndef k(out: mut i32[grid_groups], n: i32, v: f32[n]):\n"
                        "    if tile_linear_id() == 0:\n        out[group_id(0)] = n\n", backend="cpu")
    out = np.zeros(3, np.int32)
    v = np.zeros(5, np.float32)
    for _ in range(2):
        m.k(out, 5, v)
    assert np.all(out == 5)
    with pytest.raises(tessera.LaunchError, match=r"parameter 'n' is 4 but 'v' dimension 0 is 5"):
        m.k(out, 4, v)
