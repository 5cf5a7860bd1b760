"""What `tesserac tune FILE --kernel K --shape M=4096 ... --arch sm_90` prints: a kernel's search space
judged without running anything: the candidates, what was pruned and why, and the cost model's ranking.

`--grid` gives the launch's grid as expressions of the shape symbols and the const parameters
(`--grid "(N + BN - 1) // BN" --grid "(M + BM - 1) // BM"`, one per axis), read with Python's
`ast` and a whitelist of integer operators (no eval); without it a launch of one group is assumed.
"""

from __future__ import annotations

import ast
from collections import Counter
from typing import Any

from tessera.base.errors import CompileError, TesseraError

_OPS: dict[type, Any] = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
                         ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}


def grid_value(text: str, env: dict[str, Any]) -> int:
    """An integer grid expression's value; ValueError naming what is not allowed."""
    if len(text) > 200:
        raise ValueError("is longer than 200 characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ValueError("is not an expression") from None

    def value(n: ast.AST) -> int:
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, ast.Name):
            v = env.get(n.id)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"names {n.id!r}, which is not a shape symbol or an integer const parameter")
            return v
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -value(n.operand)
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            a, b = value(n.left), value(n.right)
            if isinstance(n.op, (ast.FloorDiv, ast.Mod)) and b == 0:
                raise ValueError("divides by zero")
            r = _OPS[type(n.op)](a, b)
            if abs(r) >= 2**63:
                raise ValueError("overflows")
            return r
        raise ValueError("uses something other than integers, names, + - * // % and parentheses")
    return value(tree.body)


def report(path: str, kernel: str, arch: str, shapes: dict[str, int], grid: list[str], defines: dict) -> str:
    """The text `tesserac tune` prints."""
    from tessera.autotune.search import candidates, config_text, judge_all
    from tessera.transpile.driver import front_end, load_source
    from tessera.transpile.passes.autotune_spec import tune_spaces

    front = front_end(load_source(path))
    if front.diagnostics:
        raise CompileError(list(front.diagnostics), front.source)
    spaces = tune_spaces(front.module, front.source)
    if kernel not in spaces:
        raise TesseraError(f"kernel {kernel!r} has no valid @autotune (kernels with one: {', '.join(spaces) or 'none'};"
                           " `tesserac FILE` reports the errors)")
    space = spaces[kernel]
    missing = [s for s in space.key if s not in shapes]
    if missing:
        raise TesseraError(f"give the key's shape symbols with --shape: {', '.join(f'{s}=...' for s in missing)}")
    types = {t.name: t for f in front.module.items if getattr(f, "name", None) == kernel
             for t in getattr(f, "type_params", ())}
    for bad in [n for n, v in defines.items() if isinstance(v, str) and n not in types]:
        raise TesseraError(f"-D {bad}: tune fixes const parameters and binds type parameters only")
    unbound = [t for t in types.values() if t.name not in defines]
    if unbound:
        raise TesseraError("bind the kernel's type parameters with -D: " + ", ".join(
            f"-D {t.name}=" + ("|".join(t.allowed) if t.allowed else "TYPE") for t in unbound))

    def groups_of(consts: dict[str, Any]) -> int | None:
        if not grid:
            return None
        n = 1
        for g in grid:
            try:
                n *= max(1, grid_value(g, {**shapes, **consts}))
            except ValueError as e:
                raise TesseraError(f"--grid {g[:60]!r} {e}") from None
        return n

    fixed = {n: v for n, v in defines.items() if n in space.names}
    other = {n: v for n, v in defines.items() if n not in space.names}
    configs = candidates(space, fixed)
    judged = judge_all(front, arch, kernel, configs, other, shapes, groups_of)
    out = [f"{kernel} on {arch}, shapes {', '.join(f'{n}={v}' for n, v in shapes.items())}: "
           f"{len(configs)} candidate(s) from @autotune({', '.join(f'{n}={list(v)}' for n, v in space.axes)})"]
    if not grid:
        out.append("note: no --grid given; the cost model assumes a launch of one group")
    pruned = [j for j in judged if j.pruned]
    rules = Counter(j.rule for j in pruned)
    out.append(f"pruned: {len(pruned)}" + (f" ({', '.join(f'{r}: {n}' for r, n in rules.items())})" if pruned else ""))
    for j in pruned:
        out.append(f"  {config_text(j.config)}: {j.rule}: {j.reason}")
    ranked = sorted((j for j in judged if not j.pruned), key=lambda j: (j.estimate.time_us if j.estimate else 0, j.config))
    out.append(f"ranking by the cost model ({len(ranked)} survivor(s); estimates, not measurements):")
    out.append(f"  {'#':>3}  {'estimate us':>11}  {'bound':<13} {'occupancy':>9} {'regs':>4} {'shared':>7}  configuration")
    for i, j in enumerate(ranked, 1):
        e, r = j.estimate, j.resources
        assert e is not None and r is not None
        out.append(f"  {i:>3}  {e.time_us:>11.4g}  {e.bound:<13} {e.occupancy:>9.2f} {r.registers:>4} {r.shared:>7}  "
                   f"{config_text(j.config)}")
    return "\n".join(out) + "\n"
