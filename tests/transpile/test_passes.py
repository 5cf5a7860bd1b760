"""The passes one by one. Each test states a program before the pass and what the pass must make
of it: an *expected* program that is compared structurally (locations ignored) with the result,
as TileLang's transform tests do, or the expected IR dump. The IR verifier (transpile/lir/verify.py)
runs after every pass on every sample and on tests/programs/features.tsr."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest

from tessera.base.dtypes import SCALARS
from tessera.base.errors import CompileError, SourceFile
from tessera.base.options import CompileOptions
from tessera.frontend import nodes as N
from tessera.transpile.consts import module_env
from tessera.transpile.driver import compile_source, front_end
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.dump import dump_lir
from tessera.transpile.lir.fold import fold_constants
from tessera.transpile.lir.hoist import hoist_function, hoisted
from tessera.transpile.lir.shared_layout import shared_layout
from tessera.transpile.lir.verify import AST_PASSES, LIR_PASSES, VerifyError, verify, verify_lir
from tessera.transpile.lir.verify_plans import PLANNING_PASSES
from tessera.transpile.lir.visit import stmt_walk
from tessera.transpile.passes.lower import lower, lower_function
from tessera.transpile.pipeline import PASS_NAMES
from tests.conftest import ROOT, SAMPLES

PROGRAMS = [*SAMPLES, ROOT / "tests" / "programs" / "features.tsr"]


def after(text: str, last: str, **kw) -> object:
    """The module after pass `last`, the verifier run after every pass up to it."""
    return compile_source(SourceFile("t.tsr", text), stop_after=last, verify=verify, **kw).module


def kernel(body: str, params: str = "x: f32[n], y: mut f32[n]", head: str = "@kernel tile[(64,)]") -> str:
    return f"{head}\ndef k({params}):\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"


def structure(node: object) -> object:
    """A node as nested tuples without locations: equal structures mean equal programs."""
    if isinstance(node, tuple):
        return tuple(structure(x) for x in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return (type(node).__name__, *(structure(getattr(node, f.name)) for f in dataclasses.fields(node)
                                       if f.name != "loc"))
    return node


# ---- the verifier ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_ir_verifies_after_every_pass(path) -> None:
    text = path.read_text()
    for name in PASS_NAMES:
        after(text, name)  # raises VerifyError (an internal compiler error) on a violation


def test_the_verifier_finds_a_variable_used_out_of_scope() -> None:
    module = after(kernel("if x[0] > 0.0:\n    v = 1.0\nelse:\n    v = 2.0\ny[0] = v"), "lower")
    assert isinstance(module, L.Module)
    verify_lir(module)
    unhoisted = dataclasses.replace(module, functions=tuple(
        lower_function(f, {}, hoist=False) for f in after(kernel(
            "if x[0] > 0.0:\n    v = 1.0\nelse:\n    v = 2.0\ny[0] = v"), "check-cooperation").items))
    with pytest.raises(VerifyError, match="'v' used outside its scope"):
        verify_lir(unhoisted)


def test_the_verifier_finds_operands_of_the_wrong_type() -> None:
    module = after(kernel("y[0] = x[0] + 1.0"), "lower")
    fn = module.functions[0]
    (store,) = fn.body
    bad = dataclasses.replace(store, value=dataclasses.replace(store.value, b=L.Const(1, SCALARS["i32"])))
    with pytest.raises(VerifyError, match="operand types"):
        verify_lir(dataclasses.replace(module, functions=(dataclasses.replace(fn, body=(bad,)),)))


# ---- front-end passes --------------------------------------------------------------------------------

def test_resolve_constants_folds_module_constants_with_defines() -> None:
    text = "const A = 2 * 3\nconst B = A + 0.5\nconst T: i32[2] = [A, A * 2]\n"
    module = front_end(SourceFile("t.tsr", text), {"A": 10}).module
    assert module_env(module) == {"A": 10, "B": 10.5}
    assert [i.folded for i in module.items] == [10, 10.5, (10, 20)]


def test_specialize_fixes_const_parameters_of_the_variant() -> None:
    text = kernel("y[0] = f32(BM * BN)", "y: mut f32[n], BM: const i32 = 64, BN: const i32 = BM")
    (fn,) = after(text, "specialize", variants={"k": {"BM": 32}}).items
    assert fn.const_values == (("BM", 32), ("BN", 32))
    (fn,) = after(text, "resolve-constants").items
    assert fn.const_values == ()


def test_kernel_headers_evaluates_the_header_with_const_parameters() -> None:
    text = kernel("pass", "y: mut f32[n], BM: const i32 = 64", "@kernel tile[(BM // 4, 2)] shared(1_KiB)")
    (fn,) = after(text, "specialize").items
    assert fn.config is None and fn.kind == ""
    (fn,) = after(text, "kernel-headers").items
    assert fn.kind == "kernel" and fn.config == N.KernelConfig((16, 2), 1024, None, None)


def test_typecheck_only_adds_types() -> None:
    text = kernel("if tile_linear_id() < 3:\n    v = 1\nelse:\n    v = 2\ny[0] = f32(v)")
    before, typed = after(text, "kernel-headers"), after(text, "typecheck")
    (fb,), (ft,) = before.items, typed.items
    assert ft.params[1].ty == N.TensorType(ft.params[1].ty.elem, ft.params[1].ty.dims, True)
    assert ft.body[0].then[0].declares and not ft.body[0].orelse[0].declares
    assert fb.body[0].then[0].target.ty is None and ft.body[0].then[0].target.ty.name == "i32"
    assert (ft.kind, ft.config, ft.const_values) == (fb.kind, fb.config, fb.const_values)


def test_check_cooperation_changes_nothing_when_the_program_is_right() -> None:
    text = kernel("if group_id(0) == 0:\n    tbarrier()")
    assert after(text, "check-cooperation") == after(text, "typecheck")


# ---- lower ----------------------------------------------------------------------------------------------

LOWERED = """\
module t.tsr
kernel k tile(64,)(x: tensor f32, y: tensor f32, n: shape i32):
    buffer global x: f32[n:i32]
    buffer global y: f32[n:i32] mut
    buffer regs acc: f32[4]
    decl i:i32 = tile_linear_id():i32  # line 3
    alloc acc  # line 4
    fill acc = 0.0:f32  # line 4
    for j:i32 in unrolled range(0:i32, 4:i32, 1:i32) trips=4:  # line 5
        store acc[{j:i32}] +=[f32] (load x[{i:i32*4 + j:i32}]:f32 * 2.0:f32)  # line 6
    if (i:i32 < n:i32):  # line 7
        store y[{i:i32}] = load acc[{0}]:f32  # line 8
