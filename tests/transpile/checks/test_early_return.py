"""Cooperative operations after a `return` that only some tiles take (spec section 7: warp
operations need all 32 lanes, group reductions the whole group). `if i >= n: return` followed by
`warp_sum(x[i])` compiled and summed stale values on the CPU backend (undefined on a GPU); now it
is a located error with a note at the return. `tbarrier()` alone may follow such a return, as in
CUDA, and warp operations may follow a return under a warp-uniform condition (llm.c's
`if idx >= N: return` with `idx` from `warp_id()`). A seeded generator nests returns, conditions
and loops of each kind around cooperative operations and checks the reported lines against a model."""

from __future__ import annotations

import random
import re

import pytest

from tessera.base.errors import CompileError, SourceFile
from tessera.transpile.driver import compile_source

HEAD = "@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n], Y: mut f32[64, 64]):\n"
HEAD += "    s = tshared.alloc(f32[128])\n    S = tfrag(f32[64, 64], 0.0)\n    i = global_linear_id()\n"


def errors(body: str) -> list[str]:
    """The diagnostics as tesserac prints them, one string per error (with its source line, caret
    and notes)."""
    src = HEAD + "".join("    " + line + "\n" for line in body.splitlines())
    try:
        compile_source(SourceFile("r.tsr", src))
    except CompileError as e:
        found: list[str] = []
        for line in e.text.splitlines():
            if re.match(r"r\.tsr:\d+:\d+: error: ", line):
                found.append(line)
            elif found:
                found[-1] += "\n" + line
        return found
    return []


@pytest.mark.parametrize("op, message", [
    ("out[i] = warp_sum(x[i])", "warp_sum() must be reached by all 32 lanes of the warp, but some lanes may have returned"),
    ("out[i] = shfl_xor(x[i], 1)", "shfl_xor() must be reached by all 32 lanes"),
    ("out[i] = group_sum(x[i])", "group_sum() must be reached by every tile of the group, but some tiles may have returned"),
    ("out[i] = group_cumsum(x[i])", "group_cumsum() must be reached by every tile of the group"),
    ("tcopy(s, x[0:128])", "tcopy() must be reached by every tile of the group"),
    ("S[:] = S + 1.0", "a whole-fragment statement must be reached by every tile of the group"),
    ("tstore(Y[0:64, 0:64], S)", "tstore() must be reached by every tile of the group"),
])
def test_a_cooperative_operation_after_a_lane_dependent_return_is_an_error(op: str, message: str) -> None:
    found = errors(f"if i >= n:\n    return\n{op}")
    assert len(found) == 1 and message in found[0], found
    assert found[0].startswith("r.tsr:8:") and "r.tsr:7:9: note: tiles may return here" in found[0]


def test_a_return_inside_a_loop_reaches_the_operations_of_later_iterations() -> None:
    found = errors("for r in range(4):\n    v = warp_sum(x[i])\n    if lane_id() == r:\n        return\n    out[i] = v")
    assert len(found) == 1 and "r.tsr:7:13: error: warp_sum()" in found[0], found


def test_a_device_function_that_synchronizes_is_an_error_after_such_a_return() -> None:
    src = ("@device\ndef sync_sum(s: mut f32[128], t: i32) -> f32:\n    tbarrier()\n    return s[t]\n\n"
           + HEAD + "    if i >= n:\n        return\n    out[i] = sync_sum(s, i)\n")
    with pytest.raises(CompileError, match="sync_sum\\(\\) must be reached by every tile of the group"):
        compile_source(SourceFile("r.tsr", src))


@pytest.mark.parametrize("body", [
    "if i >= n:\n    return\ntbarrier()\nout[i] = s[i]",                          # CUDA: exited threads skip barriers
    "w = group_id(0) * 4 + warp_id()\nif w >= n:\n    return\nout[w] = warp_sum(x[lane_id()])",   # llm.c
    "if tile_linear_id() >= 64:\n    return\nout[i] = warp_max(x[i])",              # whole warps return
    "if group_id(0) * 128 >= n:\n    return\nout[i] = group_sum(x[i])\nS[:] = S * 2.0",  # the whole group returns
    "v = warp_sum(x[i])\nif i >= n:\n    return\nout[i] = v",                         # the operation comes first
])
def test_what_may_follow_a_return(body: str) -> None:
    assert errors(body) == []


