"""A seeded random generator of kernels that read, write and atomically update (atomic_add) the
elements of a shared array from every tile, with barriers in random places (some missing), and its
model (spec section 7): within one barrier interval, two different tiles touching an element, at
least one of them with a plain write, or one with a plain access and the other with an atomic
update, is a data race, which the CPU backend's race detector (check_bounds) must report; atomic
updates by several tiles are not. Without a race the results are those of running the tiles one
after another in each interval (every value an exact i32)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

L = 16  # the shared array's length


@dataclass(frozen=True)
class Access:
    kind: str   # read | write | atomic
    a: int      # the element: (a * t + b) % L for tile t
    b: int
    when: str   # which tiles: a condition on t ("" for all)
    value: int  # written or added

    def element(self, t: int) -> int:
        return (self.a * t + self.b) % L

    def applies(self, t: int) -> bool:
        return {"": True, "even": t % 2 == 0, "low": t < 8, "one": t == 3}[self.when]

    def text(self) -> str:
        cond = {"": "", "even": "t % 2 == 0", "low": "t < 8", "one": "t == 3"}[self.when]
        idx = f"({self.a} * t + {self.b}) % {L}"
        stmt = {"read": f"acc += s[{idx}]", "write": f"s[{idx}] = t + {self.value}",
                "atomic": f"atomic_add(s[{idx}], {self.value})"}[self.kind]
        return f"if {cond}: {stmt}" if cond else stmt


def program(seed: int) -> tuple[str, list[list[Access]], int]:
    """The kernel, its barrier intervals (each a list of accesses in program order) and the tile count."""
    rng = random.Random(seed)
    tiles = rng.choice([16, 32, 64])
    intervals: list[list[Access]] = [[]]
    lines = [f"@kernel tile[({tiles},)]", "def k(X: i32[n], Y: mut i32[n], S: mut i32[n2]):",
             f"    s = tshared.alloc(i32[{L}])", "    t = tile_linear_id()", "    acc = X[t]",
             f"    if t < {L}:", "        s[t] = t", "    tbarrier()"]
    for _ in range(rng.randint(2, 7)):
        if intervals[-1] and rng.random() < 0.35:
            lines.append("    tbarrier()")
            intervals.append([])
        kind = rng.choice(["read", "write", "atomic", "atomic"])
        acc = Access(kind, rng.choice([0, 1, 1, 3]), rng.randrange(L), rng.choice(["", "", "even", "low", "one"]),
                     rng.randint(1, 9))
        intervals[-1].append(acc)
        lines.append("    " + acc.text())
    lines += ["    tbarrier()", "    Y[t] = acc", f"    if t < {L}:", "        S[t] = s[t]", ""]
    return "\n".join(lines), intervals, tiles


def model(intervals: list[list[Access]], tiles: int, x: np.ndarray) -> tuple[bool, np.ndarray, np.ndarray]:
    """Whether the program races, and (if not) Y and S."""
    s = [t for t in range(L)]
    acc = [int(v) for v in x[:tiles]]
    for accesses in intervals:
        touched: dict[int, dict[str, set[int]]] = {}
        for t in range(tiles):  # no race: the tiles one after another give the results
            for a in accesses:
                if not a.applies(t):
                    continue
                e = a.element(t)
                touched.setdefault(e, {"read": set(), "write": set(), "atomic": set()})[a.kind].add(t)
                if a.kind == "read":
                    acc[t] += s[e]
                elif a.kind == "write":
                    s[e] = t + a.value
                else:
                    s[e] += a.value
        for who in touched.values():
            plain = who["read"] | who["write"]
            if any(len(who["write"] | {t}) > 1 for t in plain | who["atomic"]) and who["write"]:
                return True, np.zeros(0), np.zeros(0)
            if who["atomic"] and any(len(who["atomic"] | {t}) > 1 for t in plain):
                return True, np.zeros(0), np.zeros(0)
    return False, np.array(acc, np.int32), np.array(s, np.int32)


__all__ = ["Access", "L", "model", "program"]