"""


def test_lower_makes_memory_conversions_and_indices_explicit() -> None:
    text = kernel("""
        i = tile_linear_id()
        acc = tregs(f32[4], 0.0)
        for j in static_range(4):
            acc[j] += x[i * 4 + j] * 2
        if i < n:
            y[i] = acc[0]
    """)
    assert dump_lir(after(text, "lower")) == LOWERED


def test_lower_declares_at_the_top_what_python_scoping_keeps_alive() -> None:
    text = kernel("if x[0] > 0.0:\n    v = 1.0\nelse:\n    v = 2.0\ny[0] = v")
    typed = after(text, "check-cooperation")
    raw = lower_function(typed.items[0], {}, hoist=False)
    assert hoisted(raw) == {"v"}
    got = hoist_function(raw)
    decl, branch, store = got.body
    assert decl == L.Decl(decl.loc, L.Var("v", decl.var.dtype), None)
    assert isinstance(branch.then[0], L.Assign) and isinstance(branch.orelse[0], L.Assign)
    assert isinstance(raw.body[0].then[0], L.Decl) and got.body[2] == raw.body[1]
    assert hoist_function(got) == got


def test_lower_copies_bounds_that_could_change_and_keeps_invariant_ones() -> None:
    text = kernel("m = n\nfor i in range(tile_linear_id(), m, group_tile_count()):\n    m = m - 1\n"
                  "y[0] = f32(m)")
    fn = after(text, "lower").functions[0]
    decl, stop, loop = fn.body[0:3]
    assert stop == L.Decl(stop.loc, L.Var("%stop_i", stop.var.dtype), L.Var("m", stop.var.dtype), const=True)
    assert loop.stop == stop.var and isinstance(loop.start, L.Intrinsic) and isinstance(loop.step, L.Intrinsic)


MAP = kernel("""
h = alpha * X
Y[:] += h * (2.0 * 0.5)
Z[:] = f16(Y) if Y > 0.0 else Z
""", "alpha: f32, X: f16[M, N], Y: mut f32[M, N], Z: mut f16[M, N]", "@kernel tile[(64,)] vectorize(8)")

MAP_LOWERED = """\
module t.tsr
kernel k tile(64,)(alpha: scalar f32, X: tensor f16, Y: tensor f32, Z: tensor f16, M: shape i32, N: shape i32):
    buffer global X: f16[M:i32, N:i32]
    buffer global Y: f32[M:i32, N:i32] mut
    buffer global Z: f16[M:i32, N:i32] mut
    for each of the (i64(M:i32) * i64(N:i32)) elements, 8 per tile:  # line 3
        decl h:f32 = (alpha:f32 * f32(load X[]:f16))  # line 3
        store Y[] +=[f32] (h:f32 * (2.0:f32 * 0.5:f32))  # line 4
        store Z[] = (f16(load Y[]:f32) if (load Y[]:f32 > 0.0:f32) else load Z[]:f16)  # line 5
