"""A seeded generator of launch sequences for the CPU engine's hand-off of groups to its worker
threads (runtime/host/host_pool.h): launches of 1 to 96 groups on 1 to 4 threads, whose groups
are all tiny, mixed (a few long ones among many tiny ones) or all long, so that the engine's guess
of a launch's length from the kernel's last launches is right, too low (the caller wakes the
helpers part way) or too high; fiber mode with the race detector (check_bounds) and region mode;
launches from three Python threads at once (one gets the pool, the others start threads of their
own); and launches cancelled by a timeout while some of their groups never end, alone and among
concurrent launches (cancelled after 1 to 5 ms, often while the threads they start are starting).
Every result is compared with a NumPy model; after a cancelled launch the next ones must still be
right. A bounded run is part of the suite; `python -m tests.runtime.host.test_pool_handoff_random N [SEED]` runs N
launches."""

from __future__ import annotations

import concurrent.futures
import random
import sys
from typing import Any

import numpy as np
import pytest

import tessera
from tessera.base.errors import LaunchError
from tests.conftest import session_cache

pytestmark = pytest.mark.usefixtures("shared_cache")

SRC = """
@kernel tile[(64,)]
def work(x: i32[n], reps: i32[m], out: mut i32[m]):
    smem = tshared.alloc(i32[64])
    t = tile_linear_id()
    g = group_linear_id()
    acc = 0
    for r in range(reps[g]):
        acc += x[(g * 64 + t + r) % n]
    smem[t] = acc
    tbarrier()
    s = 32
    while s > 0:
        if t < s:
            smem[t] += smem[t + s]
        tbarrier()
        s //= 2
    if t == 0:
        out[g] = smem[0]

@kernel tile[(32,)]
def stall(out: mut i32[k], stuck: i32[m]):
    g = group_linear_id()
    t = tile_linear_id()
    if stuck[g] != 0:
        while True:
            out[g * 32 + t] += 1
    out[g * 32 + t] = g + 1
"""

X = np.random.default_rng(0).integers(-100, 100, 4099).astype(np.int32)


def model(reps: np.ndarray) -> np.ndarray:
    """What `work` writes: per group, the sum over its 64 tiles and reps[g] steps of x[(64 g + t + r) % n]."""
    t = np.arange(64)
    return np.array([int(X[(g * 64 + t[:, None] + np.arange(k)[None, :]) % X.size].sum())
                     for g, k in enumerate(reps)], np.int32)


def group_reps(rng: random.Random, profile: str, groups: int) -> np.ndarray:
    def one() -> int:
        if profile == "tiny" or (profile == "mixed" and rng.random() < 0.85):
            return rng.randint(0, 3)
        return rng.randint(300, 3000)
    return np.array([one() for _ in range(groups)], np.int32)


def launch_work(mod: Any, reps: np.ndarray, threads: int) -> str | None:
    """One launch of `work`; a message when its result is wrong."""
    out = np.full(reps.size, -7, np.int32)
    lib, info, bound = mod.work.prepare((X, reps, out), {}, grid=reps.size)
    lib.launch(info, bound, num_threads=threads, check_bounds=mod.check_bounds)
    want = model(reps)
    if (out == want).all():
        return None
    bad = np.flatnonzero(out != want)
    return f"{bad.size} of {reps.size} groups wrong on {threads} thread(s), first group {bad[0]}: {out[bad[0]]} != {want[bad[0]]}"


def stalled_groups(rng: random.Random) -> np.ndarray:
    """Which groups of a `stall` launch never end (at least one)."""
    groups = rng.randint(2, 12)
    stuck = np.array([rng.random() < 0.4 for _ in range(groups)], np.int32)
    stuck[rng.randrange(groups)] = 1
    return stuck


def launch_stalled(mod: Any, stuck: np.ndarray, threads: int, timeout: float = 0.05) -> str | None:
    """A launch with some groups that never end, cancelled by its timeout: it must raise, soon."""
    out = np.zeros(32 * stuck.size, np.int32)
    lib, info, bound = mod.stall.prepare((out, stuck), {}, grid=stuck.size)
    try:
        lib.launch(info, bound, num_threads=threads, timeout=timeout)
    except LaunchError as exc:
        return None if "did not finish within the timeout" in str(exc) else f"wrong error: {exc}"
    return "a launch with endless groups returned"


def concurrent_job(rng: random.Random, mod: Any, profile: str) -> tuple:
    """One of three launches made at once: mostly `work`, sometimes a `stall` launch cancelled
    after 1 to 5 ms (while the threads it starts may still be starting: the pool is in use)."""
    if rng.random() < 0.3:
        return (launch_stalled, mod, stalled_groups(rng), rng.randint(2, 4), rng.choice([0.001, 0.002, 0.005]))
    return (launch_work, mod, group_reps(rng, profile, rng.randint(1, 48)), rng.randint(1, 4))


def run(seed: int, steps: int, mods: tuple[Any, Any]) -> dict[str, int]:
    """`steps` random steps; returns how many of each kind ran, and fails on the first wrong result."""
    rng = random.Random(seed)
    seen = {"launches": 0, "concurrent": 0, "cancelled": 0}
    profile = "tiny"
    for step in range(steps):
        if rng.random() < 0.3:  # the kernel's next launches are unlike its last ones
            profile = rng.choice(["tiny", "mixed", "long"])
        mod = mods[rng.random() < 0.25]
        where = f"seed {seed} step {step} ({profile}, check_bounds={mod.check_bounds})"
        roll = rng.random()
        if roll < 0.04 or (step == steps // 2):
            err = launch_stalled(mod, stalled_groups(rng), rng.randint(1, 4))
            seen["cancelled"] += 1
            assert err is None, f"{where}: {err}"
        elif roll < 0.2 or step == steps // 2 + 1:
            jobs = [concurrent_job(rng, mod, profile) for _ in range(3)]
            with concurrent.futures.ThreadPoolExecutor(3) as pool:
                errs = list(pool.map(lambda job: job[0](*job[1:]), jobs))
            seen["concurrent"] += 3
            seen["cancelled"] += sum(job[0] is launch_stalled for job in jobs)
            assert errs == [None] * 3, f"{where}: {errs}"
        else:
            groups = rng.choice([1, 2, 3, 8, rng.randint(1, 96)]) if profile != "long" else rng.randint(1, 6)
            err = launch_work(mod, group_reps(rng, profile, groups), rng.randint(1, 4))
            assert err is None, f"{where}: {err}"
        seen["launches"] += 1
    return seen


def compile_both() -> tuple[Any, Any]:
    return tessera.compile(SRC, backend="cpu"), tessera.compile(SRC, backend="cpu", check_bounds=True)


@pytest.fixture(scope="module")
def mods(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TESSERA_CACHE_DIR", str(session_cache(tmp_path_factory)))
        yield compile_both()


@pytest.mark.parametrize("seed", (1, 2))
def test_random_launch_sequences(seed: int, mods: tuple[Any, Any]) -> None:
    seen = run(seed, 50, mods)
    assert seen["cancelled"] >= 1 and seen["concurrent"] >= 3, seen


if __name__ == "__main__":  # the long run: python -m tests.runtime.host.test_pool_handoff_random N [SEED]
    total, first = int(sys.argv[1]) if len(sys.argv) > 1 else 2000, int(sys.argv[2]) if len(sys.argv) > 2 else 100
    both = compile_both()
    for seed in range(first, first + total // 200):
        print(f"seed {seed}:", run(seed, 200, both), flush=True)
