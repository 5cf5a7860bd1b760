"""Names that collide (transpile/names.py, transpile/lir/cnames.py): a function named like a generic
function's instance, parameters named like instances and like their own kernel, shape symbols named
like parameters; then a random generator of programs whose names collide in every way, judged
against a model of the language's scoping rules: a program the model accepts compiles with NVRTC
and runs on the CPU backend with the model's result, and one it rejects gets only located errors,
each pointing at a name of the program.

`python -m tests.transpile.test_name_collisions COUNT [SEED]` runs a longer form."""

from __future__ import annotations

import random
import re
import sys
from dataclasses import dataclass

import numpy as np
import pytest

import tessera
from tessera.base.errors import CompileError, InternalCompilerError, SourceFile, TesseraError
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.checks.scope import BUILTIN_NAMES
from tessera.transpile.driver import compile_source

pytestmark = pytest.mark.usefixtures("shared_cache")

LERP = "@device\ndef lerp[T](a: T, b: T, t: T) -> T:\n    return a + (b - a) * t\n\n"


def both(text: str) -> tessera.api.Module:
    """NVRTC compiles the program for sm_80 without warnings, and the CPU backend builds it."""
    cuda = compile_source(SourceFile("t.tsr", text)).cuda
    assert compile_cuda(cuda, name="t.cu", arch="sm_80", cubin=False).warnings == ()
    return tessera.compile(text, backend="cpu")


def test_device_function_named_like_an_instance() -> None:
    # lerp_T_f32 was the tree name of lerp's f32 instance: the call of lerp found the user's function
    # instead, and lowering failed an assertion (an internal compiler error).
    mod = both(LERP + "@device\ndef lerp_T_f32(a: f32, b: f32, t: f32) -> f32:\n    return a * 100.0\n\n"
               "@kernel tile[(32,)]\ndef k(x: mut f32[n]):\n    i = tile_linear_id()\n    if i < n:\n"
               "        x[i] = lerp(x[i], 3.0, 0.5) + lerp_T_f32(x[i], 0.0, 1.0)\n")
    x = np.ones(4, np.float32)
    mod.k(x, grid=1)
    assert x.tolist() == [102.0] * 4


@pytest.mark.parametrize("rename", [False, True], ids=["launched", "every-binding"])
def test_kernel_named_like_an_instance(rename: bool) -> None:
    # A kernel lerp_T_f32 next to lerp's instance (was "'lerp_T_f32' is already defined", at lerp); a
    # kernel scale_T_f32 next to the instances tesserac emits for every allowed type of scale[T].
    text = (LERP + "@kernel tile[(1,)]\ndef k(x: mut f32[n]):\n    x[0] = lerp(x[0], 3.0, 0.5)\n\n"
            "@kernel tile[(1,)]\ndef lerp_T_f32(x: mut f32[n]):\n    x[0] = 7.0\n\n"
            "@kernel tile[(1,)]\ndef scale[T: (f32, f64)](x: mut T[n]):\n    x[0] = x[0] * T(2)\n\n"
            "@kernel tile[(1,)]\ndef scale_T_f32(x: mut f32[n]):\n    x[0] = 5.0\n")
    names = [k.c_name for k in compile_source(SourceFile("t.tsr", text)).kernels] if rename else []
    assert names in ([], ["k", "lerp_T_f32", "scale_T_f32_v2", "scale_T_f64", "scale_T_f32"])
    mod = both(text)
    x = np.ones(1, np.float32)
    mod.k(x, grid=1)
    mod.scale(x, grid=1)
    assert x[0] == 4.0
    mod["lerp_T_f32"](x, grid=1)
    assert x[0] == 7.0
    mod.scale_T_f32(x, grid=1)
    assert x[0] == 5.0