"""


def test_lower_makes_a_map_kernel_one_element_loop() -> None:
    module = after(MAP, "lower")
    assert dump_lir(module) == MAP_LOWERED
    (fn,) = module.functions
    (loop,) = fn.body
    assert isinstance(loop, L.ElementLoop) and loop.width == 8 and loop.count.dtype == SCALARS["i64"]
    loads = [e for s in loop.body for e in stmt_walk(s) if isinstance(e, L.Load)]
    stores = [s for s in loop.body if isinstance(s, L.Store)]
    assert [x.buf for x in loads] == ["X", "Y", "Y", "Z"] and [x.buf for x in stores] == ["Y", "Z"]
    assert all(x.index == () for x in loads + stores)
    # fold-constants works inside the loop; the later passes keep it
    folded = dump_lir(after(MAP, "plan-shared"))
    assert folded == MAP_LOWERED.replace("(h:f32 * (2.0:f32 * 0.5:f32))", "(h:f32 * 1.0:f32)")


def test_the_verifier_checks_map_elements() -> None:
    module = after(MAP, "lower")
    (fn,) = module.functions
    (loop,) = fn.body

    def with_fn(**changes) -> L.Module:
        return dataclasses.replace(module, functions=(dataclasses.replace(fn, **changes),))

    with pytest.raises(VerifyError, match="element of a map outside an element loop"):
        verify_lir(with_fn(body=loop.body))
    other = tuple(dataclasses.replace(b, shape=b.shape[:1]) if b.name == "Z" else b for b in fn.buffers)
    with pytest.raises(VerifyError, match="map tensor of another shape than the map's"):
        verify_lir(with_fn(buffers=other))
    with pytest.raises(VerifyError, match="element loop that stores no element"):
        verify_lir(with_fn(body=(dataclasses.replace(loop, body=loop.body[:1]),)))
    with pytest.raises(VerifyError, match="count that is not i64"):
        verify_lir(with_fn(body=(dataclasses.replace(loop, count=L.Const(5, SCALARS["i32"])),)))


def test_the_map_sample_is_among_the_verified_programs() -> None:
    assert ROOT / "samples" / "elementwise.tsr" in PROGRAMS


# ---- fold-constants --------------------------------------------------------------------------------------

@pytest.mark.parametrize("before,expected", [
    ("y[0] = 2.0 * f32(3) + x[1 * 4 + 1]", "y[0] = 6.0 + x[5]"),
    ("a = 7 // -2\nb = -7 % 2\ny[a + b] = 1.0", "a = -3\nb = -1\ny[a + b] = 1.0"),
    ("y[0] = f32(i32(2.9e9))", "y[0] = 2147483648.0"),  # i32 max rounded to f32
    ("y[0] = 1.0 if 2 > 3 else x[0]", "y[0] = x[0]"),
    ("c = 0.1 + 0.2\ny[0] = c", "c = 0.30000001192092896\ny[0] = c"),
])
def test_fold_constants(before: str, expected: str) -> None:
    got = after(kernel(before), "fold-constants")
    want = after(kernel(expected), "lower")
    assert structure(got) == structure(want)


def test_fold_constants_keeps_names_and_what_would_overflow_or_trap() -> None:
    text = kernel("a = 2147483647\nb = a + 1\nc = m // 0 if m > 5 else 0\ny[0] = f32(BM * 2 + b + c)",
                  "y: mut f32[n], m: i32, BM: const i32 = 8")
    with pytest.raises(CompileError, match="division by zero"):
        after(text, "fold-constants")
    text = kernel("a = 2147483647\nb = a + 1\ny[0] = f32(BM * 2 + b)", "y: mut f32[n], BM: const i32 = 8")
    got = after(text, "fold-constants")
    assert got == fold_constants(after(text, "lower"))
    assert "(BM=8:i32 * 2:i32)" in dump_lir(got)


# ---- plan-shared ------------------------------------------------------------------------------------------

def test_plan_shared_lays_out_aligned_slots() -> None:
    text = kernel("a = tshared.alloc(f16[3, 5], pad=1)\nb = tshared.alloc(f32[4])\nc = tshared.alloc(f64[2])\n"
                  "s = group_sum(1.0)\na[0, 0] = s\nb[0] = s\nc[0] = s\ntbarrier()\n"
                  "y[0] = f32(a[0, 0]) + b[0] + f32(c[0])")
    module = after(text, "plan-shared")
    layout = shared_layout(module.functions[0])
    before = after(text, "fold-constants")  # the pass only records the layout on the kernel
    assert module == dataclasses.replace(before, functions=(dataclasses.replace(before.functions[0], shared=layout),))
    assert [(s.name, s.offset, s.nbytes) for s in layout.slots] == [("a", 0, 36), ("b", 48, 16), ("c", 64, 16)]
    assert layout.total_bytes == 80 and layout.scratch_bytes == 16 and not layout.dynamic


def test_plan_shared_goes_dynamic_above_48_kib() -> None:
    text = kernel("a = tshared.alloc(f32[128, 100])\na[0, 0] = 1.0\ntbarrier()\ny[0] = a[0, 0]")
    layout = shared_layout(after(text, "plan-shared").functions[0])
    assert layout.dynamic and layout.total_bytes == 51200


def test_lowering_the_whole_module_keeps_constants_and_tables() -> None:
    text = "const A = 3\nconst T: f32[2] = [1.0, 2.0]\n" + kernel("y[0] = T[1] * f32(A)")
    module = lower(after(text, "check-cooperation"))
    assert [(c.name, c.value) for c in module.consts] == [("A", 3)]
    assert [(t.name, t.values) for t in module.tables] == [("T", (1.0, 2.0))]


# ---- pipeline-copies -------------------------------------------------------------------------------

PIPELINED = kernel("""
s = tshared.alloc(f32[64])
for i in tpipeline(0, n, 64, stages=3):
    tcopy_async(s, x[i:i + 64])
    y[i + tile_id(0)] = s[tile_id(0)]
