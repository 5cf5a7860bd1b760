"""Diagnostics (spec section 10): a catalog of malformed programs run through the real `tesserac`
command line in-process. Each entry pins the exit status, the exact `file:line:col` of the first
diagnostic, the source line and caret under it, and a distinctive part of the message; no entry may
produce a traceback or an internal compiler error. Then: programs that must NOT be errors, several
errors in one run, hostile identifiers, strings, `-D` values and bytes.

Entries whose id starts with `fuzz-` are minimized inputs on which tests/frontend/test_fuzz.py found the
compiler crashing (an internal compiler error); they are kept here as regressions.
"""

from __future__ import annotations

import random
import re

import pytest

from tessera.base.errors import CompileError
from tessera.cli.compile import run
from tests.transpile.checks.catalog import (
    HEAD,
    MAP_HEAD,
    Case,
    check_catalog_case,
    check_source_and_caret,
    kern,
    write_source,
)

TC_HEAD = "@kernel tile[(128,)]\ndef k(A: f16[M, K], B: f16[K, N], C: mut f32[M, N], m: i32):\n"
TC_ARRAYS = "As = tshared.alloc(f16[64, 32])\nBs = tshared.alloc(f16[32, 64])\nacc = tfrag(f32[64, 64], 0.0)\n"

DEV2 = "@device\ndef two(a: f32) -> (f32, f32):\n    return a, a * 2.0\n\n"


