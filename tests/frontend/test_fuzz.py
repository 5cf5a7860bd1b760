"""Property-based fuzzing of the front end (spec section 10: every malformed program gets a located
diagnostic, never a traceback).

Inputs are (a) token sequences from the grammar's vocabulary (keywords, builtin names, types,
punctuation, literals, newlines and indentation), loose or arranged in indented lines, and whole
programs generated from a small expression/statement grammar (mostly well-typed ones, which reach the
later passes and the C emitter); (b) mutations of the sample programs (lines deleted, duplicated,
swapped or re-indented; characters and raw bytes inserted or deleted; operators flipped; numbers
replaced by huge or negative ones; names replaced; a line nested in up to 400 blocks or brackets;
neighbouring tokens swapped). Each input must compile or raise `CompileError`
whose text starts with a located `fuzz.tsr:LINE:COL: error: `; anything else, an
`InternalCompilerError` included, is a bug. Derandomized: the same ~4,400 inputs on every run.

Every crash found this way was fixed and its minimized input added to tests/transpile/checks/test_diagnostics.py.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.base.dtypes import SCALARS
from tessera.base.errors import CompileError
from tessera.base.options import CompileOptions
from tessera.frontend.parser import KEYWORDS, decode_source
from tessera.transpile.checks.expr import BUILTIN_NAMES
from tessera.transpile.driver import compile_source
from tests.conftest import ROOT

# Recursive strategies describe themselves in events with a huge repr; that is harmless.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

DIAG = re.compile(r"^fuzz\.tsr:\d+:\d+: error: ")

FUZZ = settings(deadline=None, derandomize=True, database=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])


def check(data: bytes, arch: str = "sm_90") -> None:
    """The property: success, or a CompileError whose every diagnostic is located in the file."""
    try:
        src = decode_source(data, "fuzz.tsr")
        compile_source(src, options=CompileOptions(arch=arch))
    except CompileError as e:
        assert DIAG.match(e.text), e.text
        assert e.diagnostics, e.text
        nlines = data.count(b"\n") + 1
        for d in e.diagnostics:
            assert 1 <= d.loc.line <= nlines and d.loc.col >= 1, (d, e.text)


# ---- (a) token sequences ---------------------------------------------------------------------------

TYPES = sorted(SCALARS)
NAMES = ["x", "y", "n", "out", "smem", "i", "k", "acc", "kernel", "device", "autotune", "tile", "shared",
         "vectorize", "launch_bounds", "alloc", "pad", "scope", "stages", "key", "index", "atomic", "tsr_x",
         "__init", "class", "printf"]
PUNCT = ["(", ")", "[", "]", ":", ",", "=", "+", "-", "*", "/", "//", "%", "&", "|", "^", "~", "<<", ">>", "<", ">",
         "<=", ">=", "==", "!=", "+=", "-=", "*=", "/=", "//=", "%=", "&=", "|=", "^=", "<<=", ">>=", ".", "@", "->",
         "\\"]
LITERALS = ["0", "1", "2", "32", "128", "1024", "0x1F", "1_000", "1.0", ".5", "1e-3", "2.5e+4", "16_KiB", "48KiB",
            "1_MiB", '"s"', '"%d\\n"', '"group"', '"device"', "99999999999999999999999", "1e400", "2147483648",
            "-1", "3.4e38"]
LAYOUT = ["\n", "\n    ", "\n        ", "\n  ", "\n\t", " ", "#c\n", "\\\n", "\r\n"]
VOCAB = sorted(KEYWORDS) + sorted(BUILTIN_NAMES) + TYPES + NAMES + PUNCT + LITERALS + LAYOUT

token = st.sampled_from(VOCAB)


@settings(FUZZ, max_examples=700)
@given(st.lists(token, max_size=60))
def test_random_token_sequences(tokens: list[str]) -> None:
    check(" ".join(tokens).encode("utf-8"))


# Lines with an indentation and a few tokens: closer to real programs, so the parser gets further.
KERNEL_LINE = st.sampled_from(["@kernel tile[(128,)]", "@kernel tile[(32, 4)] shared(4_KiB)", "@device",
                               "def k(x: f32[n], out: mut f32[n], m: i32):", "def d(a: i32) -> i32:",
                               "const C = 4", "const T: f32[2] = [1.0, 2.0]"])
line = st.tuples(st.sampled_from([0, 0, 4, 4, 4, 8, 8, 12, 2]),
                 st.one_of(KERNEL_LINE.map(lambda s: [s]), st.lists(token, min_size=1, max_size=10)))


@settings(FUZZ, max_examples=700)
@given(st.lists(line, min_size=1, max_size=14))
def test_random_indented_lines(lines: list[tuple[int, list[str]]]) -> None:
    text = "\n".join(" " * indent + " ".join(toks) for indent, toks in lines) + "\n"
    check(text.encode("utf-8"))


# Whole programs from a small grammar of expressions and statements: they parse, so the type checker,
# the cooperation and shared-memory passes and the C emitter all see random (mostly ill-typed) code.
CALLEES = sorted(BUILTIN_NAMES) + TYPES + ["d", "index", "atomic", "math1", "view", "x", "m"]
VARS = ["x", "out", "m", "h", "n", "i", "a", "s", "r", "C", "T", "WARP_SIZE", "grid_groups", "tshared"]
expr = st.recursive(
    st.one_of(st.sampled_from(VARS), st.sampled_from(LITERALS[:20] + ["True", "False", '"group"', "2", "-3"])),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "//", "%", "&", "|", "^", "<<", ">>", "<", "==",
                                          " and ", " or "]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["-", "~", "not ", "+"]), inner).map(lambda t: f"({t[0]}{t[1]})"),
        st.tuples(st.sampled_from(CALLEES), st.lists(inner, max_size=3),
                  st.sampled_from(["", ", scope=\"group\"", ", pad=1"])).map(
            lambda t: f"{t[0]}({', '.join(t[1])}{t[2] if t[1] else ''})"),
        st.tuples(st.sampled_from(["x", "out", "s", "r", "T", "h", "m", "f32"]), st.lists(inner, min_size=1, max_size=3)).map(
            lambda t: f"{t[0]}[{', '.join(t[1])}]"),
        st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        st.tuples(st.sampled_from(["x", "out", "s"]), inner, inner).map(lambda t: f"{t[0]}[{t[1]}:{t[2]}]"),
    ),
    max_leaves=8,
)
simple_stmt = st.one_of(
    st.tuples(st.sampled_from(["a", "i", "b", "s", "r", "acc", "exp", "x", "m", "tsr_v", "class"]), expr).map(
        lambda t: f"{t[0]} = {t[1]}"),
    st.tuples(st.sampled_from(["out", "x", "s", "r", "h"]), expr, expr).map(lambda t: f"{t[0]}[{t[1]}] = {t[2]}"),
    st.tuples(st.sampled_from(["a", "i", "out[0]", "s[1]", "m"]), st.sampled_from(["+=", "//=", "<<=", "/=", "%="]),
              expr).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
    expr,
    st.sampled_from(["pass", "break", "continue", "return", "return 1", "tbarrier()", "s = tshared.alloc(f32[64])",
                     "s = tshared.alloc", "r = tregs(f32[2, 2], 0.0)", "a: f16 = 1", "tprint(\"%d %f\\n\", i, 1.0)",
                     "tcopy(s, x[i:i + 64])", "tassert(i > 0, \"bad\")"]),
)


def _block(stmts: st.SearchStrategy[list[str]]) -> st.SearchStrategy[list[str]]:
    header = st.one_of(expr.map(lambda e: f"if {e}:"), expr.map(lambda e: f"while {e}:"),
                       st.lists(expr, min_size=1, max_size=3).map(lambda a: f"for i in range({', '.join(a)}):"),
                       expr.map(lambda e: f"for j in static_range({e}):"), st.just("else:"), expr.map(lambda e: f"elif {e}:"))
    return st.tuples(header, stmts).map(lambda t: [t[0]] + ["    " + ln for ln in t[1]])


statements = st.recursive(st.lists(simple_stmt, min_size=1, max_size=4),
                          lambda inner: st.lists(st.one_of(simple_stmt.map(lambda s: [s]), _block(inner)),
                                                 min_size=1, max_size=4).map(lambda ls: [x for part in ls for x in part]),
                          max_leaves=6)
HEADERS = ["@kernel tile[(128,)]", "@kernel tile[(32, 4)] shared(4_KiB)", "@kernel tile[(48,)] shared(64)",
           "@kernel tile[(256,)] launch_bounds(2)", "@kernel tile[(1024,)] shared(200_KiB)", "@device"]
PARAMS = ["x: f32[n], out: mut f32[n], m: i32, h: f16[n]", "x: i32[n], out: mut u32[grid_groups], m: u8",
          "x: f64[n, C], out: mut bf16[C], m: bool, C: const i32 = 4", "x: i8[n], out: mut i64[n], m: f32"]


@settings(FUZZ, max_examples=400)
@given(st.sampled_from(HEADERS), st.sampled_from(PARAMS), statements, st.booleans())
def test_random_programs(header: str, params: str, body: list[str], with_device: bool) -> None:
    prelude = "const C = 4\nconst T: f32[2] = [1.0, 2.0]\n"
    if with_device:
        prelude += "@device\ndef d(a: f32) -> f32:\n    return a * 2.0\n"
    ret = " -> f32" if header == "@device" else ""
    text = prelude + f"{header}\ndef k({params}){ret}:\n" + "".join(f"    {ln}\n" for ln in body)
    check(text.encode("utf-8"))


# Mostly well-typed programs (int, float and bool expressions kept apart), so that many compile all
# the way to C: crashes in the later passes and the emitter only show on programs without errors.
ODD_CALLS = [f"{c}()" for c in CALLEES]
# Near misses of builtin names (cut at an underscore: `atomic`, `group`, `tile_linear`).
NEAR_MISSES = sorted({b.rsplit("_", 1)[0] for b in BUILTIN_NAMES if "_" in b} - BUILTIN_NAMES)
int_expr = st.recursive(
    st.sampled_from(["i", "m", "n", "C", "3", "0", "1_000", "0x1F", "tile_linear_id()", "lane_id()", "warp_id()",
                     "group_id(0)", "tile_id(0)", "group_linear_id()", "global_linear_id()", "WARP_SIZE",
                     "grid_groups", "group_tile_count()", "group_shape(0)", "2147483647", "-5"]),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "//", "%", "&", "|", "^"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(inner, st.sampled_from(["<<", ">>"]), st.sampled_from(["1", "3", "31"])).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["min", "max"]), inner, inner).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        inner.map(lambda e: f"abs({e})"), inner.map(lambda e: f"(-{e})"), inner.map(lambda e: f"(~{e})"),
        inner.map(lambda e: f"shfl({e}, 0)"), inner.map(lambda e: f"warp_sum({e})"),
        inner.map(lambda e: f"T2[{e} % 2]"), st.sampled_from(ODD_CALLS),
    ),
    max_leaves=6,
)
float_expr = st.recursive(
    st.one_of(st.sampled_from(["a", "1.0", ".5", "1e-3", "3.0e38", "alpha"]), int_expr.map(lambda e: f"x[{e}]"),
              int_expr.map(lambda e: f"f32({e})")),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["exp", "sqrt", "rsqrt", "tanh", "floor", "abs", "warp_max", "group_sum",
                                   "group_max", "f16", "bf16", "f64"]), inner).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(inner, inner).map(lambda t: f"pow({t[0]}, {t[1]})"),
        st.tuples(inner, inner, inner).map(lambda t: f"fma({t[0]}, {t[1]}, {t[2]})"),
        st.tuples(inner, int_expr, inner).map(lambda t: f"({t[0]} if {t[1]} > 0 else {t[2]})"),
        int_expr.map(lambda e: f"T[{e} % 2]"), inner.map(lambda e: f"d({e})"),
    ),
    max_leaves=6,
)
bool_expr = st.one_of(
    st.tuples(int_expr, st.sampled_from(["<", "<=", "==", "!=", ">"]), int_expr).map(lambda t: " ".join(t)),
    st.tuples(float_expr, st.sampled_from(["<", ">="]), float_expr).map(lambda t: " ".join(t)),
    st.tuples(int_expr, int_expr).map(lambda t: f"not ({t[0]} > 0) and {t[1]} < 10"),
)
typed_stmt = st.one_of(
    float_expr.map(lambda e: f"a = {e}"), float_expr.map(lambda e: f"a += {e}"), int_expr.map(lambda e: f"i = {e}"),
    st.tuples(int_expr, st.sampled_from(["+=", "//=", "<<=", "&=", "%="])).map(lambda t: f"i {t[1]} {t[0]}"),
    st.tuples(int_expr, float_expr).map(lambda t: f"out[{t[0]}] = {t[1]}"),
    st.tuples(int_expr, float_expr).map(lambda t: f"out[{t[0]}] += {t[1]}"),
    st.tuples(int_expr, float_expr).map(lambda t: f"sm[{t[0]} % 64] = {t[1]}"),
    st.tuples(int_expr, float_expr).map(lambda t: f"atomic_add(out[{t[0]}], {t[1]})"),
    st.tuples(st.sampled_from(sorted(BUILTIN_NAMES)), int_expr, float_expr).map(
        lambda t: f"{t[0]}(out[{t[1]}], {t[2]})"),
    st.tuples(st.sampled_from(NEAR_MISSES), int_expr, float_expr).map(lambda t: f"{t[0]}(out[{t[1]}], {t[2]})"),
    st.tuples(int_expr, float_expr).map(lambda t: f"r[{t[0]} % 2, 1] = {t[1]}"),
    st.tuples(int_expr, float_expr).map(lambda t: f'tprint("%d %f\\n", {t[0]}, {t[1]})'),
    st.sampled_from(["tbarrier()", "pass", "tcopy(sm, x[i:i + 64])", "tfence()", 'tassert(i >= 0, "i")']),
)


def _typed_block(stmts: st.SearchStrategy[list[str]]) -> st.SearchStrategy[list[str]]:
    header = st.one_of(bool_expr.map(lambda e: f"if {e}:"), bool_expr.map(lambda e: f"while {e}:"),
                       int_expr.map(lambda e: f"for k in range({e}):"),
                       st.sampled_from(["for k in static_range(4):", "for k in range(i, n, group_tile_count()):"]))
    tail = st.sampled_from([[], [], ["    break"], ["    continue"], ["    return"]])
    return st.tuples(header, stmts, tail).map(lambda t: [t[0]] + ["    " + ln for ln in t[1]] + t[2])


typed_statements = st.recursive(
    st.lists(typed_stmt, min_size=1, max_size=4),
    lambda inner: st.lists(st.one_of(typed_stmt.map(lambda s: [s]), _typed_block(inner)), min_size=1,
                           max_size=4).map(lambda ls: [x for part in ls for x in part]),
    max_leaves=6,
)
TYPED_PRELUDE = """const C = 4
const T: f32[2] = [1.0, 2.0]
const T2: i32[2] = [3, 4]