""")


def test_pipeline_copies_keeps_the_loop_until_its_pass() -> None:
    text = dump_lir(after(PIPELINED, "fold-constants"))
    assert "buffer shared s: f32[64]\n" in text
    assert "for i:i32 in range(0:i32, n:i32, 64:i32) stages=3:  # line 4\n" \
           "        copy async s[0:i32+:64] <- x[{i:i32}+:64]  # line 5\n" in text


def test_pipeline_copies_multi_buffers_and_issues_ahead() -> None:
    text = dump_lir(after(PIPELINED, "pipeline-copies"))
    body = text[text.index("    alloc s"):]
    assert "buffer shared s: f32[3, 64]\n" in text
    expected = textwrap.dedent("""\
        alloc s  # line 3
        const decl %k0_i_4:i32 = 0:i32  # line 4
        if (%k0_i_4:i32 < n:i32):  # line 4
            copy async s[0:i32, 0:i32+:64] <- x[{%k0_i_4:i32}+:64]  # line 5
        commit  # line 4
        const decl %k1_i_4:i32 = 64:i32  # line 4
        if (%k1_i_4:i32 < n:i32):  # line 4
            copy async s[1:i32, 0:i32+:64] <- x[{%k1_i_4:i32}+:64]  # line 5
        commit  # line 4
        decl %stage_i_4:i32 = 2:i32  # line 4
        for i:i32 in range(0:i32, n:i32, 64:i32):  # line 4
            %stage_i_4:i32 = (0:i32 if (%stage_i_4:i32 == 2:i32) else (%stage_i_4:i32 + 1:i32))  # line 4
            wait 1 + barrier  # line 4
            const decl %next_i_4:i32 = {i:i32 + 128}  # line 4
            const decl %fill_i_4:i32 = (2:i32 if (%stage_i_4:i32 == 0:i32) else (%stage_i_4:i32 - 1:i32))  # line 4
            if (%next_i_4:i32 < n:i32):  # line 4
                copy async s[%fill_i_4:i32, 0:i32+:64] <- x[{%next_i_4:i32}+:64]  # line 5
            commit  # line 4
            store y[{i:i32 + tile_id(0:i32):i32}] = load s[%stage_i_4:i32, {tile_id(0:i32):i32}]:f32  # line 6
        wait 0  # line 4
        """)
    assert body == textwrap.indent(expected, "    ")


@pytest.mark.parametrize("stages", [1, 2])
def test_pipeline_copies_one_and_two_stages(stages: int) -> None:
    text = dump_lir(after(PIPELINED.replace("stages=3", f"stages={stages}"), "pipeline-copies"))
    if stages == 1:  # a plain loop: one buffer, copy, wait for it, use it
        assert "buffer shared s: f32[64]\n" in text
        assert "for i:i32 in range(0:i32, n:i32, 64:i32):  # line 4\n" \
               "        barrier  # line 4\n" \
               "        copy async s[0:i32+:64] <- x[{i:i32}+:64]  # line 5\n" \
               "        commit  # line 4\n" \
               "        wait 0 + barrier  # line 4\n" in text
    else:
        assert "buffer shared s: f32[2, 64]\n" in text and "wait 0 + barrier" in text and "%k1_i_4" not in text


# ---- plan-fragments -------------------------------------------------------------------------------

FRAGMENTS = kernel("""
As = tshared.alloc(f16[64, 32])
Bs = tshared.alloc(f16[32, 64], pad=0)
acc = tfrag(f32[64, 64], 0.0)
for k0 in tpipeline(0, K, 32, stages=2):
    tcopy_async(As, A[0:64, k0:k0 + 32])
    tcopy_async(Bs, B[k0:k0 + 32, 0:64])
    tmma(acc, As, Bs)
