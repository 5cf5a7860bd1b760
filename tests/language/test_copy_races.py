"""The race detector (check_bounds on the CPU backend) and copies into shared arrays that other
tiles still read: the CPU backend lands a `tcopy_async` only at the wait, so such a program gives
the right results there and wrong ones on a GPU, and only the detector can tell. It sees the
reads of plain accesses and of `tmma`'s operand loads, and the writes of asynchronous copies and
of their synchronous fallback (1- and 2-byte chunks); a report names both lines. Planted races,
the same programs with a barrier (nothing reported, right results), and a seeded generator of
read-then-copy programs whose model says from the program alone whether there is a race
(`python -m tests.language.test_copy_races N` runs it longer)."""

from __future__ import annotations

import dataclasses
import random
import sys

import numpy as np
import pytest

import tessera
from tessera.base.errors import LaunchError

pytestmark = pytest.mark.usefixtures("shared_cache")

# ---- the race detector: a copy into an array that other tiles still read ------------------------------

WAR = {  # a read of `s` by other tiles (line "# read"), then a copy into `s` (line "# copy") with no barrier
    "tmma": ("""\
@kernel tile[(64,)]
def k(A: f16[M, K], B: f16[K2, N], C: mut f32[M, N]):
    s = tshared.alloc(f16[16, 32])
    Bs = tshared.alloc(f16[32, 16])
    acc = tfrag(f32[16, 16], 0.0)
    tcopy(s, A[0:16, 0:32])
    tcopy(Bs, B[0:32, 0:16])
    tbarrier()
    tmma(acc, s, Bs)  # read
    BARRIER
    tcopy_async(s, A[0:16, 32:64])  # copy
    tcommit()
    twait()
    tmma(acc, s, Bs)
    tstore(C[0:16, 0:16], acc)
""", lambda rng: (rng.integers(-3, 4, (16, 64)).astype(np.float16), rng.integers(-3, 4, (32, 16)).astype(np.float16),
                  np.zeros((16, 16), np.float32)),
        lambda a, b, c: a[:, :32].astype(np.float32) @ b + a[:, 32:].astype(np.float32) @ b),
    "element": ("""\
@kernel tile[(32,)]
def k(x: f32[n], y: mut f32[m], c: mut f32[m]):
    s = tshared.alloc(f32[32])
    tcopy(s, x[0:32])
    tbarrier()
    v = s[(tile_id(0) + 8) % 32]  # read
    BARRIER
    tcopy_async(s, x[32:64])  # copy
    tcommit()
    twait()
    y[tile_id(0)] = v + 100.0 * s[tile_id(0)]
""", lambda rng: (rng.integers(-9, 10, 64).astype(np.float32), np.zeros(32, np.float32), np.zeros(32, np.float32)),
        lambda x, y, c: np.roll(x[:32], -8) + 100.0 * x[32:]),
    "f16-synchronous": ("""\
@kernel tile[(32,)]
def k(x: f16[n], y: mut f16[m], c: mut f16[m]):
    s = tshared.alloc(f16[33])
    tcopy(s, x[0:33])
    tbarrier()
    v = s[(tile_id(0) + 8) % 32]  # read
    BARRIER
    tcopy_async(s, x[33:66])  # copy
    tcommit()
    twait()
    y[tile_id(0)] = v + f16(10.0) * s[tile_id(0)]
""", lambda rng: (rng.integers(-9, 10, 66).astype(np.float16), np.zeros(32, np.float16), np.zeros(32, np.float16)),
        lambda x, y, c: (np.roll(x[:32], -8).astype(np.float32) + 10 * x[33:65].astype(np.float32)).astype(np.float16)),
}


@pytest.mark.parametrize("case", sorted(WAR))
def test_the_race_detector_reports_a_copy_into_an_array_that_another_tile_read(case: str) -> None:
    src, args, model = WAR[case]
    lines = src.splitlines()
    read, copy = (next(i + 1 for i, line in enumerate(lines) if line.endswith(f"# {what}")) for what in ("read", "copy"))
    planted = src.replace("    BARRIER\n", "")
    rng = np.random.default_rng(3)
    with pytest.raises(LaunchError) as e:
        tessera.compile(planted, backend="cpu", check_bounds=True, path="war.tsr").k(*args(rng), grid=1)
    text = str(e.value)
    assert "data race" in text and f"line {read}" in text and f"line {copy - 1}" in text, text
    # With the barrier the program is right, and the detector reports nothing.
    data = args(rng)
    out = data[2] if case == "tmma" else data[1]
    tessera.compile(src.replace("BARRIER", "tbarrier()"), backend="cpu", check_bounds=True, path="war.tsr").k(
        *data, grid=1)
    np.testing.assert_array_equal(out, model(*data))


# ---- a random differential generator: the detector's verdict against the program's ------------------

