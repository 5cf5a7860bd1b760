"""A seeded random differential generator for per-tile vector access (spec section 15): random
kernels whose tiles move register arrays to and from views at random offsets and extents, of random
element types, inside loops and conditions, through global and shared memory (launch-sized shared
arrays too), in the kernel or in device functions on their array parameters, run on the CPU
backend against (1) a Python model of the contract (elements outside the tensor read as zero and are
not written) and (2) the same kernel written with scalar indexed accesses and explicit bounds tests.
Each tile owns one row, so that the result does not depend on the order of the tiles.

`test_vector_access_matches_the_model_and_the_scalar_twin` runs a fixed seed and count (a few
seconds); `python -m tests.language.vectors.test_vector_fuzz COUNT SEED` runs a longer form."""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, replace

import numpy as np
import pytest

import tessera
from tests.language.test_map_kernels import place

pytestmark = pytest.mark.usefixtures("shared_cache")

TYPES = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "f64": np.float64, "u8": np.uint8, "i32": np.int32}
TILES = 4


@dataclass
class Program:
    """One random kernel: per iteration `it` of `trips`, when `cond(it)`, load `r` from row
    `i + di` at `it * step + off + lo`, and store it to row `i + dj` at `it * step2 + hi`."""

    t: str
    w: int
    trips: int
    step: int
    lo: int
    step2: int
    hi: int
    di: int
    dj: int
    cond: str      # a .tsr condition on `it`, or "True"
    via: str       # "regs"; "shared": the load goes through a shared row first; "sized": through a
                   # launch-sized shared array; "device": device functions move the views, through
                   # a shared row (their array parameters)
    column: bool   # the load reads a column X[i:i + w, c] instead of a row
    spad: int = -1  # "sized": -1 a 1-D array of nb elements, else rows of nb x w padded by spad

    def cond_py(self, it: int) -> bool:
        return bool(eval(self.cond, {}, {"it": it}))  # the same text is valid Python

    def _src(self, x: str, i: str, c: str) -> str:
        w = self.w
        return f"{x}[{i}:{i} + {w}, {c}]" if self.column else f"{x}[{i}, {c}:{c} + {w}]"

    def _device_source(self) -> str:
        """The vector kernel whose views device functions move, through this tile's shared row."""
        t, w = self.t, self.w
        fns = (f"@device\ndef vload(X: {t}[m, n], s: mut {t}[{TILES}, {w}], t: i32, i: i32, c: i32):\n"
               f"    q = tregs({t}[{w}])\n    q[:] = {self._src('X', 'i', 'c')}\n    s[t, :] = q\n\n"
               f"@device\ndef vstore(Y: mut {t}[m, n], s: {t}[{TILES}, {w}], t: i32, i: i32, c: i32):\n"
               f"    q = tregs({t}[{w}])\n    q[:] = s[t, 0:{w}]\n    Y[i, c:c + {w}] = q\n\n")
        body = [f"s = tshared.alloc({t}[{TILES}, {w}])", f"i = group_id(0) * {TILES} + tile_id(0)",
                f"for e in range({w}):", f"    s[tile_id(0), e] = {t}(0)", f"for it in range({self.trips}):",
                f"    if {self.cond}:", f"        vload(X, s, tile_id(0), i + {self.di}, it * {self.step} + off + {self.lo})",
                f"    vstore(Y, s, tile_id(0), i + {self.dj}, it * {self.step2} + {self.hi})"]
        return fns + self._head() + "".join(f"    {line}\n" for line in body)

    def _head(self) -> str:
        return f"@kernel tile[({TILES},)]\ndef k(X: {self.t}[m, n], Y: mut {self.t}[m, n], off: i32, nb: i32):\n"

    def source(self, scalar: bool) -> str:
        if self.via == "device" and not scalar:
            return self._device_source()
        t, w = self.t, self.w
        head = self._head()
        body = [f"i = group_id(0) * {TILES} + tile_id(0)", f"r = tregs({t}[{w}], 0)"]
        if self.via == "shared" and not scalar:
            body.insert(0, f"s = tshared.alloc({t}[{TILES}, {w}])")
        elif self.via == "sized" and not scalar:
            body.insert(0, f"s = tshared.alloc({t}[nb])" if self.spad < 0 else
                        f"s = tshared.alloc({t}[nb, {w}], pad={self.spad})")
        body.append(f"for it in range({self.trips}):")
        body.append(f"    if {self.cond}:")
        ind = "        "
        src = self._src("X", f"i + {self.di}", f"it * {self.step} + off + {self.lo}")
        if scalar:
            body.append(f"{ind}for e in range({w}):")
            if self.column:
                rr, cc = f"i + {self.di} + e", f"it * {self.step} + off + {self.lo}"
            else:
                rr, cc = f"i + {self.di}", f"it * {self.step} + off + {self.lo} + e"
            body.append(f"{ind}    if {rr} >= 0 and {rr} < m and {cc} >= 0 and {cc} < n:")
            body.append(f"{ind}        r[e] = X[{rr}, {cc}]")
            body.append(f"{ind}    else:")
            body.append(f"{ind}        r[e] = 0")
        else:
            body.append(f"{ind}r[:] = {src}")
        if self.via in ("shared", "sized") and not scalar:  # through this tile's own shared row
            row = "s[tile_id(0), :]" if self.via == "shared" or self.spad >= 0 else \
                f"s[tile_id(0) * {w}:tile_id(0) * {w} + {w}]"
            body.append(f"{ind}{row} = r")
            body.append(f"{ind}r[:] = {row.replace(', :]', f', 0:{w}]')}")
        col = f"it * {self.step2} + {self.hi}"
        if scalar:
            body.append(f"    for e in range({w}):")
            body.append(f"        if i + {self.dj} >= 0 and i + {self.dj} < m and {col} + e >= 0 and {col} + e < n:")
            body.append(f"            Y[i + {self.dj}, {col} + e] = r[e]")
        else:
            body.append(f"    Y[i + {self.dj}, {col}:{col} + {w}] = r")
        return head + "".join(f"    {line}\n" for line in body)

    def model(self, x: np.ndarray, y: np.ndarray, off: int) -> np.ndarray:
        m, n = x.shape
        y = y.copy()
        groups = -(-m // TILES)
        for i in range(groups * TILES):
            r = np.zeros(self.w, x.dtype)
            for it in range(self.trips):
                if self.cond_py(it):
                    for e in range(self.w):
                        rr, cc = (i + self.di + e, it * self.step + off + self.lo) if self.column else \
                            (i + self.di, it * self.step + off + self.lo + e)
                        r[e] = x[rr, cc] if 0 <= rr < m and 0 <= cc < n else 0
                for e in range(self.w):
                    rr, cc = i + self.dj, it * self.step2 + self.hi + e
                    if 0 <= rr < m and 0 <= cc < n:
                        y[rr, cc] = r[e]
        return y


def random_program(rng: random.Random) -> Program:
    t = rng.choice(list(TYPES))
    size = np.dtype(TYPES[t]).itemsize
    w = rng.choice([1, 2, 3, 4, 5, 8, 16 // size, 32 // size, 7])
    column = rng.random() < 0.15
    # Rows move only within the tile's own row (dj = 0), so that tiles never write the same element.
    return Program(t, w, rng.randint(1, 4), rng.choice([0, w, 2 * w, 16 // size, 3]), rng.randint(-9, 9),
                   rng.choice([w, 16 // size, 2 * w]), rng.randint(-5, 20), 0 if not column else rng.randint(-2, 2),
                   0, rng.choice(["True", "it % 2 == 0", "it != 1", "it < 2"]),
                   rng.choice(["regs", "regs", "shared", "sized", "device"]), column, rng.choice([-1, 0, 1, 3]))


def _data(t: str, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    if t in ("bf16", "u8", "i32"):
        return rng.integers(0, 250, shape).astype(TYPES[t])
    return rng.integers(-100, 100, shape).astype(TYPES[t])


def check(seed: int, via: str | None = None, checked: bool | None = None) -> str | None:
    """Run one random program (through `via` and with check_bounds as `checked` where given); None
    when it agrees, else what disagreed."""
    rng = random.Random(seed)
    p = random_program(rng)
    p = replace(p, via=via or p.via)
    checked = rng.random() < 0.3 if checked is None else checked
    vec = tessera.compile(p.source(False), backend="cpu", check_bounds=checked, path=f"vec{seed}.tsr")
    sca = tessera.compile(p.source(True), backend="cpu", path=f"sca{seed}.tsr")
    nrng = np.random.default_rng(seed)
    for _ in range(2):
        m, n = rng.randint(1, 9), rng.choice([rng.randint(1, 40), 16, 32, 48])
        off = rng.choice([0, 0, 1, -1, 4, 8, rng.randint(-20, 40)])
        x = _data(p.t, (m, n), nrng)
        y0 = _data(p.t, (m, n), nrng)
        want = p.model(x, y0, off)
        misalign = rng.choice([0, 1])
        grid = -(-m // TILES)
        for name, mod in (("vector", vec), ("scalar", sca)):
            xa, ya = place(x, misalign), place(y0, misalign)
            mod.k[grid](xa, ya, off, TILES * p.w if p.spad < 0 else TILES)
            if ya.tobytes() != want.tobytes():
                return f"seed {seed}: the {name} kernel differs from the model (m={m} n={n} off={off}):\n" \
                       f"{p.source(name == 'scalar')}\ngot\n{ya}\nwant\n{want}"
    return None


def test_vector_access_matches_the_model_and_the_scalar_twin() -> None:
    failures = [f for seed in range(8) if (f := check(seed)) is not None]
    assert not failures, failures[0]


@pytest.mark.parametrize("checked", [False, True], ids=["plain", "check_bounds"])
def test_launch_sized_arrays_and_device_functions(checked: bool) -> None:
    """The forms that used to be refused: launch-sized shared arrays (1-D, or rows padded by 1 or 3
    elements) and device functions' array parameters, with and without check_bounds."""
    failures = [f for seed, via in ((1, "sized"), (5, "sized"), (6, "sized"), (20, "sized"), (3, "device"))
                if (f := check(seed, via, checked)) is not None]
    assert not failures, failures[0]


if __name__ == "__main__":
    count, first = (int(a) for a in (sys.argv[1:] + ["200", "1000"])[:2])
    bad = [f for seed in range(first, first + count) if (f := check(seed)) is not None]
    print(f"{count} programs, {len(bad)} disagreements")
    for f in bad[:3]:
        print(f)