def test_parameter_named_like_an_instance() -> None:
    # The parameter hid the instance its call of lerp prints as: NVRTC and g++ rejected the C.
    mod = both(LERP + "@kernel tile[(32,)]\ndef k(x: mut f32[n], lerp_T_f32: f32):\n    i = tile_linear_id()\n"
               "    if i < n:\n        x[i] = lerp(x[i], 3.0, lerp_T_f32)\n")
    x = np.ones(4, np.float32)
    mod.k(x, 0.5, grid=1)
    assert x.tolist() == [2.0] * 4


def test_shape_symbol_named_like_an_instance() -> None:
    mod = both(LERP + "@kernel tile[(32,)]\ndef k(x: mut f32[lerp_T_f32]):\n    i = tile_linear_id()\n"
               "    if i < lerp_T_f32:\n        x[i] = lerp(x[i], 3.0, 0.5)\n")
    x = np.ones(4, np.float32)
    mod.k(x, grid=1)
    assert x.tolist() == [2.0] * 4


def test_const_parameter_named_like_its_kernel() -> None:
    # `BM` printed as the kernel's C name `BM_BM4` (a pointer to function), not the constant.
    mod = both("@kernel tile[(1,)]\ndef BM(x: mut f32[n], BM: const i32 = 4):\n    x[0] = f32(BM)\n\n"
               "@kernel tile[(1,)]\ndef k(x: mut f32[n], other: const i32 = 2):\n    x[1] = f32(other)\n\n"
               "@kernel tile[(1,)]\ndef other(x: mut f32[n], k: const i32 = 3):\n    x[2] = f32(k)\n")
    x = np.zeros(3, np.float32)
    mod.BM(x, grid=1)
    mod.k(x, grid=1)
    mod.other(x, grid=1)
    mod.BM(x, grid=1, BM=9)
    assert x.tolist() == [9.0, 2.0, 3.0]


# ---- the generator -------------------------------------------------------------------------------

# Names the emitted C, its headers, the CPU backend's prelude or the compiler itself use, some of them
# builtins of the language (an error) or keywords (a syntax error).
NASTY = """int float double auto class new delete this template typename namespace operator register volatile
signed unsigned char short long void return_ static_cast NULL nullptr main printf malloc free assert sizeof
threadIdx blockIdx blockDim gridDim warpSize dim3 half half2 float2 float4 int4 uint32_t size_t __half __nv_bfloat16
nv_bfloat16 __syncthreads __shfl_sync atomicAdd make_float4 expf sqrtf fminf __expf std tsr TESSERA_HOST clock stdout
abort memcpy tsr_x tsr_u_x tsr_j tsr_e tsr_i tsr_first tsr_result0 tsr_t0 tsr_shared_x TSR_y Tsr_z _x _Y x__y
exp min max abs f32 i32 bool range tshared grid_groups inf WARP_SIZE pass True in""".split()
TSR_KEYWORDS = frozenset("def const mut if elif else while for in break continue return pass and or not True "
                         "False".split())
RESERVED = BUILTIN_NAMES | TSR_KEYWORDS | {"tshared"}
N = 37  # the tensors' length, also the module constant's value (a shape symbol named like it is that constant)
Q = 4   # the const parameter's default

# Each slot: (name, scope, role), drawn in this order (so that H and K may take names made from G and T). Scopes: "module", or the function a name belongs to; roles: item,
# type (type parameter), param, const (const parameter), shape (shape symbol), local.
SLOTS = (("C", "module", "item"), ("G", "module", "item"), ("T", "G", "type"), ("H", "module", "item"),
         ("K", "module", "item"), ("ga", "G", "param"), ("gb", "G", "param"),
         ("ha", "H", "param"), ("hv", "H", "param"), ("hs", "H", "shape"), ("hl", "H", "local"),
         ("kx", "K", "param"), ("ky", "K", "param"), ("ko", "K", "param"), ("kp", "K", "param"),
         ("kq", "K", "const"), ("kn", "K", "shape"), ("ki", "K", "local"), ("kl", "K", "local"),
         ("ka", "K", "local"), ("kj", "K", "local"), ("ks", "K", "local"))