@dataclasses.dataclass(frozen=True)
class _Case:
    """Every tile reads elements [lo, hi) of `s` (or a tmma reads all of its first operand, which
    both warps read), then the group copies into part of `s` (tcopy_async, or tcopy), with or
    without a barrier between. Every element read is read by at least two tiles, so whichever tile
    writes it, another read it: there is a race exactly when there is no barrier and the copy
    writes an element that was read."""

    elem: str   # "f32" or "f16"
    tiles: int
    length: int  # of `s` (0 for tmma: its operand is [16, K])
    lo: int      # the first element read (tmma: the first row copied into)
    hi: int      # the end of the elements read (tmma: the rows copied)
    off: int     # the first element copied into (tmma: the first column)
    count: int   # the elements copied (tmma: the columns)
    asynchronous: bool
    barrier: bool
    mma: bool

    def racy(self) -> bool:
        return not self.barrier and (self.mma or max(self.lo, self.off) < min(self.hi, self.off + self.count))

    def copy(self, dst: str, src: str) -> list[str]:
        if self.asynchronous:
            return [f"    tcopy_async({dst}, {src})  # copy", "    tcommit()", "    twait()"]
        return [f"    tcopy({dst}, {src})  # copy", "    tbarrier()"]

    def source(self) -> str:
        e, cut = self.elem, ["    tbarrier()"] if self.barrier else []
        if self.mma:
            kk = 32 if e == "f16" else 8
            return "\n".join([
                "@kernel tile[(64,)]", f"def k(A: {e}[M, K], B: {e}[K2, N], X: {e}[P, Q], C: mut f32[M, N]):",
                f"    As = tshared.alloc({e}[16, {kk}])", f"    Bs = tshared.alloc({e}[{kk}, 16])",
                "    acc = tfrag(f32[16, 16], 0.0)", f"    tcopy(As, A[0:16, 0:{kk}])", f"    tcopy(Bs, B[0:{kk}, 0:16])",
                "    tbarrier()", "    tmma(acc, As, Bs)  # read", *cut,
                *self.copy(f"As[{self.lo}:{self.lo + self.hi}, {self.off}:{self.off + self.count}]",
                           f"X[0:{self.hi}, 0:{self.count}]"),
                "    tmma(acc, As, Bs)", "    tstore(C[0:16, 0:16], acc)"]) + "\n"
        return "\n".join([
            f"@kernel tile[({self.tiles},)]", f"def k(x: {e}[n], y: mut f32[m]):",
            f"    s = tshared.alloc({e}[{self.length}])", f"    tcopy(s, x[0:{self.length}])", "    tbarrier()",
            "    v = 0.0", f"    for i in range({self.lo}, {self.hi}):", "        v += f32(s[i])  # read", *cut,
            *self.copy(f"s[{self.off}:{self.off + self.count}]", f"x[{self.length}:{self.length + self.count}]"),
            f"    y[tile_id(0)] = v + 1000.0 * f32(s[tile_id(0) % {self.length}])"]) + "\n"

    def run(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Launches the kernel (check_bounds); returns what it computed and what the model says."""
        mod = tessera.compile(self.source(), backend="cpu", check_bounds=True, path="case.tsr")
        dt = np.float16 if self.elem == "f16" else np.float32
        if self.mma:
            kk = 32 if self.elem == "f16" else 8
            a, b = rng.integers(-3, 4, (16, kk)).astype(dt), rng.integers(-3, 4, (kk, 16)).astype(dt)
            x = rng.integers(-3, 4, (self.hi, self.count)).astype(dt)
            c = np.zeros((16, 16), np.float32)
            mod.k(a, b, x, c, grid=1)
            a2 = a.copy()
            a2[self.lo:self.lo + self.hi, self.off:self.off + self.count] = x
            return c, a.astype(np.float32) @ b + a2.astype(np.float32) @ b
        x = rng.integers(-9, 10, self.length + self.count).astype(dt)
        y = np.zeros(self.tiles, np.float32)
        mod.k(x, y, grid=1)
        s = x[:self.length].astype(np.float32)
        s[self.off:self.off + self.count] = x[self.length:]
        return y, x[self.lo:self.hi].astype(np.float32).sum() + 1000.0 * s[np.arange(self.tiles) % self.length]


def _random_case(rng: random.Random) -> _Case:
    elem, barrier, asynchronous = rng.choice(["f32", "f16"]), rng.random() < 0.3, rng.random() < 0.8
    if rng.random() < 0.3:  # a tmma reads the operand; the copy fills a block of it
        kk = 32 if elem == "f16" else 8
        rows, cols = rng.randint(1, 16), rng.randint(1, kk)
        return _Case(elem, 64, 0, rng.randint(0, 16 - rows), rows, rng.randint(0, kk - cols), cols,
                     asynchronous, barrier, True)
    length = rng.choice([16, 33, 64, 70])
    lo = rng.randrange(length)
    off = rng.randrange(length)
    return _Case(elem, rng.choice([32, 64]), length, lo, rng.randint(lo + 1, length), off,
                 rng.randint(1, length - off), asynchronous, barrier, False)


def _run_random(seed: int, count: int) -> tuple[int, int]:
    """`count` random cases from `seed`; returns (races reported, clean runs)."""
    rng = random.Random(seed)
    data = np.random.default_rng(seed)
    races = clean = 0
    for _ in range(count):
        case = _random_case(rng)
        src = case.source()
        lines = src.splitlines()
        read, copy = (next(i + 1 for i, line in enumerate(lines) if line.endswith(f"# {w}")) for w in ("read", "copy"))
        if case.racy():
            with pytest.raises(LaunchError) as e:
                case.run(data)
            assert "data race" in str(e.value) and f"line {read}" in str(e.value) and f"line {copy}" in str(e.value), \
                f"{e.value}\n{src}"
            races += 1
        else:
            got, want = case.run(data)
            np.testing.assert_array_equal(got, want, err_msg=src)
            clean += 1
    return races, clean


def test_random_read_then_copy_programs_race_exactly_when_the_model_says() -> None:
    races, clean = _run_random(seed=4, count=8)  # a seed whose cases the blind detector got wrong
    assert races and clean


if __name__ == "__main__":  # a longer run: python -m tests.language.test_copy_races 200 [seed]
    print(_run_random(int(sys.argv[2]) if len(sys.argv) > 2 else 1, int(sys.argv[1]) if len(sys.argv) > 1 else 100),
          "(races reported, clean runs): all as the model says")