@device
def d(v: f32) -> f32:
    return v * 2.0

"""


TYPED = (st.sampled_from(["tile[(128,)]", "tile[(64, 2)] shared(2_KiB)", "tile[(96,)]", "tile[(256,)] launch_bounds(2)"]),
         typed_statements)


def check_typed(header: str, body: list[str]) -> None:
    text = TYPED_PRELUDE + f"@kernel {header}\ndef kern(x: f32[n], out: mut f32[n], m: i32, alpha: f32):\n" + \
        "    a = 0.0\n    i = tile_linear_id()\n    sm = tshared.alloc(f32[64])\n    r = tregs(f32[2, 2], 0.0)\n" + \
        "".join(f"    {ln}\n" for ln in body)
    check(text.encode("utf-8"))


@settings(FUZZ, max_examples=200)
@given(*TYPED)
def test_random_typed_programs(header: str, body: list[str]) -> None:
    check_typed(header, body)


@pytest.mark.slow
@settings(FUZZ, max_examples=600)
@given(*TYPED)
def test_random_typed_programs_long(header: str, body: list[str]) -> None:
    check_typed(header, body)


# ---- (b) mutations of real programs ------------------------------------------------------------------

EXTRA_SEEDS = [
    '''const EPS = 1e-5
const FLAG = True
const W: i32[2, 2] = [1, 2, 3, 4]

@device
def sq(v: f32) -> f32:
    return v * v

@device
def sync_twice():
    tbarrier()
    tbarrier()

@kernel tile[(256,)] launch_bounds(1)
def rownorm(x: f16[rows, cols], y: mut f16[rows, cols], hist: mut u32[64], eps: f32, scale: f64):
    row = group_linear_id()
    t = tile_linear_id()
    s: f32 = 0
    c = t
    while c < cols:
        v = f32(x[row, c])
        s += sq(v)
        c += group_tile_count()
    total = group_sum(s)
    inv = rsqrt(total / f32(cols) + eps + EPS)
    sync_twice()
    for c2 in range(t, cols, 256):
        y[row, c2] = f16(f32(x[row, c2]) * inv)
        b = u32(c2) & 63
        atomic_add(hist[i32(b)], 1)
    m = warp_max(s)
    l = lane_id()
    o = shfl_down(m, 1)
    o = o if l < 31 else m
    q = i64(o) << 2 >> 1
    z = -q if not FLAG else ~q
    k = W[1, 0] + W[0, 1] * 2 - 7 // 2 % 3
    f = floor(2.5) + ceil(f32(scale)) + log(2.0) + log2(8.0) + exp2(1.0) + sin(0.5) + cos(0.5) + erf(0.1)
    if t == 0 and row == 0:
        tprint("%d %d %f %u %%\\n", k, z, f, hist[0])
        tassert(f > 0.0, "positive")
    elif t == 1:
        pass
    else:
        atomic_exch(hist[0], 7, scope="group")
    tfence(scope="mesh")
    return
''',
    '''@kernel tile[(64,)] shared(1_KiB)
def counts(x: i32[n], out: mut i32[grid_groups], BM: const i32 = 8):
    smem = tshared.alloc
    r = tregs(i32[2, 2], 0)
    i = tile_linear_id()
    smem[i] = 0
    tbarrier()
    for k in range(global_linear_id(), n, grid_tile_count()):
        atomic_add(smem[x[k] & 63], 1)
    tbarrier()
    if i == 0:
        acc = 0
        for j in static_range(BM):
            acc += smem[j]
            r[j % 2, 0] += acc
        out[group_linear_id()] = acc + r[1, 0]
    g = group_shape(0) + group_count(0) + group_id(0) + tile_id(0) + warp_id() * WARP_SIZE
    out[0] += g - g
''',
    # Scalar parameters assigned in the body (a device function's and the kernel's own), tuple returns.
    '''@device
def fmix(h: u32, r: i32) -> (u32, i32):
    h ^= h >> 16
    h *= 0x85ebca6b
    while r > 0: r -= 3
    return h, r

@kernel tile[(4, 2, 2)]
def mix(x: u32[n], o: mut u32[n], s: i32, f: f32):
    i = global_linear_id()
    if i >= n: return
    s += i
    f *= 2.0
    h, s = fmix(x[i], s)
    o[i] = h + u32(s) + u32(f)
''',
]


def _seeds() -> list[bytes]:
    paths = sorted((ROOT / "samples").glob("*.tsr")) + sorted((ROOT / "tests" / "programs").glob("*.tsr"))
    return [p.read_bytes() for p in paths] + [s.encode("utf-8") for s in EXTRA_SEEDS]


SEEDS = _seeds()

OPERATORS = ["+", "-", "*", "/", "//", "%", "<", ">", "<=", ">=", "==", "!=", "&", "|", "^", "<<", ">>", " and ",
             " or ", "=", "+=", ":", ","]
NUMBERS = ["0", "-1", "-0", "99999999999", "2147483648", "-2147483649", "18446744073709551616", "4294967296",
           "1e39", "1e309", "1e-50", "0.0", "65536", "1025", "1_000_000", "0x7fffffff", "64_MiB", "3.5", "-7"]
INSERTS = ["(", ")", "[", "]", ":", ",", "\t", "\r", "\x0c", "\x00", "#", '"', "\\", "'", "@", "$", "`", "\u00e9",
           "\u2028", "\ufeff", "\x85", " ", "\n", "\n    ", "0", "_", ".", "=", "-", "e"]
IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
TOKEN = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*|[0-9][0-9_.]*|//=?|<<=?|>>=?|[-+*/%&|^<>=!]=|\S")
NUMBER = re.compile(rb"[0-9][0-9_.]*(?:[eE][+-]?[0-9]+)?(?:_?[KM]iB)?")
REPLACEMENTS = sorted(KEYWORDS) + sorted(BUILTIN_NAMES) + TYPES + NAMES + ["tshared", "mut", "const"]

# One mutation: (kind, a, b, c) with small integers interpreted modulo the input's sizes.
mutation = st.tuples(st.integers(0, 13), st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 10_000))


def _nth(pattern: re.Pattern[bytes], data: bytes, k: int) -> re.Match[bytes] | None:
    found = list(pattern.finditer(data))
    return found[k % len(found)] if found else None


def mutate(data: bytes, kind: int, a: int, b: int, c: int) -> bytes:
    lines = data.split(b"\n")
    i, j = a % len(lines), b % len(lines)
    if kind == 0:                                   # delete a line
        del lines[i]
    elif kind == 1:                                 # duplicate a line elsewhere
        lines.insert(j, lines[i])
    elif kind == 2:                                 # swap two lines
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == 3:                                 # change a line's indentation
        lines[i] = b" " * (c % 14) + lines[i].lstrip(b" ")
    elif kind == 4:                                 # insert a character
        pos = b % (len(lines[i]) + 1)
        lines[i] = lines[i][:pos] + INSERTS[c % len(INSERTS)].encode("utf-8") + lines[i][pos:]
    elif kind == 5:                                 # insert a raw byte (maybe not UTF-8)
        pos = b % (len(lines[i]) + 1)
        lines[i] = lines[i][:pos] + bytes([c % 256]) + lines[i][pos:]
    elif kind == 6:                                 # delete a few characters
        pos = b % (len(lines[i]) + 1)
        lines[i] = lines[i][:pos] + lines[i][pos + 1 + c % 6:]
    elif kind == 7:                                 # flip an operator
        ops = [m for op in OPERATORS for m in re.finditer(re.escape(op.encode()), lines[i])]
        if ops:
            m = ops[b % len(ops)]
            lines[i] = lines[i][:m.start()] + OPERATORS[c % len(OPERATORS)].encode() + lines[i][m.end():]
    elif kind == 8:                                 # replace a number by a huge, negative or odd one
        m = _nth(NUMBER, lines[i], b)
        if m:
            lines[i] = lines[i][:m.start()] + NUMBERS[c % len(NUMBERS)].encode() + lines[i][m.end():]
    elif kind == 9:                                 # replace a name by a keyword, builtin or type
        m = _nth(IDENT, lines[i], b)
        if m:
            lines[i] = lines[i][:m.start()] + REPLACEMENTS[c % len(REPLACEMENTS)].encode() + lines[i][m.end():]
    elif kind == 10:                                # replace a name by another name of the same file
        m, other = _nth(IDENT, lines[i], b), _nth(IDENT, data, c)
        if m and other:
            lines[i] = lines[i][:m.start()] + other.group(0) + lines[i][m.end():]
    elif kind == 11:                                # nest a line in 1 to 400 blocks or brackets
        ind = lines[i][:len(lines[i]) - len(lines[i].lstrip(b" "))]
        depth = 1 + c % 400
        if b % 2:
            lines[i:i + 1] = [ind + b"    " * k + b"if True:" for k in range(depth)] + \
                [ind + b"    " * depth + lines[i].lstrip(b" ")]
        else:
            m = _nth(IDENT, lines[i], b)
            if m:
                lines[i] = lines[i][:m.start()] + b"(" * depth + m.group(0) + b")" * depth + lines[i][m.end():]
    elif kind == 12:                                # swap two neighbouring tokens
        toks = list(TOKEN.finditer(lines[i]))
        if len(toks) >= 2:
            k = b % (len(toks) - 1)
            x, y = toks[k], toks[k + 1]
            line = lines[i]
            lines[i] = line[:x.start()] + y.group(0) + line[x.end():y.start()] + x.group(0) + line[y.end():]
    else:                                           # truncate the file
        return data[: a % (len(data) + 1)]
    return b"\n".join(lines)


MUTATED = (st.integers(0, len(SEEDS) - 1), st.lists(mutation, min_size=1, max_size=5),
           st.sampled_from(["sm_90", "sm_86", "sm_75"]))


def check_mutated(seed: int, mutations: list[tuple[int, int, int, int]], arch: str) -> None:
    data = SEEDS[seed]
    for m in mutations:
        data = mutate(data, *m)
    check(data, arch)


@settings(FUZZ, max_examples=500)
@given(*MUTATED)
def test_mutated_samples(seed: int, mutations: list[tuple[int, int, int, int]], arch: str) -> None:
    check_mutated(seed, mutations, arch)


@pytest.mark.slow
@settings(FUZZ, max_examples=2000)
@given(*MUTATED)
def test_mutated_samples_long(seed: int, mutations: list[tuple[int, int, int, int]], arch: str) -> None:
    check_mutated(seed, mutations, arch)


def test_seeds_compile() -> None:
    """The unmutated seeds are valid programs, so mutations start from deep inside the compiler."""
    assert len(SEEDS) >= 3
    for data in SEEDS:
        check(data)
        compile_source(decode_source(data, "fuzz.tsr"))
