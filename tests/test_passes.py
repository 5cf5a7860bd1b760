"""The passes one by one: what each adds to the IR (before/after), and an IR verifier run
after every pass on every sample: after type checking, every expression has a type and every
name says what it refers to."""

from __future__ import annotations

import dataclasses

import pytest

from tessera import nodes as N
from tessera.errors import DiagnosticSink, SourceFile
from tessera.parser import parse
from tessera.transpile.pipeline import PASSES, PassContext
from tests.conftest import SAMPLES


def run_until(text: str, last: str, arch: str = "sm_90") -> N.Module:
    src = SourceFile("t.tsr", text)
    module = parse(src)
    ctx = PassContext(DiagnosticSink(src), arch, {}, {})
    for name, fn in PASSES:
        module = fn(module, ctx)
        ctx.sink.raise_if_errors()
        if name == last:
            break
    return module


def _walk(node):
    yield node
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            v = getattr(node, f.name)
            for x in (v if isinstance(v, tuple) else (v,)):
                if dataclasses.is_dataclass(x) and not isinstance(x, (N.TensorType, N.ArrayType, N.ViewType,
                                                                        N.KernelConfig, N.SharedLayout)):
                    yield from _walk(x)


def verify(module: N.Module, typed: bool) -> None:
    """Frozen nodes with locations everywhere; after typecheck, types and name references too."""
    for item in module.items:
        for node in _walk(item):
            assert dataclasses.is_dataclass(node) and node.__dataclass_params__.frozen, type(node)
            if hasattr(node, "loc"):
                assert node.loc.line >= 1, node
            if typed and isinstance(node, N.FuncDef):
                for sub in (x for st in node.body for x in _walk(st)):
                    if isinstance(sub, (N.BinOp, N.Compare, N.Unary, N.Call, N.Index)) and not (
                            isinstance(sub, N.Call) and isinstance(sub.func, N.Attr)):
                        assert sub.ty is not None, sub
                    if isinstance(sub, N.Name) and sub.ty is not None:
                        assert sub.ref is not None, sub


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_ir_verifies_after_every_pass(path) -> None:
    text = path.read_text()
    for i, (name, _) in enumerate(PASSES):
        verify(run_until(text, name), typed=i >= 1)


def test_typecheck_fills_types_and_hoists_declarations() -> None:
    before = run_until("@kernel tile[(32,)]\ndef k(y: mut f32[n]):\n    if tile_linear_id() < 3:\n"
                       "        v = 1\n    else:\n        v = 2\n    y[0] = f32(v)\n", "parse")
    (fn,) = before.items
    assert fn.config is None and fn.hoisted == ()
    assert fn.body[0].then[0].declares is False
    after = run_until("@kernel tile[(32,)]\ndef k(y: mut f32[n]):\n    if tile_linear_id() < 3:\n"
                      "        v = 1\n    else:\n        v = 2\n    y[0] = f32(v)\n", "typecheck")
    (fn,) = after.items
    assert fn.config.tile == (32,) and fn.shape_symbols == ("n",)
    assert [n for n, _ in fn.hoisted] == ["v"]
    assert fn.body[0].then[0].declares is True and fn.body[0].orelse[0].declares is False
    assert fn.body[1].target.ty.name == "f32"


def test_check_cooperation_changes_nothing_when_the_program_is_right() -> None:
    text = "@kernel tile[(64,)]\ndef k(y: mut f32[n]):\n    if group_id(0) == 0:\n        tbarrier()\n"
    assert run_until(text, "check-cooperation") == run_until(text, "typecheck")


def test_plan_shared_lays_out_aligned_slots() -> None:
    text = ("@kernel tile[(64,)]\ndef k(y: mut f32[n]):\n    a = tshared.alloc(f16[3, 5], pad=1)\n"
            "    b = tshared.alloc(f32[4])\n    c = tshared.alloc(f64[2])\n    s = group_sum(1.0)\n"
            "    a[0, 0] = s\n    b[0] = s\n    c[0] = s\n    tbarrier()\n    y[0] = f32(a[0, 0]) + b[0] + f32(c[0])\n")
    assert run_until(text, "check-cooperation").items[0].shared is None
    layout = run_until(text, "plan-shared").items[0].shared
    assert [(s.name, s.offset, s.nbytes) for s in layout.slots] == [("a", 0, 36), ("b", 48, 16), ("c", 64, 16)]
    assert layout.total_bytes == 80 and layout.scratch_bytes == 16 and not layout.dynamic


def test_plan_shared_goes_dynamic_above_48_kib() -> None:
    text = ("@kernel tile[(64,)]\ndef k(y: mut f32[n]):\n    a = tshared.alloc(f32[128, 100])\n    a[0, 0] = 1.0\n"
            "    tbarrier()\n    y[0] = a[0, 0]\n")
    layout = run_until(text, "plan-shared").items[0].shared
    assert layout.dynamic and layout.total_bytes == 51200