ORDER = ("C", "G", "H", "K")  # module items in source order

TEMPLATE = """const {C} = {N}

@device
def {G}[{T}]({ga}: {T}, {gb}: {T}) -> {T}:
    return {ga} + {gb} * {T}(2)

@device
def {H}({ha}: f32, {hv}: f32[{hs}]) -> f32:
    {hl} = {ha} * 2.0
    return {hl} + {hv}[0] + f32({hs})

@kernel tile[(32,)]
def {K}({kx}: f32[{kn}], {ky}: i32[{kn}], {ko}: mut f32[{kn}], {kp}: f32, {kq}: const i32 = {Q}):
    {ks} = tshared.alloc(f32[32])
    {ks}[tile_linear_id()] = 1.0
    tbarrier()
    {ki} = global_linear_id()
    if {ki} < {kn}:
        {kl} = {kx}[{ki}] + {kp}
        {ka} = 0.0
        for {kj} in range({kq}):
            if {kj} % 2 == 0:
                {ka} += f32({kj})
        {ko}[{ki}] = {G}({kl}, f32({kq})) + {H}({kl}, {kx}) + f32({C}) + f32({G}({ky}[{ki}], {kq})) + {ka} + {ks}[0]
"""


def expected(x: np.ndarray, y: np.ndarray, p: float, names: dict[str, str]) -> np.ndarray | None:
    """What the template computes (every value an exact f32); None where a loop variable is the
    index `ki`, which the loop leaves at Q - 1 (the tiles then race for one element)."""
    if names["kj"] == names["ki"]:
        return None
    even = sum(j for j in range(Q) if j % 2 == 0)
    lo = x + np.float32(p) if names["ka"] != names["kl"] else np.full_like(x, even)
    g = lo + np.float32(Q * 2)
    h = lo * 2 + x[0] + N
    return (g + h + N + (y + Q * 2).astype(np.float32) + even + 1).astype(np.float32)


def draw(rng: random.Random) -> dict[str, str]:
    """A name for every slot: a fresh one, a nasty one, another slot's, or a name the compiler makes
    for another slot (an instance of G, the variant of K, an aligned variant, a renamed name)."""
    names: dict[str, str] = {}
    for slot, _, _ in SLOTS:
        made = []
        if "G" in names and "T" in names:
            made += [f"{names['G']}_{names['T']}_f32", f"{names['G']}_{names['T']}_i32"]
        if "K" in names and "kq" in names:
            made += [f"{names['K']}_{names['kq']}{Q}", f"{names['K']}_{names['kq']}{Q}_a16", f"{names['K']}_a16"]
        made += [f"tsr_u_{n}" for n in names.values()]
        r = rng.random()
        if r < 0.7 or not names:
            names[slot] = f"{slot}{rng.randrange(3)}"
        elif r < 0.85:
            names[slot] = rng.choice(NASTY)
        elif r < 0.95 and made:
            names[slot] = rng.choice(made)
        else:
            names[slot] = rng.choice(list(names.values()))
    return names


def model_accepts(names: dict[str, str]) -> bool:
    """The language's scoping rules (docs/language.md sections 2, 4, 5) for the template's names."""
    if any(names[slot] in RESERVED and not (role == "shape" and names[slot] == "grid_groups")
           for slot, _, role in SLOTS):
        return False  # grid_groups is the builtin shape symbol (launched with N groups, it is N)
    module = [names[s] for s in ORDER]
    if len(set(module)) != len(module):
        return False  # every item name is unique
    for fn in ("G", "H", "K"):
        # A loop variable may be an i32 local, and a local may be assigned again (then `ka` is `kl`).
        again = {"kj"} if names["kj"] == names["ki"] else set()
        again |= {"ka"} if names["ka"] == names["kl"] else set()
        own = [names[s] for s, scope, _ in SLOTS if scope == fn and s not in again]
        if len(set(own)) != len(own):
            return False  # names in one function (type parameter, parameters, shape symbols, locals)
        declared = module[:ORDER.index(fn) + 1]  # the items up to and including this function
        for slot, scope, role in SLOTS:
            n = names[slot]
            if scope != fn:
                continue
            if role == "type" and n in module:
                return False  # a type parameter may not be named like any module item
            if role in ("param", "const") and n == names["C"]:
                return False  # a parameter may not hide a module constant
            if role in ("param", "const") and fn == "K" and n in (names["G"], names["H"]):
                return False  # it would hide a function the body calls
            if role == "local" and n in declared:
                return False  # a local may not be named like an item defined above it
            if role == "shape" and n in declared and n != names["C"]:
                return False  # a shape symbol named like a function is not a dimension
    return True


