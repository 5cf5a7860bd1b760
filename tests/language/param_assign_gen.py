"""A seeded generator of programs that assign scalar parameters (tests/language/test_param_assign.py).

Each generated `@device` function updates its `u32` parameter `p` with random statements (augmented
and plain assignments, tuple assignments, inside `if`/`elif`, `for` and `while`, with early
returns), and comes in two spellings: assigning the parameter itself, and the simpler construct a
program had to use before, an explicit local copy (`q = p0`). A kernel runs both on every input, and
a third copy of the statements assigns the kernel's own scalar parameter. `model` computes the same
statements in Python with u32 wrap-around (spec section 6: `//` and `%` truncate; shifts by 0..31).
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass

M32 = 2**32 - 1


@dataclass(frozen=True)
class Program:
    source: str
    bodies: tuple[tuple[tuple, ...], ...]  # per function, the statements as `model` reads them


def _stmt(r: random.Random, depth: int) -> tuple:
    k = r.randrange(11 if depth < 2 else 7)
    c = r.randrange(1, 1 << r.choice([3, 8, 31]))
    if k == 0:
        return ("aug", r.choice(["+", "-", "*", "^", "|", "&"]), ("k", c))
    if k == 1:
        return ("aug", r.choice([">>", "<<"]), ("k", r.randrange(32)))
    if k == 2:
        return ("aug", "^", ("shr", r.randrange(1, 32)))
    if k == 3:
        return ("aug", r.choice(["//", "%"]), ("k", r.randrange(1, 100)))
    if k == 4:
        return ("set", ("mix", c, r.randrange(1, 32)))
    if k == 5:
        return ("swap", c)
    if k == 6:
        return ("ret_if", r.randrange(2, 9), r.randrange(9))
    if k == 7:
        return ("if", r.randrange(2, 5), _block(r, depth + 1), _block(r, depth + 1))
    if k == 8:
        return ("for", r.randrange(4), _block(r, depth + 1))
    if k == 9:
        return ("while", r.randrange(10, 10**6), r.randrange(2, 9))
    return ("if", r.randrange(2, 5), _block(r, depth + 1), ())


def _block(r: random.Random, depth: int) -> tuple[tuple, ...]:
    return tuple(_stmt(r, depth) for _ in range(r.randint(1, 3)))


def _value(v: tuple, var: str) -> str:
    if v[0] == "k":
        return f"{v[1]}"
    if v[0] == "shr":
        return f"({var} >> {v[1]})"
    return f"{var} * {v[1]} + ({var} >> {v[2]})"  # "mix"


def _text(body: tuple[tuple, ...], var: str, ind: str, ret: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for s in body:
        if s[0] == "aug":
            out.append(f"{ind}{var} {s[1]}= {_value(s[2], var)}")
        elif s[0] == "set":
            out.append(f"{ind}{var} = {_value(s[1], var)}")
        elif s[0] == "swap":  # a tuple assignment through a temporary local
            out.append(f"{ind}{var}, t = u32({s[1]}), {var}")
            out.append(f"{ind}{var} += t")
        elif s[0] == "ret_if":
            if len(ret) == 1:  # a one-line suite
                out.append(f"{ind}if {var} % {s[1]} == {s[2]}: {ret[0]}")
            else:
                out += [f"{ind}if {var} % {s[1]} == {s[2]}:", *(f"{ind}    {x}" for x in ret)]
        elif s[0] == "if":
            out.append(f"{ind}if {var} % {s[1]} == 0:")
            out.extend(_text(s[2], var, ind + "    ", ret) or [f"{ind}    pass"])
            if s[3]:
                out.append(f"{ind}else:")
                out.extend(_text(s[3], var, ind + "    ", ret))
        elif s[0] == "for":
            j = f"j{len(ind) // 4}"  # nested loops need variables of their own
            out.append(f"{ind}for {j} in range({s[1]}):")
            out.extend(_text(s[2], var, ind + "    ", ret) or [f"{ind}    pass"])
            out.append(f"{ind}    {var} += u32({j})")
        else:  # while: terminates, as `var //= d` with d >= 2 does
            out.append(f"{ind}while {var} > {s[1]}: {var} //= {s[2]}")
    return out


_OPS = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "^": int.__xor__, "|": int.__or__,
        "&": int.__and__, ">>": int.__rshift__, "<<": int.__lshift__, "//": int.__floordiv__,
        "%": int.__mod__, "=": lambda v, w: w}


class _Return(Exception):
    pass


def _run(body: tuple[tuple, ...], p: list[int]) -> None:
    for s in body:
        v = p[0]
        if s[0] in ("aug", "set"):
            x = s[2] if s[0] == "aug" else s[1]
            w = x[1] if x[0] == "k" else v >> x[1] if x[0] == "shr" else (v * x[1] + (v >> x[2])) & M32
            op = s[1] if s[0] == "aug" else "="
            p[0] = _OPS[op](v, w) & M32
        elif s[0] == "swap":
            p[0] = (s[1] + v) & M32
        elif s[0] == "ret_if":
            if v % s[1] == s[2]:
                raise _Return
        elif s[0] == "if":
            _run(s[2] if v % s[1] == 0 else s[3], p)
        elif s[0] == "for":
            for j in range(s[1]):
                _run(s[2], p)
                p[0] = (p[0] + j) & M32
        else:
            while p[0] > s[1]:
                p[0] //= s[2]


def model(body: tuple[tuple, ...], x: int) -> int:
    """The value the function returns for the argument `x` (an early return returns `p` as it is)."""
    p = [x]
    with contextlib.suppress(_Return):
        _run(body, p)
    return p[0]


def program(seed: int, functions: int = 4) -> Program:
    """A module of `functions` generated functions, each spelled twice, and a kernel `run` writing
    `o[i, 3f]` (the parameter assigned), `o[i, 3f + 1]` (a local copy) and `o[i, 3f + 2]` (the
    statements on the kernel's own parameter `s`, for f = 0 only)."""
    r = random.Random(seed)
    bodies = tuple(_block(r, 0) for _ in range(functions))
    lines: list[str] = []
    for f, body in enumerate(bodies):
        lines += [f"@device\ndef assigned{f}(p: u32) -> u32:", *_text(body, "p", "    ", ("return p",)), "    return p", ""]
        lines += [f"@device\ndef copied{f}(p0: u32) -> u32:", "    q = p0", *_text(body, "q", "    ", ("return q",)),
                  "    return q", ""]
    lines += ["@kernel tile[(64,)]", f"def run(x: u32[n], o: mut u32[n, {3 * functions}], s: u32):",
              "    i = global_linear_id()", "    if i >= n:", "        return"]
    for f in range(functions):
        lines += [f"    o[i, {3 * f}] = assigned{f}(x[i])", f"    o[i, {3 * f + 1}] = copied{f}(x[i])"]
    # The kernel's own parameter: every tile assigns its copy (s + x[i]), then runs the statements.
    lines += ["    s += x[i]", *_text(bodies[0], "s", "    ", ("o[i, 2] = s", "return")), "    o[i, 2] = s"]
    return Program("\n".join(lines) + "\n", bodies)