acc[:] = acc * 2.0
tstore(C[0:64, 0:64], acc)
""", "A: f16[M, K], B: f16[K, N], C: mut f32[M, N]", "@kernel tile[(128,)]")


def test_lower_makes_fragment_statements() -> None:
    text = dump_lir(after(FRAGMENTS, "fold-constants"))
    assert "buffer frag acc: f32[64, 64]\n" in text and "fill acc = 0.0:f32  # line 5\n" in text
    assert "mma acc += As[0:i32+:64, 0:i32+:32] @ Bs[0:i32+:32, 0:i32+:64]  # line 9\n" in text
    assert "fragment acc[:] = (load acc[]:f32 * 2.0:f32)  # line 10\n" in text
    assert "fragment C[{0}+:64, {0}+:64] <- acc  # line 11\n" in text


def test_pipeline_copies_stages_the_operands_of_mma() -> None:
    text = dump_lir(after(FRAGMENTS, "pipeline-copies"))
    assert "mma acc += As[%stage_k0_6:i32, 0:i32+:64, 0:i32+:32] @ Bs[%stage_k0_6:i32, 0:i32+:32, 0:i32+:64]" in text


def test_plan_fragments_pads_operands_without_pad_and_keeps_the_others() -> None:
    before = after(FRAGMENTS, "pipeline-copies")
    module = after(FRAGMENTS, "plan-fragments")
    pads = {b.name: (b.pad, b.auto_pad) for b in module.functions[0].buffers if b.space == "shared"}
    assert pads == {"As": (8, True), "Bs": (0, False)}  # 80-byte rows: an odd number of 16-byte units
    expected = dataclasses.replace(before.functions[0], buffers=tuple(
        dataclasses.replace(b, pad=8) if b.name == "As" else b for b in before.functions[0].buffers))
    assert structure(module.functions[0]) == structure(expected)  # nothing else changes


# ---- the planning passes: what the printers print is decided before them ----------------------------

COPIES = kernel("""
s = tshared.alloc(f32[64])
r0 = group_id(0) * 64
tcopy(s, x[r0 - 1:r0 - 1 + 64])
tbarrier()
y[r0 + tile_id(0)] = s[tile_id(0)]
""")


def _with(text: str, last: str, **options: object) -> L.Module:
    module = compile_source(SourceFile("t.tsr", text), CompileOptions(**options), stop_after=last,  # type: ignore[arg-type]
                            verify=verify).module
    assert isinstance(module, L.Module)
    return module


def test_the_verifier_knows_the_passes_in_pipeline_order() -> None:
    assert AST_PASSES + LIR_PASSES == PASS_NAMES
    assert PASS_NAMES[-len(PLANNING_PASSES):] == PLANNING_PASSES


def test_plan_alignment_makes_the_variants_the_compile_asks_for() -> None:
    text = kernel("""