# ---- the generator -------------------------------------------------------------------------

UNIFORM, WARP, LANE = 0, 1, 2
CONDS = [("n > 3", UNIFORM), ("group_id(0) == 1", UNIFORM), ("warp_id() == 1", WARP),
         ("tile_linear_id() < 64", WARP), ("lane_id() < 5", LANE), ("tile_linear_id() == 3", LANE)]
OPS = [("tbarrier()", UNIFORM, False), ("out[0] = group_sum(1.0)", UNIFORM, True),
       ("out[1] = warp_sum(1.0)", WARP, True), ("out[2] = shfl_xor(1.0, 3)", WARP, True)]


Node = tuple  # ("op", k) | ("return",) | ("if", k, [Node]) | ("for", [Node])


def tree(r: random.Random, depth: int = 0) -> list[Node]:
    nodes: list[Node] = []
    for _ in range(r.randint(1, 4)):
        kind = r.choice(["op", "op", "return", "if", "for"] if depth < 3 else ["op", "op", "return"])
        if kind == "op":
            nodes.append(("op", r.randrange(len(OPS))))
        elif kind == "return":
            nodes.append(("return",))
        elif kind == "if":
            nodes.append(("if", r.randrange(len(CONDS)), tree(r, depth + 1)))
        else:
            nodes.append(("for", tree(r, depth + 1)))
    return nodes


def render(nodes: list[Node], indent: str, lines: list[tuple[str, Node]]) -> None:
    for n in nodes:
        if n[0] == "op":
            lines.append((indent + OPS[n[1]][0], n))
        elif n[0] == "return":
            lines.append((indent + "return", n))
        elif n[0] == "if":
            lines.append((f"{indent}if {CONDS[n[1]][0]}:", n))
            render(n[2], indent + "    ", lines)
        else:
            lines.append((f"{indent}for q{len(indent)} in range(3):", n))
            render(n[1], indent + "    ", lines)


def returns_in(nodes: list[Node], cond: int) -> int:
    level = UNIFORM
    for n in nodes:
        if n[0] == "return":
            level = max(level, cond)
        elif n[0] == "if":
            level = max(level, returns_in(n[2], max(cond, CONDS[n[1]][1])))
        elif n[0] == "for":
            level = max(level, returns_in(n[1], cond))
    return level


def model(nodes: list[Node], cond: int, returned: int, loop: int, bad: set[int]) -> int:
    """The model of the contract: an operation is reported when the control it is under varies more
    than it allows, or (all but tbarrier) when tiles that vary more may have returned before it,
    earlier in the body or anywhere in an enclosing loop (a later iteration). Returns the level of
    the returns taken in `nodes`; `bad` gets the ids of the reported operations."""
    for n in nodes:
        if n[0] == "op":
            _, allowed, needs_all = OPS[n[1]]
            if cond > allowed or (needs_all and max(returned, loop) > allowed):
                bad.add(id(n))
        elif n[0] == "return":
            returned = max(returned, cond)
        elif n[0] == "if":
            returned = max(returned, model(n[2], max(cond, CONDS[n[1]][1]), returned, loop, bad))
        else:
            returned = max(returned, model(n[1], cond, returned, max(loop, returns_in(n[1], cond)), bad))
    return returned


def check_generated(seed: int) -> None:
    r = random.Random(seed)
    nodes = [("op", r.randrange(len(OPS)))] + tree(r)
    lines: list[tuple[str, Node]] = []
    render(nodes, "", lines)
    bad: set[int] = set()
    model(nodes, UNIFORM, UNIFORM, UNIFORM, bad)
    first = HEAD.count("\n") + 1
    want = sorted(first + k for k, (_, n) in enumerate(lines) if id(n) in bad)
    body = "\n".join(text for text, _ in lines)
    found = errors(body)
    got = sorted(int(d.split(":")[1]) for d in found)
    assert got == want, f"seed {seed}\n{body}\n" + "\n".join(found)


@pytest.mark.parametrize("seed", range(150))
def test_generated_returns_match_the_model(seed: int) -> None:
    check_generated(seed)