CATALOG: list[Case] = [
    # ---- syntax
    Case("missing-colon-def", "@kernel tile[(128,)]\ndef k(x: f32[n])\n    pass\n", 2, 17,
         ("unexpected end of line; expected", "':'")),
    Case("missing-colon-if", kern("if m > 0\n    out[0] = 1.0"), 3, 13, ("unexpected end of line", "':'")),
    Case("unbalanced-paren", kern("y = (x[0] + 1\nz = 2"), 3, 9, "'(' was never closed"),
    Case("unclosed-bracket-at-eof", kern("y = x[0"), 3, 10, "'[' was never closed"),
    Case("extra-close-paren", kern("y = x[0])"), 3, 13, "unexpected ')'"),
    Case("bad-token", kern("y = x[0] $ 1"), 3, 14, "unexpected character '$'"),
    Case("bad-token-non-ascii", kern("y\u00e9 = 1"), 3, 6, "unexpected character '\u00e9'"),
    Case("keyword-as-name", kern("def = 3"), 3, 5, "'def' is a keyword and cannot be used as a name"),
    Case("keyword-as-parameter", "@kernel tile[(32,)]\ndef k(if: f32):\n    pass\n", 2, 7,
         "'if' is a keyword and cannot be used as a name"),
    Case("keyword-as-loop-variable", kern("for in in range(3):\n    pass"), 3, 9, "'in' is a keyword"),
    Case("stray-else", kern("else:\n    pass"), 3, 5, "unexpected keyword 'else'"),
    Case("stray-elif", kern("y = 1\nelif y:\n    pass"), 4, 5, "unexpected keyword 'elif'"),
    Case("incomplete-expression", kern("y = 1 +"), 3, 12, "unexpected end of line"),
    Case("lone-carriage-return", b"const A = 1\rconst B = 2\n", 1, 12, "unexpected character U+000D"),
    # ---- indentation
    Case("tab-in-indentation", HEAD + "\ty = 1\n", 3, 1, "tab in indentation; indent with spaces"),
    Case("tab-after-spaces", HEAD + "    y = 1\n  \tz = 2\n", 4, 3, "tab in indentation"),
    Case("unexpected-indent", kern("y = 1\n    z = 2"), 4, 9, "unexpected indent"),
    Case("dedent-to-no-level", kern("if True:\n    y = 1\n  z = 2"), 5, 7,
         "unindent does not match any outer indentation level"),
    Case("missing-indented-block", kern("if True:\nz = 2"), 4, 5, "expected an indented block"),
    Case("missing-indented-block-dedent", HEAD + "    if True:\nz = 2\n", 4, 1, "expected an indented block"),
    Case("missing-indented-block-at-eof", kern("if True:"), 3, 13, "expected an indented block"),
    # ---- names
    Case("unknown-builtin-did-you-mean", kern("y = tile_lnear_id()"), 3, 9, "undefined name 'tile_lnear_id'",
         note="did you mean 'tile_linear_id'?"),
    Case("unknown-local-did-you-mean", kern("total = 1.0\nout[0] = totl"), 4, 14, "undefined name 'totl'",
         note="did you mean 'total'?"),
    Case("undefined-function", kern("foo(1)"), 3, 5, "undefined name 'foo'"),
    Case("device-function-defined-later", kern("out[0] = d(1.0)") + "\n@device\ndef d(a: f32) -> f32:\n    return a\n",
         3, 14, "'d' is defined later in the file (line 6)", note="defined here"),
    Case("kernel-called-from-kernel",
         kern("pass", "@kernel tile[(32,)]\ndef k1(a: f32):\n") + kern("k1(1.0)", "@kernel tile[(32,)]\ndef k2():\n"),
         6, 5, "'k1' is a kernel; a kernel is launched from the host"),
    Case("value-builtin-called", kern("y = WARP_SIZE()"), 3, 9, "'WARP_SIZE' is a value, not a function"),
    Case("redefine-builtin", kern("exp = 1.0"), 3, 5, "'exp' is a builtin name and cannot be redefined"),
    Case("redefine-builtin-module", "const tbarrier = 3\n", 1, 1, "'tbarrier' is a builtin name"),
    Case("builtin-not-called", kern("y = tile_linear_id + 1"), 3, 9, "'tile_linear_id' is a builtin function; call it"),
    Case("duplicate-parameter", "@kernel tile[(128,)]\ndef k(out: mut f32[n], out: f32[n]):\n    pass\n", 2, 24,
         "duplicate parameter 'out'"),
    Case("duplicate-kernel", kern("pass") + kern("pass"), 5, 5, "'k' is already defined", note="first defined here"),
    # ---- types
    Case("float-to-int", kern("i = 1\ni = 1.5"), 4, 5,
         ("cannot convert f32 to i32 implicitly in assignment to 'i'", "use i32(...)")),
    Case("int-slash-int", kern("a = m / 2"), 3, 11, ("'/' of two integers is not allowed", "use '//'")),
    Case("bitwise-float", kern("a = x[0] & 1"), 3, 14, "'&' needs integer operands, not f32"),
    Case("shift-float", kern("a = x[0] << 1"), 3, 14, "'<<' needs integer operands, not f32"),
    Case("invert-float", kern("a = ~x[0]"), 3, 9, "'~' needs an integer operand, not f32"),
    Case("chained-comparison", kern("a = m < 1 < 2"), 3, 11,
         ("chained comparisons are not allowed", "a < b and b < c")),
    Case("wrong-arity-builtin", kern("a = exp(1.0, 2.0)"), 3, 9, "exp() takes 1 argument, got 2"),
    Case("wrong-arity-cast", kern("a = f32()"), 3, 9, "f32() takes 1 argument, got 0"),
    Case("index-count-mismatch", kern("a = x[0, 1]"), 3, 9, "'x' has 1 dimension but is indexed with 2"),
    Case("index-a-scalar", kern("a = m[0]"), 3, 9, "i32 cannot be indexed"),
    Case("float-index", kern("a = x[1.5]"), 3, 11, "index must be an integer, not f32"),
    Case("store-to-non-mut", kern("x[0] = 1.0"), 3, 5, ("cannot store to 'x'", "declare the parameter as 'x: mut f32[...]'")),
    Case("aug-store-to-non-mut", kern("x[0] += 1.0"), 3, 5, "declare the parameter as 'x: mut f32[...]'"),
    Case("atomic-on-non-mut", kern("atomic_add(x[0], 1.0)"), 3, 16, "'x' is not mut; declare it 'mut'"),
    # A scalar parameter is passed by value and may be assigned (tests/language/test_param_assign.py).
    Case("assign-to-shape-symbol", kern("n = 3"), 3, 5, "cannot assign to the shape symbol 'n'"),
    Case("assign-to-array-parameter", kern("x = 3"), 3, 5, "cannot assign to the parameter 'x'"),
    Case("expression-without-effect", kern("x[0] + 1.0"), 3, 10, "this expression has no effect"),
    Case("string-outside-call", kern('a = "text"'), 3, 9, "a string is only allowed as an argument"),
    Case("unknown-type", "@kernel tile[(128,)]\ndef k(out: mut f31[n]):\n    pass\n", 2, 16, "unknown type 'f31'"),
    Case("unknown-annotation", kern("a: f31 = 1"), 3, 8, "unknown type 'f31'"),
    Case("mut-scalar-parameter", "@kernel tile[(128,)]\ndef k(out: mut f32[n], a: mut f32):\n    pass\n", 2, 24,
         "scalar parameter 'a' cannot be mut"),
    # ---- control flow
    Case("break-outside-loop", kern("break"), 3, 5, "'break' outside a loop"),
    Case("continue-outside-loop", kern("if m > 0:\n    continue"), 4, 9, "'continue' outside a loop"),
    Case("return-value-from-kernel", kern("return 1"), 3, 12, "a kernel cannot return a value"),
    Case("device-missing-return", "@device\ndef d(a: i32) -> i32:\n    if a > 0:\n        return a\n", 2, 5,
         "can reach its end without returning"),
    # ---- compile-time constants
    Case("tile-dim-is-shape-symbol", "@kernel tile[(n,)]\ndef k(out: mut f32[n]):\n    pass\n", 1, 15,
         ("a tile dimension must be a compile-time constant", "'n' is a shape symbol")),
    Case("tregs-dim-is-runtime-param", kern("a = tregs(f32[m], 0.0)"), 3, 19,
         ("a dimension of tregs() must be a compile-time constant", "declare it 'm: const i32'")),
    Case("static-range-of-variable", kern("c = 3\nfor i in static_range(c):\n    pass"), 4, 27,
         ("a static_range bound must be a compile-time constant", "'c' is a variable")),
    Case("tile-too-large", "@kernel tile[(2048,)]\ndef k(out: mut f32[n]):\n    pass\n", 1, 15,
         "a tile dimension must be between 1 and 1024, not 2048"),
    Case("group-too-large", "@kernel tile[(64, 64)]\ndef k(out: mut f32[n]):\n    pass\n", 1, 9,
         "a group has at most 1024 tiles"),
    Case("missing-tile-clause", "@kernel shared(1_KiB)\ndef k(out: mut f32[n]):\n    pass\n", 1, 1,
         "a kernel needs a group shape"),
    Case("unknown-decorator", "@kernal tile[(32,)]\ndef k(out: mut f32[n]):\n    pass\n", 1, 1,
         "unknown decorator '@kernal'"),
    Case("module-constant-not-constant", "const A = tile_linear_id()\n", 1, 11,
         "a module constant must be a compile-time constant"),
    Case("module-constant-f32-range", "const BIG = 1e300\n", 1, 1, "module constant 'BIG': 1e+300 is out of the f32 range"),
    Case("module-constant-i64-range", "const HUGE = 99999999999 * 99999999999\n", 1, 1,
         "module constant 'HUGE': 9999999999800000000001 does not fit in i64"),
    Case("table-value-range", "const T: i8[2] = [1, 300]\n", 1, 22, "table 'T' of i8: 300 does not fit in i8"),
    Case("table-size-mismatch", "const T: f32[4] = [1.0, 2.0]\n", 1, 1, "table 'T' has 4 elements but 2 values"),
    Case("int-literal-does-not-fit", kern("out[0] = f32(i8(m) + 300)"), 3, 26, "integer literal 300 does not fit in i8"),
    Case("negative-literal-unsigned", kern("u = u32(m)\nout[0] = f32(u + -1)"), 4, 22, "integer literal -1 does not fit in u32"),
    Case("f32-literal-out-of-range", kern("out[0] = 1e39"), 3, 14, "float literal 1e+39 is out of the f32 range"),
    Case("f32-literal-rounds-to-zero", kern("out[0] = 1e-50"), 3, 14, "float literal 1e-50 is too small for f32"),
    Case("division-by-constant-zero", kern("a = m // 0"), 3, 11, "division by zero"),
    Case("modulo-by-zero-constant-expr", "const Z = 0\n" + kern("a = m % (Z * 2)"), 4, 11, "division by zero"),
    Case("shift-count-out-of-range", kern("a = m << 32"), 3, 11, "shift count 32 is out of range for i32 (0 to 31)"),
    Case("constant-overflow", kern("a = 2147483647 + 1"), 3, 20, "constant expression overflows i32"),
    # ---- shared memory
    Case("shared-alloc-in-if", kern("if m > 0:\n    s = tshared.alloc(f32[32])"), 4, 13,
         "shared memory can only be allocated at the top level of a kernel body"),
    Case("shared-alloc-in-loop", kern("for i in range(4):\n    s = tshared.alloc(f32[32])"), 4, 13,
         "only be allocated at the top level"),
    Case("shared-alloc-in-device-function", "@device\ndef d():\n    s = tshared.alloc(f32[32])\n", 3, 9,
         "shared memory can only be allocated in a kernel"),
    Case("shared-over-budget",
         kern("a = tshared.alloc(f32[128])\nb = tshared.alloc(f32[256])", "@kernel tile[(128,)] shared(1_KiB)\n"
              "def k(out: mut f32[n]):\n"), 4, 9,
         "over the kernel's budget of 1024 bytes", note="'b' takes 1024 bytes"),
    Case("shared-over-arch-limit", kern("a = tshared.alloc(f32[256, 256])"), 3, 9,
         "needs 262144 bytes of shared memory, over the 101376 bytes a group can have on sm_86",
         args=("--arch", "sm_86")),
    Case("bare-alloc-without-shared", kern("smem = tshared.alloc"), 3, 12,
         "a bare tshared.alloc takes the whole shared(...) budget; add shared(SIZE)"),
    Case("tshared-alloc-in-expression", kern("y = 1 + tshared.alloc"), 3, 13, "tshared.alloc is only allowed as the value"),
    # ---- cooperation (spec section 7)
    Case("barrier-under-tile-if", kern("if tile_linear_id() < 64:\n    tbarrier()"), 4, 9,
         "tbarrier() must be reached by every tile of the group", note="the tile-dependent condition"),
    Case("barrier-under-tile-while",
         kern("i = tile_linear_id() * 2\nj = i + 1\nwhile j < 100:\n    tbarrier()\n    j += 1"), 6, 9,
         "tbarrier() must be reached by every tile of the group"),
    Case("group-sum-under-lane-if", kern("if lane_id() < 3:\n    out[0] = group_sum(1.0)"), 4, 18,
         "group_sum() must be reached by every tile of the group"),
    Case("warp-sum-under-lane-if", kern("if lane_id() == 0:\n    out[0] = warp_sum(1.0)"), 4, 18,
         "warp_sum() must be reached by all 32 lanes of the warp"),
    Case("barrier-after-tile-dependent-break",
         kern("for j in range(10):\n    if tile_linear_id() == j:\n        break\n    tbarrier()"), 6, 9,
         "tbarrier() must be reached by every tile of the group", note="the tile-dependent condition or loop"),
    Case("cooperative-device-call-under-tile-if",
         "@device\ndef sync():\n    tbarrier()\n\n" + kern("if tile_linear_id() == 0:\n    sync()"), 8, 9,
         "sync() must be reached by every tile of the group"),
    Case("tile-index-behind-device-function",
         "@device\ndef me() -> i32:\n    return tile_linear_id()\n\n" + kern("if me() < 32:\n    tbarrier()"), 8, 9,
         "tbarrier() must be reached by every tile of the group", note="the tile-dependent condition"),
    Case("tile-index-through-device-function-argument",
         "@device\ndef plus(a: i32, b: i32) -> i32:\n    return a + b\n\n"
         + kern("v = plus(1, lane_id())\nif v > 3:\n    tbarrier()"), 9, 9,
         "tbarrier() must be reached by every tile of the group"),
    Case("tile-dependent-argument-of-synchronizing-function",
         "@device\ndef sync_if(c: i32):\n    if c < 3:\n        tbarrier()\n\n" + kern("sync_if(lane_id())"), 8, 13,
         "this argument of sync_if() depends on the tile index, but sync_if() calls tbarrier()",
         note="the condition in sync_if() is here"),
    Case("barrier-after-tile-dependent-continue",
         kern("for j in range(4):\n    if lane_id() == j:\n        continue\n    tbarrier()"), 6, 9,
         "tbarrier() must be reached by every tile of the group"),
    Case("tile-value-in-register-array",
         kern("r = tregs(i32[2], 0)\nr[0] = tile_linear_id()\nif r[0] < 3:\n    tbarrier()"), 6, 9,
         "tbarrier() must be reached by every tile of the group"),
    Case("warp-op-needs-whole-warps",
         kern("out[0] = warp_sum(1.0)", "@kernel tile[(48,)]\ndef k(out: mut f32[n]):\n"), 3, 14,
         "warp_sum() needs whole warps: the group has 48 tiles"),
    # ---- warp votes and scans, the group scan, atomic_inc/atomic_dec (spec section 7, version 2)
    Case("warp-any-two-args", kern("out[0] = f32(warp_any(m > 0, m))"), 3, 18, "warp_any() takes 1 argument, got 2"),
    Case("warp-all-no-args", kern("out[0] = f32(warp_all())"), 3, 18, "warp_all() takes 1 argument, got 0"),
    Case("warp-ballot-of-tensor", kern("out[0] = f32(warp_ballot(x))"), 3, 30,
         "predicate of warp_ballot() must be a scalar value, not tensor f32"),
    Case("warp-cumsum-of-bool", kern("out[0] = warp_cumsum(m > 0)"), 3, 28,
         "warp_cumsum() needs a numeric argument, not bool"),
    Case("shfl-up-float-delta", kern("out[0] = shfl_up(x[0], 1.5)"), 3, 28,
         "the delta argument of shfl_up() must be an integer, not f32"),
    Case("atomic-inc-i32", "@kernel tile[(128,)]\ndef k(c: mut i32[n]):\n    atomic_inc(c[0], 5)\n", 3, 16,
         "atomic_inc() needs a u32 element, not i32"),
    Case("atomic-dec-f32-shared", kern("s = tshared.alloc(f32[4])\natomic_dec(s[0], 5)"), 4, 16,
         "atomic_dec() needs a u32 element, not f32"),
    Case("atomic-inc-no-bound", "@kernel tile[(128,)]\ndef k(c: mut u32[n]):\n    atomic_inc(c[0])\n", 3, 5,
         "atomic_inc() takes 2 to 3 arguments, got 1"),
    Case("atomic-inc-float-bound", "@kernel tile[(128,)]\ndef k(c: mut u32[n]):\n    atomic_inc(c[0], 2.5)\n", 3, 22,
         "cannot convert f32 to u32 implicitly"),
    Case("atomic-inc-not-mut", "@kernel tile[(128,)]\ndef k(c: u32[n]):\n    atomic_inc(c[0], 2)\n", 3, 16,
         "'c' is not mut; declare it 'mut' to update it atomically"),
    Case("atomic-dec-bad-scope", "@kernel tile[(128,)]\ndef k(c: mut u32[n]):\n    atomic_dec(c[0], 2, scope=\"warp\")\n",
         3, 31, 'scope of atomic_dec() must be one of "group", "device", "mesh"'),
    Case("group-cumsum-under-tile-if", kern("if tile_linear_id() < 3:\n    out[0] = group_cumsum(1.0)"), 4, 18,
         "group_cumsum() must be reached by every tile of the group"),
    Case("barrier-under-group-cumsum", kern("if group_cumsum(1) > 3:\n    tbarrier()"), 4, 9,
         "tbarrier() must be reached by every tile of the group"),
    Case("warp-ballot-under-lane-if", kern("if lane_id() < 3:\n    out[0] = f32(warp_ballot(1))"), 4, 22,
         "warp_ballot() must be reached by all 32 lanes of the warp"),
    Case("warp-any-needs-whole-warps",
         kern("out[0] = f32(warp_any(1))", "@kernel tile[(48,)]\ndef k(out: mut f32[n]):\n"), 3, 18,
         "warp_any() needs whole warps: the group has 48 tiles"),
    Case("shfl-up-needs-whole-warps",
         kern("out[0] = shfl_up(1.0, 1)", "@kernel tile[(48,)]\ndef k(out: mut f32[n]):\n"), 3, 14,
         "shfl_up() needs whole warps: the group has 48 tiles"),
    Case("group-cumsum-in-device-function",
         "@device\ndef d(v: f32) -> f32:\n    return group_cumsum(v)\n\n@kernel tile[(32,)]\ndef k(out: mut f32[n]):\n"
         "    out[0] = d(1.0)\n", 3, 12, "group_cumsum() is only allowed in a kernel body"),
    # ---- not supported yet
    # ---- @autotune
    Case("autotune-unknown-name", "@autotune(BX=[64, 128])\n@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n], BM: const i32 = 64, s: f32 = 1.0):\n    pass\n", 1, 11, "'BX' is not a parameter of 'k'"),
    Case("autotune-not-const", "@autotune(s=[1.0, 2.0])\n@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n], BM: const i32 = 64, s: f32 = 1.0):\n    pass\n", 1, 11, "'s' is a parameter passed at launch, not a const"),
    Case("autotune-empty-list", "@autotune(BM=[])\n@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n], BM: const i32 = 64, s: f32 = 1.0):\n    pass\n", 1, 14, "the list of candidates of 'BM' is empty"),
    Case("autotune-not-a-list", "@autotune(BM=64)\n@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n], BM: const i32 = 64, s: f32 = 1.0):\n    pass\n", 1, 14, "the candidates of 'BM' are a list"),
    Case("autotune-non-constant", "@autotune(BM=[64, n])\n@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n], BM: const i32 = 64, s: f32 = 1.0):\n    pass\n", 1, 19, "a candidate of 'BM' must be a compile-time constant"),
    Case("autotune-wrong-type", "@autotune(BM=[64, 1.5])\n@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n], BM: const i32 = 64, s: f32 = 1.0):\n    pass\n", 1, 19, "a candidate of 'BM' must be i32, not a float 1.5"),
    Case("autotune-out-of-range", "@autotune(BM=[64, 1 << 40])\n@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n], BM: const i32 = 64, s: f32 = 1.0):\n    pass\n", 1, 21, "a candidate of 'BM': 1099511627776 does not fit in i32"),
    Case("autotune-key-not-shape", "@autotune(BM=[64], key=[BM])\n@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n], BM: const i32 = 64, s: f32 = 1.0):\n    pass\n", 1, 25, "'BM' in key= is not a shape symbol"),
    Case("autotune-duplicate-name", "@autotune(BM=[64], BM=[128])\n@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n], BM: const i32 = 64, s: f32 = 1.0):\n    pass\n", 1, 20, "'BM' is given twice in @autotune"),
    Case("autotune-duplicate-value", "@autotune(BM=[64, 64])\n@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n], BM: const i32 = 64, s: f32 = 1.0):\n    pass\n", 1, 19, "64 is listed twice among the candidates"),
    Case("autotune-positional", "@autotune([64])\n@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n], BM: const i32 = 64, s: f32 = 1.0):\n    pass\n", 1, 11, "@autotune takes keyword arguments only"),
    Case("autotune-on-device", "@autotune(BM=[64])\n@device\ndef d(BM: i32) -> i32:\n    return BM\n", 1, 1,
         "@autotune is for kernels"),
    # ---- tensor-core tile operations (spec section 12)
    Case("tmma-mixed-types", kern(TC_ARRAYS.replace("f16[32, 64]", "bf16[32, 64]") + "tmma(acc, As, Bs)", TC_HEAD),
         6, 5, "tmma() operands have different element types: f16 and bf16"),
    Case("tmma-shapes", kern(TC_ARRAYS.replace("f16[32, 64]", "f16[16, 64]") + "tmma(acc, As, Bs)", TC_HEAD),
         6, 5, ("tmma() shapes do not match", "[64, 32] and [16, 64]")),
    Case("tmma-k-not-a-multiple", kern(TC_ARRAYS.replace("32]", "24]").replace("[32,", "[24,") + "tmma(acc, As, Bs)",
                                       TC_HEAD), 6, 5, "tmma() on f16 needs K a multiple of 16, got 24"),
    Case("tmma-operand-not-shared", kern(TC_ARRAYS + "tmma(acc, A, Bs)", TC_HEAD), 6, 15,
         "the first operand of tmma() must be a 2-D shared array"),
    Case("tmma-accumulator-type", kern(TC_ARRAYS.replace("f32[64, 64], 0.0", "i32[64, 64], 0") + "tmma(acc, As, Bs)",
                                       TC_HEAD), 6, 10, "f16 inputs accumulate in f32, but 'acc' is a fragment of i32"),
    Case("tmma-not-a-fragment", kern(TC_ARRAYS + "tmma(As, As, Bs)", TC_HEAD), 6, 10,
         "the accumulator of tmma() must be a fragment"),
    Case("tmma-tile-dependent", kern(TC_ARRAYS + "if tile_linear_id() < 64:\n    tmma(acc, As, Bs)", TC_HEAD), 7, 9,
         "tmma() must be reached by every tile of the group", note="the tile-dependent condition"),
    Case("tstore-tile-dependent", kern(TC_ARRAYS + "if lane_id() == 0:\n    tstore(C[0:64, 0:64], acc)", TC_HEAD), 7, 9,
         "tstore() must be reached by every tile of the group"),
    Case("tfrag-not-top-level", kern("if m > 0:\n    acc = tfrag(f32[64, 64], 0.0)", TC_HEAD), 4, 15,
         "tfrag() is only allowed at the top level of a kernel body"),
    Case("tfrag-no-division", kern("acc = tfrag(f32[40, 64], 0.0)", TC_HEAD), 3, 17,
         ("no division of a 40 x 64 fragment over 4 warps", "M of 16 and N of 32 (1x4 warps)")),
    Case("tfrag-group-not-whole-warps", kern("acc = tfrag(f32[64, 64], 0.0)", TC_HEAD.replace("128", "48")), 3, 11,
         "the group has 48 tiles, which is not a multiple of 32"),
    Case("tfrag-element-type", kern("acc = tfrag(f64[64, 64], 0.0)", TC_HEAD), 3, 17,
         "a fragment accumulates in f32 (for f16, bf16 or f32 inputs) or i32"),
    Case("tfrag-below-sm80", kern(TC_ARRAYS + "tmma(acc, As, Bs)", TC_HEAD), 5, 11,
         "tensor-core tile operations (tfrag, tmma) need sm_80 or newer; the target is sm_75",
         args=("--arch", "sm_75")),
    Case("tmma-pad-misaligns-ldmatrix", kern(TC_ARRAYS.replace("f16[64, 32])", "f16[64, 32], pad=1)") +
                                             "tmma(acc, As, Bs)", TC_HEAD), 3, 10,
         ("tmma() reads 'As' with ldmatrix, which needs rows of a multiple of 16 bytes", "pad=8")),
    Case("tload-extents", kern(TC_ARRAYS + "tload(acc, C[0:32, 0:64])", TC_HEAD), 6, 16,
         "tload() needs a view of the fragment's extents [64, 64], got [32, 64]"),
    Case("tstore-not-mut", kern("acc = tfrag(f32[64, 64], 0.0)\ntstore(A[0:64, 0:64], acc)", TC_HEAD), 4, 12,
         "'A' is not mut"),
    Case("fragment-indexed", kern("acc = tfrag(f32[64, 64], 0.0)\nacc[0, 1] = 1.0", TC_HEAD), 4, 5,
         "the elements of the fragment 'acc' are spread over the group's warps and cannot be indexed"),
    Case("fragment-as-a-scalar", kern("acc = tfrag(f32[64, 64], 0.0)\nv = acc + 1.0", TC_HEAD), 4, 9,
         "'acc' is a fragment spread over the group's warps: use it whole"),
    Case("fragment-shapes-differ", kern("acc = tfrag(f32[64, 64], 0.0)\nb = tfrag(f32[32, 64], 0.0)\nacc[:] = b",
                                        TC_HEAD), 5, 14, "'b' is a [32, 64] fragment but the statement assigns a [64, 64] one"),
    Case("fragment-statement-per-tile-value",
         kern("acc = tfrag(f32[64, 64], 0.0)\nacc[:] = acc + x[tile_linear_id() % 64]", TC_HEAD.replace(
             "m: i32", "x: f32[N], m: i32")), 4, 22,
         ("tile_linear_id() differs between tiles", "use row_index() and col_index()")),
    Case("fragment-statement-per-tile-local",
         kern("acc = tfrag(f32[64, 64], 0.0)\nw = warp_id() * 2\nacc[:] = acc * 2.0 + w", TC_HEAD), 5, 26,
         "'w' differs between tiles, but a whole-fragment statement computes each element"),
    Case("fragment-statement-under-tile-condition",
         kern("acc = tfrag(f32[64, 64], 0.0)\nif lane_id() < 8:\n    acc[:] = acc + 1.0", TC_HEAD), 5, 9,
         "a whole-fragment statement must be reached by every tile of the group", note="condition or loop is here"),
    Case("row-index-outside-a-fragment-statement", kern("r = row_index()", TC_HEAD), 3, 9,
         "row_index() is the coordinate of the element being computed in a whole-fragment statement"),
    Case("row-vector-rows", kern("v = tfrag(f32[24], 0.0)", TC_HEAD), 3, 15,
         "a row vector follows the rows of the 24-row fragments, in 16-row mma tiles: the row count must be a "
         "multiple of 16, not 24"),
    Case("row-vector-rows-whole", kern("v = tfrag(f32[32], 0.0)\nc = tfrag(f32[1, 64], 0.0)", TC_HEAD), 3, 15,
         "with 4 warps the row count must be a multiple of 64, not 32"),
    Case("whole-rows-division", kern("P = tfrag(f16[64, 64])\nacc = tfrag(f32[32, 64], 0.0)", TC_HEAD), 4, 17,
         "each warp owns whole rows of every fragment: over 4 warps a 32 x 64 fragment needs M a multiple of 64"),
    Case("spread-rows-columns", kern("v = tfrag(f32[16], 0.0)\nacc = tfrag(f32[16, 16], 0.0)", TC_HEAD), 4, 17,
         "over 4 warps the 16 rows of a 16 x 16 fragment take 1 warp, and its columns the other 4: N must be a "
         "multiple of 32, not 16"),
    Case("row-vector-not-broadcast", kern(TC_ARRAYS + "v = tfrag(f32[64], 0.0)\nacc[:] = acc - v", TC_HEAD), 7, 20,
         "'v' is a row vector: broadcast it along the columns with v[:, None]"),
    Case("reduction-not-broadcast", kern(TC_ARRAYS + "acc[:] = acc - tmax(acc, axis=1)", TC_HEAD), 6, 20,
         "tmax(F, axis=1) is a row vector: use it in a row-vector statement"),
    Case("reduction-axis-0", kern(TC_ARRAYS + "acc[:] = acc - tsum(acc, axis=0)", TC_HEAD), 6, 20,
         "tsum(F, axis=0) is a column vector: use it in a column-vector statement"),
    Case("broadcast-view-extent", kern(TC_ARRAYS + "acc[:] = acc + C[0, 0:32][None, :]", TC_HEAD), 6, 20,
         "this view has the extent 32, but the fragment has 64 columns"),
    Case("col-index-in-a-row-vector", kern("v = tfrag(f32[64], 0.0)\nv[:] = v + col_index()", TC_HEAD), 4, 16,
         "col_index() has no value in a statement that assigns a row vector"),
    Case("matrix-in-a-row-vector", kern(TC_ARRAYS + "v = tfrag(f32[64], 0.0)\nv[:] = acc", TC_HEAD), 7, 12,
         "'acc' is a [64, 64] fragment, but here one value per row is computed"),
    Case("fragment-element-type", kern("q = tfrag(i16[64, 64])", TC_HEAD), 3, 15,
         "a fragment accumulates in f32 (for f16, bf16 or f32 inputs) or i32 (for i8 or u8 inputs), or is an f16, "
         "bf16, i8 or u8 operand, not i16"),
    Case("operand-fragment-8-bit-row-vector", kern("q = tfrag(i8[64])", TC_HEAD), 3, 15,
         "an operand fragment of i8 has two dimensions (rows and K)"),
    Case("operand-fragment-as-b-of-another-k", kern(TC_ARRAYS + "q = tfrag(f16[64, 64])\ntmma(acc, As, q)", TC_HEAD),
         7, 5, "tmma() shapes do not match: the accumulator is [64, 64], so the first operand must be [64, K] and the "
         "second [K, 64]; got [64, 32] and [64, 64]"),
    Case("i32-operand-as-b", kern(TC_ARRAYS + "f = tfrag(i32[32, 64], 0)\ntmma(acc, As, f)", TC_HEAD), 7, 19,
         "the second operand of tmma() from registers is an operand fragment (f16, bf16, i8, u8, or f32 for TF32); "
         "'f' is a fragment of i32"),
    Case("row-vector-as-b", kern(TC_ARRAYS + "v = tfrag(f32[64], 0.0)\ntmma(acc, As, v)", TC_HEAD), 7, 19,
         "the second operand of tmma() is a 2-D fragment; 'v' is a vector"),
    Case("i32-operand-from-registers", kern(TC_ARRAYS + "f = tfrag(i32[64, 32], 0)\ntmma(acc, f, Bs)", TC_HEAD), 7, 15,
         "the first operand of tmma() from registers is an operand fragment (f16, bf16, i8, u8, or f32 for TF32); "
         "'f' is a fragment of i32"),
    Case("operand-from-registers-is-the-accumulator", kern(TC_ARRAYS + "tmma(acc, acc, Bs)", TC_HEAD), 6, 15,
         "the first operand of tmma() is its accumulator 'acc'; copy it to another fragment first"),
    Case("tf32-operand-from-registers-with-f16-b", kern(TC_ARRAYS + "f = tfrag(f32[64, 32])\ntmma(acc, f, Bs)",
                                                        TC_HEAD), 7, 5,
         "tmma() operands have different element types: f32 and f16"),
    Case("mixed-signedness-is-8-bit-only", kern("Bs = tshared.alloc(u8[32, 64])\nacc = tfrag(f32[64, 64], 0.0)\n"
                                                "f = tfrag(f16[64, 32])\ntmma(acc, f, Bs)", TC_HEAD), 6, 5,
         "tmma() operands have different element types: f16 and u8"),
    Case("operand-fragment-as-accumulator", kern(TC_ARRAYS + "p = tfrag(f16[64, 64])\ntmma(p, As, Bs)", TC_HEAD),
         7, 10, "the accumulator of tmma() is a 2-D fragment of f32 or i32"),
    # ---- asynchronous copies and tpipeline
    Case("tcopy-async-to-global",
         kern("s = tshared.alloc(f32[128])\ntcopy_async(out[0:128], s)"), 4, 5,
         "tcopy_async() copies a view of a global tensor into shared memory"),
    Case("twait-not-constant", kern("twait(m)"), 3, 11, "the n of twait() (groups left pending)"),
    Case("twait-negative", kern("twait(-1)"), 3, 11, "must be between 0 and 255"),
    Case("tcommit-arguments", kern("tcommit(1)"), 3, 5, "tcommit() takes 0 arguments, got 1"),
    Case("tpipeline-stages-not-constant",
         kern("for k0 in tpipeline(0, n, 128, stages=m):\n    pass"), 3, 43, "the stages of tpipeline()"),
    Case("tpipeline-stages-zero",
         kern("for k0 in tpipeline(0, n, 128, stages=0):\n    pass"), 3, 43, "must be between 1 and 8"),
    Case("tpipeline-unknown-keyword",
         kern("for k0 in tpipeline(0, n, 128, depth=2):\n    pass"), 3, 36, "unexpected keyword argument 'depth'"),
    Case("tpipeline-without-copies",
         kern("for k0 in tpipeline(0, n, 128, stages=2):\n    out[k0] = 1.0"), 3, 5,
         "a tpipeline loop starts with the tcopy_async statements it pipelines"),
    # (v3: a tbarrier() after the leading copies is allowed; a callee that commits is not)
    Case("tpipeline-commit-in-callee", "@device\ndef flush():\n    tcommit()\n\n" + kern("s = tshared.alloc(f32[128])\nfor k0 in tpipeline(0, n, 128, stages=2):\n    tcopy_async(s, x[k0:k0 + 128])\n    tbarrier()\n    flush()"), 11, 9,
         ("flush() commits or waits for asynchronous copies", "inside a tpipeline loop (line 8)", "places its own")),
    Case("tpipeline-commit-in-body", kern("s = tshared.alloc(f32[128])\nfor k0 in tpipeline(0, n, 128, stages=2):\n    tcopy_async(s, x[k0:k0 + 128])\n    tcommit()"), 6, 9, "tcommit() inside a tpipeline loop"),
    Case("tpipeline-wait-in-body", kern("s = tshared.alloc(f32[128])\nfor k0 in tpipeline(0, n, 128, stages=2):\n    tcopy_async(s, x[k0:k0 + 128])\n    twait(0)"), 6, 9, "twait() inside a tpipeline loop"),
    Case("tpipeline-late-async-copy", kern("s = tshared.alloc(f32[128])\nfor k0 in tpipeline(0, n, 128, stages=2):\n    tcopy_async(s, x[k0:k0 + 128])\n    out[0] = s[0]\n    tcopy_async(s, x[0:128])"), 7, 9,
         "a tcopy_async() after the leading ones inside a tpipeline loop"),
    Case("tpipeline-break", kern("s = tshared.alloc(f32[128])\nfor k0 in tpipeline(0, n, 128, stages=2):\n    tcopy_async(s, x[k0:k0 + 128])\n    if m > 3:\n        break"), 7, 13, "break inside a tpipeline loop"),
    Case("tpipeline-return", kern("s = tshared.alloc(f32[128])\nfor k0 in tpipeline(0, n, 128, stages=2):\n    tcopy_async(s, x[k0:k0 + 128])\n    return"), 6, 9, "return inside a tpipeline loop"),
    Case("tpipeline-store-to-buffer", kern("s = tshared.alloc(f32[128])\nfor k0 in tpipeline(0, n, 128, stages=2):\n    tcopy_async(s, x[k0:k0 + 128])\n    s[tile_linear_id()] = 0.0"), 6, 9,
         "'s' is filled by the pipelined copies of the tpipeline at line 4 and cannot be stored to"),
    Case("tpipeline-buffer-used-after", kern("s = tshared.alloc(f32[128])\nfor k0 in tpipeline(0, n, 128, stages=2):\n    tcopy_async(s, x[k0:k0 + 128])\nout[0] = s[0]"), 6, 5,
         "'s' is multi-buffered by the tpipeline loop at line 4 and may be used only inside it"),
    Case("tpipeline-view-uses-changed-local",
         kern("s = tshared.alloc(f32[128])\noff = 0\nfor k0 in tpipeline(0, n, 128, stages=2):\n"
              "    tcopy_async(s, x[off:off + 128])\n    off += 128"), 6, 9,
         "the views of a pipelined copy may not use 'off', which the loop body changes"),
    Case("tpipeline-nested",
         kern("s = tshared.alloc(f32[128])\nfor k0 in tpipeline(0, n, 128, stages=2):\n    tcopy_async(s, x[k0:k0 + 128])\n    for k1 in tpipeline(0, n, 128, stages=2):\n        tcopy_async(s, x[k1:k1 + 128])"), 6, 9,
         "a nested tpipeline loop inside a tpipeline loop"),
    Case("tpipeline-over-shared-limit",
         kern("s = tshared.alloc(f32[16384])\nfor k0 in tpipeline(0, n, 128, stages=4):\n"
              "    tcopy_async(s, x[k0:k0 + 16384])"), 3, 9, "over the 232448 bytes a group can have on sm_90",
         note="'s' is kept 4 times (tpipeline stages=4, line 4)"),
    # ---- map kernels (spec section 8)
    Case("map-vectorize-not-power-of-two", kern("out[:] = x", MAP_HEAD.format(w=3)), 1, 32,
         "the vector width must be a power of two (1, 2, 4, 8 or 16), not 3"),
    Case("map-vectorize-too-wide", kern("out[:] = x", MAP_HEAD.format(w=32)), 1, 32,
         "the vector width must be between 1 and 16, not 32"),
    Case("map-vectorize-not-constant", kern("out[:] = x", MAP_HEAD.format(w="m")), 1, 32,
         ("the vector width must be a compile-time constant", "'m' is a parameter passed at launch")),
    Case("map-vectorize-without-whole-tensor-statement", kern("out[0] = x[0]", MAP_HEAD.format(w=4)), 1, 22,
         ("vectorize(...) is for map kernels", "this kernel has no whole-tensor statement")),
    Case("map-assigned-tensors-of-different-shapes",
         kern("out[:] = x\nout2[:] = x", "@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n], out2: mut f32[m]):\n"),
         4, 5, ("'out2' has shape [m] but the map's tensors have shape [n]",
                "every tensor a map kernel assigns has the same shape"), note="the shape of 'out'"),
    Case("map-tensors-of-different-ranks",
         kern("out[:] = x * y", "@kernel tile[(128,)]\ndef k(x: f32[n], y: f32[n, 4], out: mut f32[n]):\n"), 3, 18,
         ("'y' has shape [n, 4], which does not broadcast to the map's shape [n] (the shape of 'out')",
          "each dimension must be the same or 1"), note="the shape of 'out'"),
    Case("map-constant-dimensions-that-do-not-broadcast",
         kern("out[:] = x + b", "@kernel tile[(128,)]\ndef k(x: f32[m, 4], b: f32[3], out: mut f32[m, 4]):\n"), 3, 18,
         "'b' has shape [3], which does not broadcast to the map's shape [m, 4] (the shape of 'out')"),
    Case("map-read-before-the-target-does-not-broadcast",
         kern("h = b * 2.0\nout[:] = x + h", "@kernel tile[(128,)]\ndef k(x: f32[4, 8], b: f32[2, 8], out: mut f32[4, 8]):\n"),
         3, 9, "'b' has shape [2, 8], which does not broadcast to the map's shape [4, 8]"),
    Case("map-indexed-tensor", kern("out[:] = x[0]"), 3, 14,
         ("in a map kernel a tensor's name is its element", "it cannot be indexed (write x, not x[...])")),
    Case("map-tile-index", kern("out[:] = x + f32(tile_linear_id())"), 3, 22,
         "tile_linear_id() is not allowed in a map kernel: it computes every element the same way",
         note="this kernel is a map kernel because of this whole-tensor statement"),
    Case("map-lane-id-in-local", kern("t = f32(lane_id())\nout[:] = x + t"), 3, 13,
         "lane_id() is not allowed in a map kernel", note="this kernel is a map kernel because of this whole-tensor"),
    Case("map-if-statement", kern("out[:] = x\nif m > 0:\n    out[:] = 0.0"), 4, 5,
         ("an if statement is not allowed in a map kernel", "use `x if c else y` to choose per element")),
    Case("map-for-loop", kern("out[:] = x\nfor i in range(3):\n    pass"), 4, 5, "a for loop is not allowed in a map kernel"),
    Case("map-while-loop", kern("out[:] = x\nwhile m > 0:\n    pass"), 4, 5, "a while loop is not allowed in a map kernel"),
    Case("map-call-statement", kern('out[:] = x\ntprint("%d", m)'), 4, 5, "tprint() is not allowed in a map kernel"),
    Case("map-barrier", kern("out[:] = x\ntbarrier()"), 4, 5, "tbarrier() is not allowed in a map kernel"),
    Case("map-return", kern("out[:] = x\nreturn"), 4, 5, "return is not allowed in a map kernel"),
    Case("map-single-element-store-before", kern("out[0] = 1.0\nout[:] = x"), 3, 5,
         "a map kernel assigns whole tensors: write out[:] = ..., not single elements",
         note="this kernel is a map kernel because of this whole-tensor statement"),
    Case("map-single-element-store-after", kern("out[:] = x\nout[m] += 1.0"), 4, 5,
         "a map kernel assigns whole tensors: write out[:] = ..., not single elements"),
    Case("map-partial-slice-target", kern("out[0:4] = x"), 3, 5,
         ("a whole-tensor statement assigns every element: write out[:]", "no partial slices or indices")),
    Case("map-partial-slice-target-2d",
         kern("out[:, 0] = x", "@kernel tile[(128,)]\ndef k(x: f32[n, m], out: mut f32[n, m]):\n"), 3, 5,
         "a whole-tensor statement assigns every element: write out[:]"),
    Case("map-target-not-mut", kern("x[:] = out"), 3, 5,
         ("cannot store to 'x': it is not mut", "declare the parameter as 'x: mut f32[...]'")),
    Case("map-augmented-target-not-mut", kern("x[:] += 1.0"), 3, 5, "cannot store to 'x': it is not mut"),
    Case("map-scalar-parameter-target",
         kern("a[:] = 1.0", "@kernel tile[(128,)]\ndef k(x: f32[n], out: mut f32[n], a: f32):\n"), 3, 5,
         "a whole-tensor statement assigns a tensor parameter; 'a' is f32"),
    Case("map-local-target", kern("out[:] = x\nt = 1.0\nt[:] = 2.0"), 5, 5,
         "a whole-tensor statement assigns a tensor parameter; 't' is f32"),
    Case("map-table-target", "const T: f32[4] = [1.0, 2.0, 3.0, 4.0]\n" + kern("T[:] = x"), 4, 5,
         "a whole-tensor statement assigns a tensor parameter; 'T' is constant table f32[4]"),
    Case("map-warp-op", kern("out[:] = warp_sum(x)"), 3, 14,
         "warp_sum() is not allowed in a map kernel (only elementwise math, casts and device functions)",
         note="this kernel is a map kernel because of this whole-tensor statement"),
    Case("map-group-op-in-local", kern("s = group_max(x)\nout[:] = x - s"), 3, 9,
         "group_max() is not allowed in a map kernel"),
    Case("map-atomic", kern("out[:] = atomic_add(out, 1.0)"), 3, 14, "atomic_add() is not allowed in a map kernel"),
    Case("map-atomic-statement", kern("out[:] = x\natomic_add(out, 1.0)"), 4, 5,
         "atomic_add() is not allowed in a map kernel"),
    Case("map-calls-warp-device-function",
         "@device\ndef w(v: f32) -> f32:\n    return warp_sum(v)\n\n" + kern("out[:] = w(x)"), 7, 14,
         "w() uses cooperative operations, which a map kernel cannot call"),
    Case("map-shared-alloc", kern("out[:] = x\ns = tshared.alloc(f32[32])"), 4, 5,
         "a map kernel has no shared memory or register arrays", note="this kernel is a map kernel because"),
    Case("map-bare-shared-alloc",
         kern("out[:] = x\ns = tshared.alloc", "@kernel tile[(128,)] shared(1_KiB)\ndef k(x: f32[n], out: mut f32[n]):\n"),
         4, 5, "a map kernel has no shared memory or register arrays"),
    Case("map-tregs", kern("r = tregs(f32[4], 0.0)\nout[:] = x"), 3, 5, "a map kernel has no shared memory or register arrays"),
    Case("map-whole-tensor-statement-in-device-function", "@device\ndef d(a: f32):\n    a[:] = 1.0\n", 3, 5,
         "whole-tensor statements (Z[:] = ...) make up the top level of a map kernel's body; this one is in a "
         "device function"),
    Case("map-whole-tensor-statement-in-device-function-table",
         "const T: f32[2] = [1.0, 2.0]\n\n@device\ndef d(a: f32) -> f32:\n    T[:] = a\n    return a\n", 5, 5,
         "this one is in a device function"),
    Case("map-whole-tensor-statement-under-if", kern("if m > 0:\n    out[:] = x"), 4, 9,
         "whole-tensor statements (Z[:] = ...) make up the top level of a map kernel's body; this one is inside a block"),
    Case("map-calls-device-function-with-indices",
         "@device\ndef me() -> f32:\n    return f32(tile_linear_id())\n\n" + kern("out[:] = x + me()"), 7, 18,
         "me() uses tile or group indices, which a map kernel cannot call"),
    # ---- launch-sized shared memory
    Case("launch-sized-array-in-tcopy", kern("s = tshared.alloc(f32[m])\ntcopy(s, x[0:128])"), 4, 11,
         "tcopy() needs shared arrays of constant shape; 's' is sized at launch by 'm'"),
    Case("launch-sized-by-float-parameter",
         kern("s = tshared.alloc(f32[a])", "@kernel tile[(128,)]\ndef k(x: f32[n], a: f32):\n"), 3, 27,
         "a dimension of tshared.alloc() must be a compile-time constant"),
    Case("launch-sized-tregs", kern("r = tregs(f32[m], 0.0)"), 3, 19, "a dimension of tregs() must be a compile-time constant"),
    # ---- Python habits
    Case("python-float-cast", kern("a = float(m)"), 3, 9, "'float' is not a .tsr type; write f32(x) (or f64(x))"),
    Case("python-int-cast", kern("a = int(x[0])"), 3, 9, "'int' is not a .tsr type; write i32(x) (or i64(x))"),
    Case("python-shape-attribute", kern("a = x.shape[0]"), 3, 9,
         "'x' has no .shape: its dimensions are [n], which the body uses by name (write n for x.shape[0])"),
    Case("python-float-inf-single-quotes", kern("a = -float('inf')"), 3, 16,
         "write -inf for -float('inf'): .tsr has the float constants inf and nan"),
    Case("python-float-inf-double-quotes", kern('a = float("inf")'), 3, 9, 'write inf for float("inf")'),
    Case("python-single-quoted-string", kern("tprint('x')"), 3, 12, ".tsr strings use double quotes"),
    Case("builtin-name-as-local-reported-once", kern("max = 3.0\nout[0] = max + 1.0\nout[1] = max"), 3, 5,
         "'max' is a builtin name and cannot be redefined"),
    Case("rejected-allocation-reported-once", kern("s = tshared.alloc(f32[m * 2])\ns[0] = 1.0\nout[0] = s[0]"), 3, 27,
         "a dimension of tshared.alloc() must be a compile-time constant"),
    # ---- integers and bits, bitcast, inf and nan (spec section 5)
    Case("popc-no-argument", kern("y = popc()"), 3, 9, "popc() takes 1 argument, got 0"),
    Case("brev-two-arguments", kern("y = brev(m, m)"), 3, 9, "brev() takes 1 argument, got 2"),
    Case("popc-of-float", kern("y = popc(x[0])"), 3, 14, "popc() needs an integer argument, not f32"),
    Case("ffs-of-bool", kern("y = ffs(m > 0)"), 3, 15, "ffs() needs an integer argument, not bool"),
    Case("clz-of-i16", kern("y = clz(i16(m))"), 3, 13,
         ("clz() takes 32- or 64-bit integers, not i16", "clz(i32(x))")),
    Case("popc-of-u8", kern("y = popc(u8(m))"), 3, 14, ("popc() takes 32- or 64-bit integers, not u8", "u32(x)")),
    Case("mulhi-one-argument", kern("y = mulhi(m)"), 3, 9, "mulhi() takes 2 arguments, got 1"),
    Case("mulhi-of-float", kern("y = mulhi(m, x[0])"), 3, 18, "mulhi() needs an integer argument, not f32"),
    Case("mulhi-of-float-literal", kern("y = mulhi(m, 2.5)"), 3, 18, "mulhi() needs an integer argument, not f32"),
    Case("mulhi-of-i16", kern("y = mulhi(i16(m), i16(m))"), 3, 9,
         ("mulhi() takes 32- or 64-bit integers, not i16", "mulhi(i32(a), i32(b))")),
    Case("bitcast-one-argument", kern("y = bitcast(x[0])"), 3, 9, "bitcast() takes 2 arguments, got 1"),
    Case("bitcast-width-mismatch", kern("y = bitcast(x[0], u16)"), 3, 9,
         ("bitcast() keeps the width", "f32 is 32 bits but u16 is 16 bits")),
    Case("bitcast-f64-to-f32", kern("y = bitcast(f64(x[0]), f32)"), 3, 9, "f64 is 64 bits but f32 is 32 bits"),
    Case("bitcast-to-a-value", kern("y = bitcast(x[0], m)"), 3, 23,
         "the second argument of bitcast() must be a scalar type name"),
    Case("bitcast-to-a-string", kern('y = bitcast(x[0], "u32")'), 3, 23,
         "the second argument of bitcast() must be a scalar type name"),
    Case("bitcast-to-bool", kern("y = bitcast(i8(m), bool)"), 3, 24, "bitcast() cannot give bool"),
    Case("bitcast-of-bool", kern("y = bitcast(m > 0, u8)"), 3, 19, "bitcast() needs a numeric argument, not bool"),
    Case("bitcast-of-tensor", kern("y = bitcast(x, u32)"), 3, 17, "argument of bitcast() must be a scalar value"),
    Case("inf-called", kern("y = inf()"), 3, 9, "'inf' is a value, not a function; write inf without parentheses"),
    Case("inf-assigned", kern("inf = 1.0"), 3, 5, "'inf' is a builtin name and cannot be redefined"),
    Case("nan-as-parameter", "@kernel tile[(128,)]\ndef k(nan: f32):\n    pass\n", 2, 7,
         "parameter 'nan' hides the builtin name 'nan'"),
    Case("inf-in-bitwise-and", kern("y = m & inf"), 3, 11, "'&' needs integer operands, not f32"),
    Case("inf-to-int-local", kern("z: i32 = inf"), 3, 5, "cannot convert f32 to i32 implicitly"),
    Case("inf-as-index", kern("out[inf] = 1.0"), 3, 9, "index must be an integer, not f32"),
    Case("inf-as-range-bound", kern("for i in range(-inf):\n    pass"), 3, 20, "range() needs integer arguments"),
    Case("const-table-of-nan", "const T: i32[2] = [1, nan]\n", 1, 23, "table 'T' of i32 cannot hold the float nan"),
    # ---- tprint / tassert strings
    Case("tprint-percent-s", kern('tprint("name %s\\n", 1)'), 3, 12, "unsupported conversion '%s'"),
    Case("tprint-length-modifier", kern('tprint("%lld\\n", m)'), 3, 12, "drop the length modifier in '%lld'"),
    Case("tprint-length-modifier-empty-precision", kern('tprint("%.ld", m)'), 3, 12,
         "drop the length modifier in '%.ld'"),
    Case("tprint-stray-percent", kern('tprint("50%! %d", m)'), 3, 12, "tprint format has a stray '%'"),
    Case("tprint-too-few-arguments", kern('tprint("%d %d", m)'), 3, 12, "more conversions than arguments"),
    Case("tprint-wrong-kind", kern('tprint("%d", x[0])'), 3, 18, "'%d' needs an integer argument, got f32"),
    Case("tprint-char-of-i64", kern('tprint("%c", i64(m))'), 3, 18, "'%c' needs an integer of at most 32 bits"),
    Case("unknown-escape", kern('tprint("a\\q %d", 1)'), 3, 14, "unknown escape sequence '\\q'"),
    Case("nul-escape", kern('tprint("a\\0b")'), 3, 14, "unknown escape sequence '\\0'"),
    # ---- -D values
    Case("define-unknown-name", kern("pass"), 1, 1, "-D NOPE: no module constant or const parameter is named 'NOPE'",
         args=("-D", "NOPE=3")),
    Case("define-float-for-int-param",
         kern("out[0] = f32(BN)", "@kernel tile[(32,)]\ndef k(out: mut f32[n], BN: const i32 = 4):\n"), 2, 24,
         "-D BN=1.5 does not match the int const parameter 'BN'", args=("-D", "BN=1.5")),
    Case("define-out-of-range",
         kern("out[0] = f32(BN)", "@kernel tile[(32,)]\ndef k(out: mut f32[n], BN: const i32 = 4):\n"), 2, 24,
         "const parameter 'BN': 3000000000 does not fit in i32", args=("-D", "BN=3000000000")),
    Case("define-float-for-int-constant", "const BM = 64\n", 1, 1, "-D BM=1.5 does not match the int constant 'BM'",
         args=("-D", "BM=1.5")),
    # ---- bytes (through the command line these were internal compiler errors, exit 70)
    Case("invalid-utf8-line-start", b"const A = 1\n\xff\xfe = 2\n", 2, 1, "source is not valid UTF-8"),
    Case("invalid-utf8-mid-line", b"const A = 1 # caf\xe9\n", 1, 18, "source is not valid UTF-8"),
    Case("truncated-utf8", b"const A = 1\n# \xe6\x97", 2, 3, "source is not valid UTF-8"),
    Case("nul-byte", b"const A = 1\nconst B\x00 = 2\n", 2, 8, "NUL character in source"),
    # ---- fuzz regressions (each crashed the compiler with an internal error)
    Case("fuzz-call-of-device-function-with-unknown-parameter-type",
         "@device\ndef d(a: f1e39) -> f32:\n    return a\n\n" + kern("out[0] = d(1.0)"), 2, 10, "unknown type 'f1e39'"),
    Case("fuzz-call-of-device-function-with-unknown-return-type",
         "@device\ndef d() -> i0:\n    return 1\n\n" + kern("out[0] = f32(d())"), 2, 12, "unknown return type 'i0'"),
    Case("fuzz-checker-helper-called-as-builtin", kern("atomic(out[0], 1.0)"), 3, 5, "undefined name 'atomic'"),
    Case("fuzz-checker-helper-called-as-builtin-2", kern("y = index()"), 3, 9, "undefined name 'index'"),
    Case("fuzz-positional-argument-after-keyword", kern('atomic_add(scope="group", out[0], 1.0)'), 3, 31,
         "positional argument follows keyword argument"),
    # found by hand, not by the fuzzer: the first was an internal compiler error (RecursionError while
    # building the tree), the second an unlocated "1:1" error that carried no diagnostic
    Case("deeply-nested-blocks",
         HEAD + "".join("    " * (i + 1) + "if True:\n" for i in range(300)) + "    " * 301 + "pass\n", 303, 1205,
         "program is nested too deeply"),
    Case("deeply-nested-operators", kern("a = " + "-" * 5000 + "1"), 3, 5, "program is nested too deeply"),
    # ---- literals and constant folding beyond Python's int/float conversions (each was an internal
    # compiler error, exit 70, or an infinity written into the C text)
    Case("int-literal-over-4300-digits", kern("out[0] = f32(" + "9" * 5000 + ")"), 3, 18,
         "integer literal is too long: 5000 digits (the limit is 40)"),
    Case("hex-literal-over-4300-digits", "const A = 0x" + "f" * 5000 + "\n", 1, 11, "integer literal is too long"),
    Case("size-literal-over-4300-digits", "const A = " + "9" * 5000 + "_KiB\n", 1, 11, "integer literal is too long"),
    Case("decimal-literal-with-leading-zero", "const A = 010\n", 1, 11,
         "leading zeros in a decimal integer literal are not allowed: write 10, or 0o10 for C's octal 010"),
    Case("decimal-literal-with-leading-zero-not-octal", "const A = 0_9\n", 1, 11,
         "leading zeros in a decimal integer literal are not allowed: write 9"),
    Case("binary-literal-with-a-2", "const A = 0b102\n", 1, 15, "unexpected"),
    Case("binary-literal-over-130-digits", "const A = 0b" + "1" * 131 + "\n", 1, 11,
         "integer literal is too long: 131 digits (the limit is 130)"),
    Case("repeated-squaring", "const A = 0x7FFF_FFFF_FFFF_FFFF\n" + "".join(
         f"const {b} = {a} * {a} * {a} * {a}\n" for a, b in zip("ABCDE", "BCDEF")), 2, 17,
         "constant expression overflows: its value needs more than 128 bits"),
    Case("shift-chain-overflows", "const A = 1 << 62\nconst B = A << 63 << 63\n", 2, 19, "constant expression overflows"),
    Case("float-floor-division-overflows", "const A = 1.0 // 1e-320\n", 1, 15,
         "constant expression overflows the float range"),
    Case("float-modulo-of-overflow", "const A = 1e300 * 1e300 % 2.0\n", 1, 17, "constant expression overflows the float range"),
    Case("float-product-overflows", "const A = 1e300 * 1e300\n", 1, 17, "constant expression overflows the float range"),
    Case("cast-of-float-overflow", "const A = i32(f64(1) * 1e300 * 1e300)\n", 1, 30, "constant expression overflows f64"),
    Case("float-literal-infinite", "const A = 1e400\n", 1, 11, "float literal is too large"),
    Case("table-of-huge-dimensions", "const A = 0x7FFF_FFFF_FFFF_FFFF\nconst T: i32[" + ", ".join(["A * A"] * 120)
         + "] = [1]\n", 2, 1, "table 'T' has more than 2**64 elements but 1 values are given"),
    # (`f64(1e300)` is an error of its own: a float literal alone is f32; 1e300 next to an f64 is f64)
    Case("tregs-dim-overflows", kern("a = tregs(f32[i32(f64(1) * 1e300 * 1e300)], 0.0)"), 3, 38,
         ("a dimension of tregs() must be a compile-time constant", "constant expression overflows")),
    # element-type parameters (transpile/checks/generics.py)
    Case("type-param-is-a-scalar-type", kern("pass", "@kernel tile[(128,)]\ndef k[f32](x: f32[n]):\n"), 2, 7,
         "type parameter 'f32' is a scalar type's name"),
    Case("type-param-is-a-builtin", kern("pass", "@kernel tile[(128,)]\ndef k[exp](x: exp[n]):\n"), 2, 7,
         "type parameter 'exp' clashes with the builtin name 'exp'"),
    Case("type-param-is-a-parameter", kern("pass", "@kernel tile[(128,)]\ndef k[T](T: f32[n]):\n"), 2, 7,
         "type parameter 'T' clashes with the parameter 'T' of 'k'", note="parameter here"),
    Case("type-param-is-a-module-name", "const T = 3\n" + kern("pass", "@kernel tile[(128,)]\ndef k[T](x: T[n]):\n"),
         3, 7, "type parameter 'T' clashes with the module constant 'T'", note="defined here"),
    Case("type-param-duplicate", kern("pass", "@kernel tile[(128,)]\ndef k[T, T](x: T[n]):\n"), 2, 10,
         "duplicate type parameter 'T'", ("-D", "T=f32")),
    Case("type-param-unknown-allowed-type", kern("pass", "@kernel tile[(128,)]\ndef k[T: (f16, f31)](x: T[n]):\n"),
         2, 16, "unknown type 'f31' in the types of 'T'"),
    Case("type-param-assigned", kern("T = 3", "@kernel tile[(128,)]\ndef k[T: (f32,)](x: T[n]):\n"), 3, 5,
         "'T' is a type parameter of 'k' and cannot be assigned"),
    Case("type-param-unbound-without-define", kern("pass", "@kernel tile[(128,)]\ndef k[T](x: T[n]):\n"), 2, 7,
         ("type parameter 'T' of kernel 'k' has no type", "pass -D T=f32")),
    Case("type-param-define-not-allowed", kern("pass", "@kernel tile[(128,)]\ndef k[T: (f16, f32)](x: T[n]):\n"),
         2, 7, "T = u8 is not one of the types allowed for 'T' of 'k' (f16, f32)", ("-D", "T=u8")),
    Case("type-param-define-not-a-type", kern("pass", "@kernel tile[(128,)]\ndef k[T](x: T[n]):\n"), 2, 7,
         "-D T=3: type parameter 'T' takes a scalar type", ("-D", "T=3")),
    Case("type-param-define-for-a-constant", "const BM = 3\n" + kern("pass"), 1, 1,
         "-D BM=f16: a type is given only to a type parameter", ("-D", "BM=f16")),
    Case("type-param-error-names-the-binding",
         kern("out[i32(m)] = x[0] / x[1]", "@kernel tile[(128,)]\ndef k[T: (f32, i32)](x: T[n], out: mut T[n], m: i32):\n"),
         3, 24, "'/' of two integers is not allowed", note="in 'k' with T = i32"),
    Case("type-param-device-unused", "@device\ndef d[T](a: f32) -> f32:\n    return a\n", 2, 7,
         "type parameter 'T' of device function 'd' is the type of no parameter"),
    Case("type-param-device-call-disagrees",
         "@device\ndef d[T](a: T, b: T) -> T:\n    return a + b\n\n" + kern("out[0] = d(x[0], m)"), 7, 22,
         "d(): type parameter 'T' is f32 from argument 'a' but i32 from argument 'b'"),
    Case("type-param-device-call-not-allowed",
         "@device\ndef d[T: (f16, f32)](a: T) -> T:\n    return a\n\n" + kern("out[0] = f32(d(m))"), 7, 18,
         "d(): T = i32 (from argument 'a') is not one of the types allowed for 'T' (f16, f32)"),
    Case("static-range-bound-overflows", kern("for i in static_range(i32(f64(1) * 1e300 * 1e300)):\n    pass"), 3, 46,
         ("a static_range bound must be a compile-time constant", "constant expression overflows")),
    # ---- device functions: array parameters, several results; tuple assignment
    Case("tuple-assign-wrong-arity", kern("a, b = 1, 2, 3"), 3, 5,
         'a tuple assignment to 2 targets needs 2 values, but 3 are given'),
    Case("tuple-assign-wrong-arity-call", DEV2 + kern("a, b, c = two(1.0)"), 7, 5,
         'a tuple assignment to 3 targets needs 3 values, but 2 are given'),
    Case("tuple-assign-from-one-value", kern("a, b = x[0]"), 3, 12,
         'needs 2 values, but this is one f32 value'),
    Case("several-values-to-one-target", kern("a = 1, 2"), 3, 9,
         '2 values assigned to one target'),
    Case("tuple-result-in-expression", DEV2 + kern("out[0] = two(1.0) + 1.0"), 7, 14,
         ('two() returns 2 values (f32, f32)', 'tuple assignment')),
    Case("tuple-result-assigned-to-one-name", DEV2 + kern("y = two(1.0)"), 7, 9,
         'two() returns 2 values'),
    Case("scalar-for-array-parameter", "@device\ndef first(v: f32[k]) -> f32:\n    return v[0]\n\n" + kern("out[0] = first(m)"), 7, 20,
         ("argument 'v' of first() is an array (f32[k])", 'not i32')),
    Case("array-for-scalar-parameter", "@device\ndef sq(a: f32) -> f32:\n    return a * a\n\n" + kern("out[0] = sq(x)"), 7, 17,
         "argument 'a' of sq() is a scalar f32, not an array"),
    Case("array-parameter-element-type", "@device\ndef fi(v: i32[k]) -> i32:\n    return v[0]\n\n" + kern("out[0] = f32(fi(x))"), 7, 21,
         "argument 'v' of fi() has element type i32, but 'x' has f32 elements"),
    Case("array-parameter-rank", "@device\ndef f2(v: f32[a, b]) -> f32:\n    return v[0, 0]\n\n" + kern("out[0] = f2(x)"), 7, 17,
         "argument 'v' of f2() has 2 dimensions (f32[a, b]), but 'x' has 1"),
    Case("array-parameter-constant-extent", "@device\ndef f4(v: mut f32[4]):\n    v[0] = 1.0\n\n" + kern("s = tshared.alloc(f32[8])\nf4(s)"), 8, 8,
         "dimension 0 of argument 'v' of f4() is 4, but 's' has 8"),
    Case("array-parameter-shape-symbol-disagrees", "@device\ndef pair(a: f32[k], b: f32[k]):\n    pass\n\n" + kern("s = tshared.alloc(f32[8])\nt = tshared.alloc(f32[4])\npair(s, t)"), 9, 13,
         "the shape symbol 'k' of pair() is 8 from an earlier argument, but dimension 0 of 't' is 4"),
    Case("array-parameter-register-array", "@device\ndef rd(v: f32[k]) -> f32:\n    return v[0]\n\n" + kern("r = tregs(f32[4], 0.0)\nout[0] = rd(r)"), 8, 17,
         'register array f32[4] cannot be passed'),
    Case("store-through-non-mut-array-parameter", "@device\ndef st(v: f32[k]):\n    v[0] = 1.0\n", 3, 5,
         "cannot store to 'v': it is not mut"),
    Case("copy-through-array-parameter", "@device\ndef stage(x: f32[k], s: mut f32[128], j: i32):\n"
         "    tcopy(s, x[j:j + 128])\n", 3, 11,
         "'s' is an array parameter of a device function, which may be global or shared memory, so tcopy() cannot"),
    Case("async-copy-through-array-parameter", "@device\ndef stage(x: f32[k], s: mut f32[128], j: i32):\n"
         "    tcopy_async(s[0:64], x[j:j + 64])\n", 3, 17, "so tcopy_async() cannot copy through it"),
    Case("non-mut-tensor-for-mut-parameter", "@device\ndef w(v: mut f32[k]):\n    v[0] = 1.0\n\n" + kern("w(x)"), 7, 7,
         "argument 'v' of w() is mut"),
    Case("tuple-return-wrong-count", "@device\ndef two(a: f32) -> (f32, f32):\n    return a\n", 3, 12,
         "'two' returns 2 values (f32, f32), but this return has 1"),
    Case("tuple-return-in-scalar-function", "@device\ndef one(a: f32) -> f32:\n    return a, a\n", 3, 12,
         "'one' returns one f32 value, but this return has 2 values"),
    Case("tile-index-through-tuple-assignment", kern("b, a = 0, tile_linear_id()\nif a < 5:\n    tbarrier()"), 5, 9,
         "tbarrier() must be reached by every tile of the group", note="tile-dependent condition"),
    Case("tile-index-through-several-results", DEV2.replace("f32", "i32").replace("2.0", "2") +
         kern("a, b = two(tile_linear_id())\nif b < 5:\n    tbarrier()"), 9, 9,
         "tbarrier() must be reached by every tile of the group"),
    Case("mut-scalar-device-parameter", "@device\ndef ms(a: mut f32):\n    pass\n", 2, 8,
         'a const or mut scalar parameter is an error'),
    # ---- names
    # a shape symbol named like a parameter: NVRTC and g++ rejected the C (two parameters of one name)
    Case("shape-symbol-is-its-tensor", "@kernel tile[(128,)]\ndef k(x: mut f32[x]):\n    pass\n", 2, 18,
         "the shape symbol 'x' has the name of its own tensor 'x'", note="the tensor"),
    Case("shape-symbol-is-its-array", "@device\ndef g(v: f32[4, v]) -> f32:\n    return v[0, 0]\n", 2, 17,
         "the shape symbol 'v' has the name of its own tensor 'v'", note="the tensor"),
    Case("parameter-is-a-shape-symbol", "@kernel tile[(128,)]\ndef k(x: mut f32[n], n: f32):\n    pass\n", 2, 22,
         "parameter 'n' has the name of the shape symbol 'n'", note="shape symbol here"),
    Case("parameter-is-an-earlier-tensor-shape-symbol", "@kernel tile[(128,)]\ndef k(y: f32[x], x: mut f32[x]):\n    pass\n",
         2, 18, "parameter 'x' has the name of the shape symbol 'x'", note="shape symbol here"),
    Case("type-param-is-a-shape-symbol", kern("pass", "@kernel tile[(128,)]\ndef k[T](x: T[T]):\n"), 2, 7,
         "type parameter 'T' clashes with the shape symbol 'T' of 'k'", ("-D", "T=f32"), note="shape symbol here"),
    # a loop variable's name errors point at the name, not at `for`
    Case("loop-variable-is-a-parameter", kern("for m in range(3):\n    pass"), 3, 9,
         "'m' is a parameter and cannot be a loop variable", note="parameter here"),
    Case("loop-variable-is-a-shared-array", kern("s = tshared.alloc(f32[4])\nfor s in range(3):\n    pass"), 4, 9,
         "'s' is already a shared array and cannot be a loop variable", note="defined here"),
    Case("loop-variable-is-a-builtin", kern("for inf in range(3):\n    pass"), 3, 9, "'inf' is a builtin name"),
]