s = tshared.alloc(f32[16, 64])
tcopy(s, A[0:16, 0:64])
tbarrier()
y[0] = s[0, tile_id(0)]
""", "A: f32[M, K], y: mut f32[n]")
    before = after(text, "plan-shared")
    both = _with(text, "plan-alignment")
    generic, aligned = both.functions
    assumed = L.Alignment(("A",), ("K",))
    assert (generic.aligned, generic.alignment, aligned.aligned, aligned.alignment) == (False, assumed, True, assumed)
    assert structure(generic) == structure(dataclasses.replace(before.functions[0], alignment=assumed))
    assert [f.aligned for f in _with(text, "plan-alignment", alignment="generic").functions] == [False]
    assert [f.aligned for f in _with(text, "plan-alignment", alignment="aligned").functions] == [True]
    dump = dump_lir(both)
    assert dump.count("variant generic (the aligned one assumes A 16-byte aligned, K % 16 == 0)\n") == 1
    assert dump.count("variant aligned: A 16-byte aligned, K % 16 == 0\n") == 1
    # A kernel whose copies no alignment changes has one variant, as before the pass.
    one = kernel("s = tshared.alloc(f32[64])\ntcopy(s, x[0:64])\ntbarrier()\ny[0] = s[0]")
    assert after(one, "plan-alignment") == after(one, "plan-shared")


def test_plan_copies_plans_each_copy_and_proves_the_starts() -> None:
    before = after(COPIES, "plan-alignment")
    module = after(COPIES, "plan-copies")
    (copy,) = [s for s in module.functions[0].body if isinstance(s, L.Copy)]
    assert copy.plan == L.CopyPlan(16, True)  # a halo start: 16-byte chunks where the run-time test allows
    assert (copy.dst.nonneg, copy.src.nonneg) == ((True,), (False,))
    (old,) = [s for s in before.functions[0].body if isinstance(s, L.Copy)]
    assert (old.plan, old.dst.nonneg, old.src.nonneg) == (None, (), ())
    assert "[chunks of 16 bytes, alignment tested; lower edge tested: x dimension 0]  # line 5\n" in dump_lir(module)


def test_plan_maps_records_what_the_element_loop_moves() -> None:
    text = ("@kernel tile[(256,)] vectorize(8)\ndef k(X: f16[n], Y: f16[n], Z: mut f16[n]):\n"
            "    Z[:] = X + Y * X\n")
    loops = [s for f in after(text, "plan-maps").functions for s in f.body if isinstance(s, L.ElementLoop)]
    assert [(s.read, s.written, s.pair) for s in loops] == [(("X", "Y"), ("Z",), "f16")] * 2
    assert "8 per tile [reads X, Y; writes Z; f16 pairs]:" in dump_lir(after(text, "plan-maps"))
    mixed = text.replace("Z[:] = X + Y * X", "Z[:] = X + f16(f32(Y) * 2.0)")
    assert {s.pair for f in after(mixed, "plan-maps").functions for s in f.body if isinstance(s, L.ElementLoop)} \
        == {None}


def test_plan_cpu_regions_only_for_the_cpu_backend() -> None:
    path = ROOT / "samples" / "matmul.tsr"
    text = path.read_text()
    gpu = _with(text, "plan-cpu-regions")
    assert gpu == _with(text, "plan-maps") and all(f.regions is None for f in gpu.functions)
    cpu = _with(text, "plan-cpu-regions", cpu_regions=True)
    fn = cpu.functions[0]
    assert fn.regions == L.RegionPlan((("acc", "float[4][4]"),), ("tx", "ty", "r0", "c0"))
    (k0,) = [s for s in fn.body if isinstance(s, L.For)][:1]
    assert k0.var.name == "k0" and k0.cpu == "split"
    dump = dump_lir(cpu)
    assert "    cpu region mode; per tile: acc (float[4][4]); recomputed: tx, ty, r0, c0\n" in dump
    assert "range(0:i32, K:i32, BK=16:i32) [CPU: once per group]:" in dump
    # A kernel that region mode cannot run keeps fiber mode: no plan, no marks.
    coop = _with(kernel("s = warp_sum(x[tile_id(0)])\ny[0] = s"), "plan-cpu-regions", cpu_regions=True)
    assert coop.functions[0].regions is None
    # A group reduction is a barrier with a value (transpile/cpu/group_reduce.py): region mode.
    coop = _with(kernel("s = group_sum(x[tile_id(0)])\ny[0] = s"), "plan-cpu-regions", cpu_regions=True)
    assert coop.functions[0].regions is not None


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
@pytest.mark.parametrize("options", [{"cpu_regions": True}, {"alignment": "aligned"}, {"alignment": "generic"},
                                     {"arch": "sm_90a"}], ids=["cpu", "aligned", "generic", "sm_90a"])
def test_the_plans_verify_for_every_program_and_option(path, options: dict) -> None:
    compile_source(SourceFile(path.name, path.read_text()), CompileOptions(**options), verify=verify)


def test_the_verifier_finds_stale_and_missing_plans() -> None:
    module = after(COPIES, "plan-copies")
    fn = module.functions[0]

    def with_copy(change) -> L.Module:
        body = tuple(change(s) if isinstance(s, L.Copy) else s for s in fn.body)
        return dataclasses.replace(module, functions=(dataclasses.replace(fn, body=body),))

    verify("plan-copies", module)
    with pytest.raises(VerifyError, match="planned as"):
        verify("plan-copies", with_copy(lambda s: dataclasses.replace(s, plan=L.CopyPlan(16, False))))
    with pytest.raises(VerifyError, match="planned as None"):
        verify("plan-copies", with_copy(lambda s: dataclasses.replace(s, plan=None)))
    with pytest.raises(VerifyError, match="starts are not planned"):
        verify("plan-copies", with_copy(lambda s: dataclasses.replace(s, src=dataclasses.replace(s.src, nonneg=(True,)))))
    verify("pipeline-copies", after(COPIES, "pipeline-copies"))  # before its pass, a copy has no plan
    cpu = _with((ROOT / "samples" / "matmul.tsr").read_text(), "plan-cpu-regions", cpu_regions=True)
    f = cpu.functions[0]
    wrong = dataclasses.replace(f, regions=dataclasses.replace(f.regions, recomputed=("acc",)))
    with pytest.raises(VerifyError, match="recomputed names"):
        verify("plan-cpu-regions", dataclasses.replace(cpu, functions=(wrong,)))
    unmarked = dataclasses.replace(f, regions=None)
    with pytest.raises(VerifyError, match="not in region mode"):
        verify("plan-cpu-regions", dataclasses.replace(cpu, functions=(unmarked,)))
