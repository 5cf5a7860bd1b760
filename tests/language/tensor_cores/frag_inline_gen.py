"""A seeded random generator of kernels that move whole-fragment statements into device functions
taking fragments (spec section 14: `S: mut frag f32[BM, BN]`, inlined), with the same NumPy model as
frag_expr_gen.py. It makes the statements of frag_expr_gen.Gen (2-D and row-vector statements,
reductions, broadcasts, coordinates, conversions to the f16 fragment H), in uniform loops and
conditions, then writes the program twice:

- inline: as frag_expr_gen writes it;
- device: some statements, loops and conditions, or the bodies of loops and conditions, become
  device functions whose fragment parameters have other names (and constant or symbolic extents),
  and some functions are called a second time on other fragments of the same shape (S and T, v and
  w swapped), a step the model runs with the names swapped.

Both programs run on the CPU backend: the device form must equal the inline form with the extra
calls (bit for bit: the inlined code is the same) and match the model."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from tests.language.tensor_cores.frag_expr_gen import BM, BN, HEAD, TAIL, Env, Gen

Step = Callable[[Env], None]
FRAGS = {"S": (f"f32[{BM}, {BN}]", "f32[R, C]"), "T": (f"f32[{BM}, {BN}]", "f32[R, C]"),
         "H": (f"f16[{BM}, {BN}]", "f16[R, C]"), "v": (f"f32[{BM}]", "f32[R]"), "w": (f"f32[{BM}]", "f32[R]")}
SWAP = {"S": "T", "T": "S", "v": "w", "w": "v", "H": "H"}
PARAMS = {"S": "P", "T": "Q", "H": "G", "v": "a", "w": "z"}  # the parameters' names in the device functions


def _words(text: str, mapping: dict[str, str]) -> str:
    """`text` with each identifier in `mapping` replaced."""
    return re.sub(r"[A-Za-z_]\w*", lambda m: mapping.get(m[0], m[0]), text)


def swapped(steps: list[Step]) -> Step:
    """The steps run on the environment with the fragments renamed by SWAP."""
    def run(e: Env) -> None:
        view = dict(e)
        for a, b in SWAP.items():
            view[a] = e[b]
        for s in steps:
            s(view)
        for a, b in SWAP.items():
            e[b] = view[a]
    return run


class InlineGen:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.gen = Gen(seed)
        self.funcs: list[str] = []

    def unit(self) -> tuple[str, str, list[Step], int]:
        """One statement, loop or condition: (its body's lines, its header or "", the body's steps, how
        many times the body runs)."""
        g = self.gen
        shape = self.rng.random()
        if shape < 0.25:
            body = [g.statement("        ") for _ in range(2)]
            return "".join(t for t, _ in body), "    for it in range(2):\n", [fn for _, fn in body], 2
        if shape < 0.45:  # k > 0 in every launch
            text, fn = g.statement("        ")
            return text, "    if k > 0:\n", [fn], 1
        text, fn = g.statement("    ")
        return text, "", [fn], 1

    def function(self, lines: str, dedent: int) -> tuple[str, list[str]]:
        """A device function made of `lines` (their indentation less `dedent`): its name and the
        fragments it takes, in order (under other names, with constant or symbolic extents)."""
        used = [f for f in FRAGS if f in re.findall(r"[A-Za-z_]\w*", lines)]
        name = f"f{len(self.funcs)}"
        symbolic = self.rng.random() < 0.5
        params = [f"{PARAMS[f]}: mut frag {FRAGS[f][1 if symbolic else 0]}" for f in used]
        params += ["b: f32[n]", "c: f32[m]", "m0: i32", "k: i32"]
        body = "".join(line[dedent:] + "\n" for line in lines.rstrip("\n").split("\n"))
        self.funcs.append(f"@device\ndef {name}({', '.join(params)}):\n{_words(body, PARAMS)}\n")
        return name, used

    def program(self, count: int) -> tuple[str, str, list[Step]]:
        """(the inline program, the device-function program, the model's steps of both)."""
        inline, device, steps = HEAD, HEAD, []
        for _ in range(count):
            text, header, body, reps = self.unit()
            choice = self.rng.random()
            again = self.rng.random() < 0.4  # the function called again on the swapped fragments
            if choice < 0.3:  # unchanged
                inline += header + text
                device += header + text
                steps.extend(body * reps)
            elif choice < 0.65 or not header:  # the whole unit is the function
                name, used = self.function(header + text, 0)
                inline += header + text
                device += f"    {name}({', '.join(used)}, b, c, m0, k)\n"
                steps.extend(body * reps)
                if again:
                    inline += _words(header + text, SWAP)
                    device += f"    {name}({', '.join(SWAP[f] for f in used)}, b, c, m0, k)\n"
                    steps.append(swapped(body * reps))
            else:  # the loop or condition stays; its body is the function, called inside it
                name, used = self.function(text, 4)
                inline += header + text + (_words(text, SWAP) if again else "")
                device += header + f"        {name}({', '.join(used)}, b, c, m0, k)\n"
                if again:
                    device += f"        {name}({', '.join(SWAP[f] for f in used)}, b, c, m0, k)\n"
                steps.extend((body + ([swapped(body)] if again else [])) * reps)
        return inline + TAIL, "".join(self.funcs) + device + TAIL, steps


__all__ = ["InlineGen", "swapped"]