def test_catalog_is_large_and_unique() -> None:
    assert len(CATALOG) >= 40
    assert len({c.id for c in CATALOG}) == len(CATALOG)


@pytest.mark.parametrize("case", CATALOG, ids=lambda c: c.id)
def test_catalog(case: Case, tmp_path, capsys) -> None:
    check_catalog_case(case, tmp_path, capsys)


# ---- programs that are not errors ----------------------------------------------------------------

VALID = {
    "barrier-under-group-uniform-if": kern("if group_id(0) == 0:\n    tbarrier()\nout[0] = 1.0"),
    "warp-sum-under-warp-uniform-if": kern("if warp_id() == 0:\n    out[0] = warp_sum(1.0)"),
    "ballot-under-warp-uniform-if": kern("if warp_id() == 0:\n    out[0] = f32(warp_ballot(x[lane_id()]))"),
    "group-cumsum-partial-warps": kern("out[tile_linear_id()] = group_cumsum(1.0)",
                                       "@kernel tile[(48,)]\ndef k(out: mut f32[n]):\n"),
    "barrier-in-uniform-loop-with-uniform-break":
        kern("for j in range(10):\n    if m > j:\n        break\n    tbarrier()"),
    "group-sum-after-tile-dependent-if": kern("v = 0.0\nif tile_linear_id() < 3:\n    v = 1.0\nout[0] = group_sum(v)"),
    "shared-over-48k-on-sm90": kern("a = tshared.alloc(f32[128, 128])\na[0, 0] = 1.0\ntbarrier()\nout[0] = a[1, 1]"),
    "empty-file": "",
    "only-comments": "# nothing here\n   # indented comment\n\n#last line without newline",
    "utf8-bom": "\ufeffconst A = 1\n" + kern("out[0] = f32(A)"),
    "crlf-line-endings": kern("if m > 0:\n    out[0] = 1.0").replace("\n", "\r\n"),
    "negative-int-min-literal": kern("out[0] = f32(-2147483648)"),
    # a tile that has returned takes no part in later barriers (docs/language.md 8.1)
    "barrier-after-tile-dependent-return": kern("if tile_linear_id() > 3:\n    return\ntbarrier()"),
    "warp-function-wrapper-under-warp-uniform-if":
        "@device\ndef wsum(v: f32) -> f32:\n    return warp_sum(v)\n\n@device\ndef wrap(v: f32) -> f32:\n"
        "    return wsum(v)\n\n" + kern("if warp_id() == 0:\n    out[0] = wrap(x[0]) + wsum(x[1])"),
    "warp-reduction-result-is-warp-uniform":
        kern("v = warp_sum(x[tile_linear_id()])\nif v > 0.0:\n    out[0] = warp_max(v)"),
    "synchronizing-function-with-uniform-argument":
        "@device\ndef sync_if(c: i32):\n    if c < 3:\n        tbarrier()\n\n" + kern("sync_if(group_id(0))"),
    "shift-by-31": kern("out[0] = f32(1 << 31)"),
}