def _at(source: str, line: int, col: int) -> str:
    text = source.splitlines()[line - 1] if 1 <= line <= len(source.splitlines()) else ""
    m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text[col - 1:])
    return m.group(0) if m else ""


def _first_c_error(text: str) -> str:
    return next((line for line in text.splitlines() if "error" in line), text[:300])


@dataclass
class Outcome:
    accepted: bool
    problem: str = ""  # empty: as the model says


def judge(names: dict[str, str], run: bool = True) -> Outcome:
    source = TEMPLATE.format(N=N, Q=Q, **names)
    want = model_accepts(names)
    try:
        cuda = compile_source(SourceFile("g.tsr", source)).cuda
    except InternalCompilerError as e:
        return Outcome(False, f"internal compiler error: {e}")
    except CompileError as e:
        errors = [d for d in e.diagnostics if d.severity == "error"]
        # Every error has a place; the first points at a name (later ones may follow from it).
        located = all(d.loc.line >= 1 for d in errors) and _at(source, errors[0].loc.line, errors[0].loc.col) in \
            names.values()
        if any(n in TSR_KEYWORDS for n in names.values()):  # a syntax error, at the token after the keyword
            located = all(d.loc.line >= 1 for d in errors)
        problem = "" if located and not want else f"rejected ({'' if located else 'not located: '}{e.text})"
        return Outcome(False, problem)
    if not want:
        return Outcome(True, "accepted, but the model rejects it")
    try:
        nv = compile_cuda(cuda, name="g.cu", arch="sm_80", cubin=False)
    except CompileError as e:
        return Outcome(True, f"NVRTC rejected the C: {_first_c_error(e.text)}")
    if nv.warnings:
        return Outcome(True, f"NVRTC warnings: {nv.warnings}")
    if run:
        x = np.arange(N, dtype=np.float32) - 5
        y = np.arange(N, dtype=np.int32) * 3 - 7
        out = np.zeros(N, np.float32)
        try:
            tessera.compile(source, backend="cpu")[names["K"]](x, y, out, 0.5, grid=N)
        except TesseraError as e:
            return Outcome(True, f"the CPU backend failed: {_first_c_error(str(e))}")
        want = expected(x, y, 0.5, names)
        if want is not None and not np.array_equal(out, want):
            return Outcome(True, f"wrong result: {out[:4]} != {want[:4]}")
    return Outcome(True)


@pytest.mark.parametrize("seed", range(6))
def test_generated_name_collisions(seed: int) -> None:
    """Each seed draws programs until it has one the model accepts (run on the CPU backend) and
    checks the ones it rejects on the way (fewer than 40 each)."""
    rng = random.Random(seed)
    for _ in range(40):
        names = draw(rng)
        outcome = judge(names)
        assert not outcome.problem, (names, outcome.problem)
        if outcome.accepted:
            return
    pytest.fail("no accepted program drawn")


def main(count: int, seed: int) -> None:
    rng = random.Random(seed)
    accepted = 0
    for k in range(count):
        names = draw(rng)
        outcome = judge(names)
        accepted += outcome.accepted
        if outcome.problem:
            print(f"#{k}: {names}\n  {outcome.problem}")
    print(f"{count} programs, {accepted} accepted")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0)