@pytest.mark.parametrize("name", sorted(VALID))
def test_not_an_error(name: str, tmp_path, capsys) -> None:
    path = write_source(tmp_path, VALID[name])
    out = tmp_path / "case.cu"
    code = run([str(path), "-o", str(out), "--arch", "sm_90", "--check"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "no warnings" in err, err
    assert out.read_text().startswith("// Generated by tesserac")


# ---- several errors in one run ---------------------------------------------------------------------

MULTI = """\
@kernel tile[(128,)]
def k(x: f32[n], out: mut f32[n]):
    a = undefined1
    b = 1 / 2
    x[0] = 1.0
    c = 1 < 2 < 3

@kernel tile[(64,)]
def k2(y: f31[n]):
    pass

@device
def d(a: i32) -> i32:
    return a / 2
"""


def test_independent_errors_are_all_reported(tmp_path, capsys) -> None:
    path = write_source(tmp_path, MULTI)
    assert run([str(path), "-o", str(tmp_path / "m.cu")]) == 1
    err = capsys.readouterr().err
    heads = [ln for ln in err.splitlines() if re.match(rf"^{re.escape(str(path))}:\d+:\d+: error: ", ln)]
    locs = [ln[len(str(path)) + 1:].split(": error: ")[0] for ln in heads]
    assert locs == ["3:9", "4:11", "5:5", "6:11", "9:11", "14:14"], err
    assert "undefined name 'undefined1'" in heads[0]
    assert "unknown type 'f31'" in heads[4]


# ---- hostile identifiers and strings ---------------------------------------------------------------

HOSTILE_NAMES = """\
@kernel tile[(128,)]
def kk(out: mut f32[n], class: f32, __init: i32, tsr_x: f32[n], printf: i32, threadIdx: i32):
    int = class + 1.0
    float = tsr_x[__init]
    out[printf + threadIdx] = int + float
    main = 3
    NULL = main
    out[NULL] = 0.0
"""


def _kernel_text(cu: str) -> str:
    return cu[cu.index('extern "C" __global__'):]


def test_hostile_identifiers_are_renamed(tmp_path, capsys) -> None:
    path = write_source(tmp_path, HOSTILE_NAMES)
    out = tmp_path / "h.cu"
    assert run([str(path), "-o", str(out), "--check"]) == 0
    assert "no warnings" in capsys.readouterr().err
    body = _kernel_text(out.read_text())
    tokens = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", re.sub(r"//.*", "", body)))
    # `int` and `float` are C types there anyway; NVRTC compiling the result shows they were renamed.
    assert not tokens & {"class", "__init", "tsr_x", "printf", "main", "NULL"}
    assert not re.search(r"(?<![A-Za-z0-9_.])threadIdx(?![.A-Za-z0-9_])", re.sub(r"//.*", "", body))


def test_renamed_identifiers_do_not_collide(tmp_path, capsys) -> None:
    path = write_source(tmp_path, kern("__init = 1.0\ninit__ = 2.0\nout[0] = __init + init__"))
    assert run([str(path), "-o", str(tmp_path / "c.cu"), "--check"]) == 0


def test_kernel_named_like_a_cuda_function(tmp_path, capsys) -> None:
    path = write_source(tmp_path, kern("out[0] = 1.0", "@kernel tile[(32,)]\ndef norm(out: mut f32[n]):\n"))
    assert run([str(path), "-o", str(tmp_path / "c.cu"), "--check"]) == 0


HOSTILE_FORMAT = r'"q\" b\\ n\n t\t \u00e9\u65e5 */ /* ??= \"); system(\"x\"); printf(\" %d%%\n"'


def test_hostile_tprint_format_is_escaped(tmp_path, capsys) -> None:
    fmt = HOSTILE_FORMAT.replace(r"\u00e9", "\u00e9").replace(r"\u65e5", "\u65e5")
    path = write_source(tmp_path, kern(f"tprint({fmt}, m)\ntassert(m > 0, {fmt})"))
    out = tmp_path / "s.cu"
    assert run([str(path), "-o", str(out), "--check", "--debug"]) == 0
    assert "no warnings" in capsys.readouterr().err
    cu = out.read_bytes()
    assert cu.isascii()  # non-ASCII text is escaped, never written raw
    text = cu.decode()
    expected = r'"q\" b\\ n\n t\t \303\251\346\227\245 */ /* \?\?= \"); system(\"x\"); printf(\" %d%%\n"'
    assert f"printf({expected}, (int)(m));" in text
    for line in _kernel_text(text).splitlines():
        # every string literal closes on its own line: the code part outside literals has no 'system('
        code = re.sub(r'"(?:[^"\\]|\\.)*"', '""', line.split("//")[0])
        assert "system(" not in code


@pytest.mark.parametrize("value", ["1; system(x)", "1)", "64 /* */", "1e400", "nan", "inf", "0x", "BM", "",
                                   "9" * 5000, "-" + "9" * 5000, "0x" + "f" * 5000, "1" + "0" * 400 + ".0",
                                   "18446744073709551616", "010", "-0_9", "0b2", "0o8"],
                         ids=lambda v: v if len(v) < 30 else f"{v[:8]}...({len(v)} chars)")
def test_hostile_define_values_are_usage_errors(value: str, tmp_path, capsys) -> None:
    path = write_source(tmp_path, "const BM = 64\n" + kern("out[0] = f32(BM)"))
    out = tmp_path / "d.cu"
    with pytest.raises(SystemExit) as e:
        run([str(path), "-o", str(out), "-D", f"BM={value}"])
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert "-D BM" in captured.err and "Traceback" not in captured.err
    assert not out.exists() and captured.out == ""
    assert len(captured.err.splitlines()[-1]) < 200  # a long value is cut short in the message


@pytest.mark.parametrize("item", ["B M=1", "=1", "1BM=2", "BM", "B-M=1", "BM\n=1", "B" * 256 + "=1"],
                         ids=lambda v: repr(v) if len(v) < 30 else "256-characters")
def test_hostile_define_names_are_usage_errors(item: str, tmp_path, capsys) -> None:
    path = write_source(tmp_path, "const BM = 64\n")
    with pytest.raises(SystemExit) as e:
        run([str(path), "-o", str(tmp_path / "d.cu"), "-D", item])
    assert e.value.code == 2
    assert "-D expects NAME=VALUE" in capsys.readouterr().err


def test_define_values_reach_the_c_text_as_validated_literals(tmp_path, capsys) -> None:
    path = write_source(tmp_path, "const BM = 64\n" + kern("out[0] = f32(BM)"))
    out = tmp_path / "d.cu"
    assert run([str(path), "-o", str(out), "-D", "BM=0x10"]) == 0
    assert "constexpr int BM = 16;" in out.read_text()
    for value, c in (("0b1_0000", 16), ("0o20", 16), ("00", 0), ("-0B11", -3)):
        assert run([str(path), "-o", str(out), "-D", f"BM={value}"]) == 0
        assert f"constexpr int BM = {c};" in out.read_text()


def test_a_define_value_with_leading_zeros_says_what_to_write(tmp_path, capsys) -> None:
    path = write_source(tmp_path, "const BM = 64\n")
    with pytest.raises(SystemExit):
        run([str(path), "-o", str(tmp_path / "d.cu"), "-D", "BM=010"])
    assert "-D BM: '010' has leading zeros (write 10, or 0o10 for C's octal 010)" in capsys.readouterr().err


@pytest.mark.parametrize("seed", range(8))
def test_random_bytes_give_a_located_error(seed: int, tmp_path, capsys) -> None:
    data = random.Random(seed).randbytes(300)
    path = write_source(tmp_path, data)
    code = run([str(path), "-o", str(tmp_path / "r.cu")])
    err = capsys.readouterr().err
    assert code == 1, err
    assert re.match(rf"^{re.escape(str(path))}:\d+:\d+: error: ", err), err
    assert "Traceback" not in err and "internal compiler error" not in err


# Found while reviewing the documentation against the compiler.
REVIEW_CASES = [
    ("ternary-arm-group-sum", "@kernel tile[(64,)]\ndef k(y: mut f32[64]):\n    i = tile_linear_id()\n"
     "    y[i] = group_sum(1.0) if i < 3 else 0.0\n", 4, 12, "group_sum() must be reached by every tile"),
    ("and-right-side-group-sum", "@kernel tile[(64,)]\ndef k(y: mut f32[64]):\n    i = tile_linear_id()\n"
     "    if i < 3 and group_sum(1.0) > 0.0:\n        y[0] = 1.0\n", 4, 18, "group_sum() must be reached by every tile"),
    ("warp-device-function-under-lane-condition",
     "@device\ndef w(x: f32) -> f32:\n    return warp_sum(x)\n\n@kernel tile[(64,)]\ndef k(y: mut f32[64]):\n"
     "    if lane_id() < 16:\n        y[0] = w(1.0)\n", 8, 16, "w() must be reached by all 32 lanes of the warp"),
    ("warp-device-function-partial-warps",
     "@device\ndef w(x: f32) -> f32:\n    return warp_sum(x)\n\n@kernel tile[(48,)]\ndef k(y: mut f32[64]):\n"
     "    y[0] = w(1.0)\n", 7, 12, "w() uses warp operations and needs whole warps"),
    ("bitwise-on-bool", "@kernel tile[(32,)]\ndef k(b: bool, c: bool, y: mut i32[1]):\n    d = b & c\n", 3, 11,
     "'&' needs integer operands, not bool"),
    ("nested-table", "const SW: i32[2, 2] = [[0, 1], [1, 0]]\n", 1, 24, "one flat list in row-major order"),
    ("map-kernel-statement-mixed", "@kernel tile[(32,)]\ndef k(x: f32[n], y: mut f32[n]):\n    y[:] = x\n"
     "    y[0] = 1.0\n", 4, 5, "a map kernel assigns whole tensors: write y[:] = ..., not single elements"),
    ("constant-memory-overflow", "const T: f32[17000] = [" + ", ".join(["0.5"] * 17000) + "]\n", 1, 1,
     "over the 65536 bytes of constant memory"),
]


@pytest.mark.parametrize("name,text,line,col,message", REVIEW_CASES, ids=[c[0] for c in REVIEW_CASES])
def test_review_cases(name, text, line, col, message, tmp_path, capsys) -> None:
    path = tmp_path / "r.tsr"
    path.write_text(text)
    assert run([str(path), "-o", str(tmp_path / "r.cu")]) == 1
    err = capsys.readouterr().err
    assert f"r.tsr:{line}:{col}: error: " in err and message in err, err
    assert "Traceback" not in err


def test_errors_from_different_passes_are_reported_together(tmp_path, capsys) -> None:
    path = tmp_path / "m.tsr"
    path.write_text("@kernel tile[(64,)]\ndef a(y: mut f32[n]):\n    y[0] = 1 / 2\n\n@kernel tile[(64,)]\n"
                    "def b(y: mut f32[n]):\n    if tile_linear_id() < 3:\n        tbarrier()\n"
                    "    s = tshared.alloc(f32[100000])\n")
    assert run([str(path), "-o", str(tmp_path / "m.cu")]) == 1
    err = capsys.readouterr().err
    assert "m.tsr:3:14: error: '/' of two integers" in err          # typecheck
    assert "m.tsr:8:9: error: tbarrier() must be reached" in err     # check-cooperation
    assert "m.tsr:9:9: error: kernel 'b' needs 400000 bytes" in err  # plan-shared


# ---- long lines: a window of the line around the column ----------------------------------------

@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_a_long_line_is_shown_around_the_column(where: str, tmp_path, capsys) -> None:
    terms = " + ".join(f"x[{i}]" for i in range(150))
    expr = {"start": "$ + " + terms, "middle": terms + " + $ + " + terms, "end": terms + " + $"}[where]
    source = kern(f"out[0] = {expr}")
    line = source.splitlines()[2]
    col = line.index("$") + 1
    path = write_source(tmp_path, source)
    assert run([str(path), "-o", str(tmp_path / "w.cu")]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith(f"{path}:3:{col}: error: unexpected character '$'")
    check_source_and_caret(lines[1], lines[2], 3, col, line, "\n".join(lines))
    shown = lines[1][len("   3 | "):]
    assert shown[lines[2].index("^") - len("   3 | ")] == "$"
    assert shown.startswith("...") == (where != "start") and shown.endswith("...") == (where != "end")
    if where == "middle":
        assert lines[2].index("^") - len("   3 | ") == 3 + 60  # centered


def test_control_characters_in_a_long_line_keep_the_caret_in_place(tmp_path, capsys) -> None:
    # control characters in a string before the error, and in a comment after it
    path = write_source(tmp_path, 'const A = 1\nconst B = "' + "\x1b[2J\t" * 3 + '" $  # ' + "\x1b[2J\t" * 100 + "\n")
    assert run([str(path), "-o", str(tmp_path / "w.cu")]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\t" not in err
    shown = ('const B = "' + "?[2J " * 3 + '" $  # ' + "?[2J " * 100)[:120] + "..."
    assert err.splitlines()[0].endswith(":2:29: error: unexpected character '$'")
    assert err.splitlines()[1:3] == ["   2 | " + shown, "     | " + " " * shown.index("$") + "^"]


# ---- many errors: at most 100 are kept, the rest counted ----------------------------------------

def test_at_most_100_errors_are_shown_and_the_rest_counted(tmp_path, capsys) -> None:
    path = write_source(tmp_path, kern("\n".join(f"out[0] = undefined_{i}" for i in range(150))))
    assert run([str(path), "-o", str(tmp_path / "m.cu")]) == 1
    err = capsys.readouterr().err
    heads = [ln for ln in err.splitlines() if re.match(rf"^{re.escape(str(path))}:\d+:\d+: error: ", ln)]
    assert len(heads) == 100 and "undefined_99'" in heads[-1]
    assert err.splitlines()[-1] == f"{path}: note: too many errors: 50 more not shown (at most 100 are reported)"


def test_errors_beyond_100_in_module_constants_are_counted(tmp_path, capsys) -> None:
    # Module constants are resolved once per source (the front end), and their errors were copied
    # into each variant's diagnostics without their count of those not shown.
    path = write_source(tmp_path, "\n".join(f"const C{i} = undefined_{i}" for i in range(130)) + "\n" + kern("out[0] = 1"))
    assert run([str(path), "-o", str(tmp_path / "m.cu")]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == f"{path}: note: too many errors: 30 more not shown (at most 100 are reported)"


def test_collecting_errors_is_linear() -> None:
    import time

    from tessera.base.errors import DiagnosticSink, Loc, SourceFile

    sink = DiagnosticSink(SourceFile("m.tsr", "x\n"))
    for i in range(300):
        sink.error(Loc(1, 1), f"error {i % 250}")  # the last 50 repeat earlier ones
    assert len(sink.items) == 100 and sink.suppressed == 150
    # CPU time of this process (other processes on the machine do not count), 5,000 against 50,000
    # errors: linear is about 10x; the quadratic version took hours for 50,000.
    spent = {}
    for n in (5_000, 50_000):
        sink = DiagnosticSink(SourceFile("m.tsr", "x\n" * n))
        start = time.process_time()
        for i in range(n):
            sink.error(Loc(i + 1, 1), f"error {i}")
            sink.error(Loc(i + 1, 1), f"error {i}")
        with pytest.raises(CompileError) as e:
            sink.raise_if_errors()
        spent[n] = time.process_time() - start
    assert spent[50_000] < 30 * spent[5_000] + 0.5, spent
    assert len(e.value.diagnostics) == 100 and e.value.suppressed == 49_900


def test_cooperation_check_is_linear_in_loop_depth(tmp_path, capsys) -> None:
    # Each loop level used to walk its body twice: 22 nested loops took over a minute (CPU time
    # here, so that other processes on the machine do not count).
    import time

    depth = 22
    text = "@kernel tile[(64,)]\ndef k(y: mut f32[n]):\n    v = 0\n" + "".join(
        "    " * (d + 1) + f"for j{d} in range(2):\n" for d in range(depth))
    text += "    " * (depth + 1) + "v = v + lane_id()\n" + "    " * (depth + 1) + "if v > 3:\n" + \
        "    " * (depth + 2) + "tbarrier()\n"
    path = write_source(tmp_path, text)
    t = time.process_time()
    assert run([str(path), "-o", str(tmp_path / "deep.cu")]) == 1
    assert time.process_time() - t < 10
    assert f"case.tsr:{depth + 6}:{4 * (depth + 2) + 1}: error: tbarrier() must be reached" in capsys.readouterr().err


@pytest.mark.parametrize("body", ["max = 3.0\nout[0] = max + 1.0\nout[1] = max",
                                  "s = tshared.alloc(f32[m * 2])\ns[0] = 1.0\nout[0] = s[0]",
                                  "exp = 2.0\nout[0] = exp(1.0)"])
def test_a_rejected_definition_gives_no_follow_on_errors(body: str, tmp_path, capsys) -> None:
    """A builtin's name used as a local, or an allocation that was rejected: one error, not one
    more at every later use of the name."""
    path = write_source(tmp_path, kern(body))
    assert run([str(path), "-o", str(tmp_path / "o.cu")]) == 1
    err = capsys.readouterr().err
    assert err.count(": error:") == 1, err
