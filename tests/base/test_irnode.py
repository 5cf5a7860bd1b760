"""`tessera.base.irnode.ir_node` against the real `@dataclass(frozen=True)`: every class it decorates
behaves like a stdlib twin built from the same class body (fields, construction, equality, hashing,
repr, frozenness, replace, argument errors); what it does not support is refused when the class is
created; the IR verifier still tells frozen nodes from mutable ones; and the modules a compile
imports keep the real decorator only where ir_node would refuse the class."""

from __future__ import annotations

import ast
import copy
import dataclasses
import importlib
import importlib.util
import json
import pathlib
import pkgutil
import subprocess
import sys
from dataclasses import FrozenInstanceError
from typing import Any, ClassVar

import pytest

import tessera
import tessera.transpile
from tessera.base import irnode
from tessera.base.errors import Loc
from tessera.base.irnode import ir_node, is_ir_node
from tessera.frontend import nodes as N
from tessera.transpile.lir.verify import VerifyError, verify_ast
from tests.conftest import ROOT

HAS_TORCH = importlib.util.find_spec("torch") is not None


def _imports_torch(name: str) -> bool:
    """Whether module `name` imports PyTorch as it is imported: an `import torch` at its top level or
    in a `try` there (read from its source, not imported)."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(pathlib.Path(spec.origin).read_text(encoding="utf-8"))
    top = [s for node in tree.body for s in ([node, *node.body] if isinstance(node, ast.Try) else [node])]
    return any(isinstance(s, ast.Import) and any(a.name.split(".")[0] == "torch" for a in s.names) for s in top)


# Every module of the package but the command line's entry point and the distributed layer's; without
# PyTorch, not the modules that import it (they cannot be imported: tests/ops/test_without_torch.py).
ALL_MODULES = [m.name for pkg in (tessera, tessera.transpile)
               for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")
               if not m.name.endswith("__main__") and not m.name.startswith("tessera.dist")]
TORCH_MODULES = [name for name in ALL_MODULES if _imports_torch(name)]
MODULES = [name for name in ALL_MODULES if HAS_TORCH or name not in TORCH_MODULES]


def _classes(module_names: list[str]) -> list[type]:
    """The classes the modules define (not the ones they import)."""
    out = []
    for name in module_names:
        module = importlib.import_module(name)
        out += [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == name]
    return out


IR_NODES = [c for c in _classes(MODULES) if is_ir_node(c)]


def test_only_the_pytorch_operators_import_pytorch() -> None:
    """The modules left out of MODULES without PyTorch are the two the architecture names."""
    assert TORCH_MODULES == ["tessera.ops.torch", "tessera.ops.torch_autograd"]


@pytest.mark.torch
def test_with_pytorch_its_modules_are_checked_too() -> None:
    """Where PyTorch is installed, the modules that import it are among MODULES and import."""
    assert set(TORCH_MODULES) <= set(MODULES)
    _classes(TORCH_MODULES)


def test_the_ir_modules_are_converted() -> None:
    names = {f"{c.__module__}.{c.__qualname__}" for c in IR_NODES}
    assert len(IR_NODES) >= 110
    assert {"tessera.frontend.nodes.FuncDef", "tessera.transpile.lir.nodes.Function", "tessera.base.kernel_info.KernelInfo",
            "tessera.base.errors.Diagnostic", "tessera.base.dtypes.ScalarType", "tessera.transpile.driver.CompileResult"} <= names


# ---- every ir_node class against its stdlib twin -------------------------------------------------

_GENERATED = {"__dict__", "__weakref__", "__dataclass_fields__", "__dataclass_params__", "__match_args__",
              "__init__", "__eq__", "__hash__", "__setattr__", "__delattr__", "__doc__"}


def twin(cls: type) -> type:
    """`cls`'s class body again, under the stdlib's `@dataclass(frozen=True)`."""
    ns = {k: v for k, v in vars(cls).items() if k not in _GENERATED}
    if ns["__repr__"].__module__ == irnode.__name__:
        del ns["__repr__"]  # ir_node's, not the class's own
    ns["__qualname__"] = cls.__qualname__
    for f in dataclasses.fields(cls):
        ns.pop(f.name, None)
        plain = f.init and f.repr and f.compare and f.hash is None and not f.metadata and not f.kw_only
        if plain and f.default_factory is dataclasses.MISSING:
            if f.default is not dataclasses.MISSING:
                ns[f.name] = f.default
        else:
            ns[f.name] = dataclasses.field(default=f.default, default_factory=f.default_factory, init=f.init,
                                           repr=f.repr, hash=f.hash, compare=f.compare, metadata=f.metadata,
                                           kw_only=f.kw_only)
    return dataclasses.dataclass(frozen=True)(type(cls.__name__, cls.__bases__, ns))


def _field_facts(cls: type) -> list[tuple]:
    return [(f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.hash, f.compare, f.kw_only)
            for f in dataclasses.fields(cls)]


def _outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[type, str] | str:
    """What calling `fn` gives: its exception's type and message, or 'ok'."""
    try:
        fn(*args, **kwargs)
    except Exception as e:  # the stdlib twin's outcome is the reference
        return type(e), str(e)
    return "ok"


def check_like_twin(cls: type) -> None:
    real = twin(cls)
    assert is_ir_node(cls) and not is_ir_node(real)
    assert dataclasses.is_dataclass(cls)
    assert _field_facts(cls) == _field_facts(real)
    assert cls.__match_args__ == real.__match_args__
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    values = [f"{cls.__name__}.{n}" for n in names]
    others = [v + "'" for v in values]
    required = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    good_calls: list[tuple[tuple, dict]] = [
        (tuple(values), {}), ((), dict(zip(names, values))),
        (tuple(values[:len(required)]), {}),  # the defaults
        (tuple(values[:1]), dict(zip(names[1:], values[1:]))),
    ]
    for args, kwargs in good_calls:
        a, b = cls(*args, **kwargs), real(*args, **kwargs)
        assert list(vars(a).items()) == list(vars(b).items()), (args, kwargs)  # the values, in field order
        assert repr(a) == repr(b)
        assert _outcome(hash, a) == _outcome(hash, b) and (_outcome(hash, a) != "ok" or hash(a) == hash(b))
        assert a == cls(*args, **kwargs) and b == real(*args, **kwargs)
        assert a != b and b != a  # different classes
        assert a.__eq__(object()) is NotImplemented
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
        assert copy.copy(a) == a and copy.deepcopy(a) == a
    a, b = cls(*values), real(*values)
    for i, name in enumerate(names):  # one field different
        changed = [*values[:i], others[i], *values[i + 1:]]
        a2, b2 = cls(*changed), real(*changed)
        assert (a == a2) is (b == b2) and (a != a2) is (b != b2)
        assert (hash(a) == hash(a2)) is (hash(b) == hash(b2))
        assert dataclasses.replace(a, **{name: others[i]}) == a2
        if name != "node":  # nodes.replace's own parameter (transpile/builtins.Builtin has such a field)
            assert N.replace(a, **{name: others[i]}) == a2
    for name in [*names, "not_a_field"]:
        assert _outcome(setattr, a, name, 1) == _outcome(setattr, b, name, 1)
        assert _outcome(delattr, a, name) == _outcome(delattr, b, name)
        assert _outcome(setattr, a, name, 1)[0] is FrozenInstanceError
    bad_calls: list[tuple[tuple, dict]] = [
        ((), {}), (tuple(values[:max(len(required) - 1, 0)]), {}),   # missing
        (tuple(values), {"not_a_field": 1}),                          # unexpected keyword
        ((*values, "extra"), {}), ((*values, "extra", "more"), {}),   # too many positional
    ]
    if names:
        bad_calls.append((tuple(values), {names[0]: 1}))              # duplicate
        bad_calls.append(((), {names[-1]: 1}))                        # missing, the last given by name
    for args, kwargs in bad_calls:
        assert _outcome(cls, *args, **kwargs) == _outcome(real, *args, **kwargs), (args, kwargs)


@pytest.mark.parametrize("cls", IR_NODES, ids=lambda c: f"{c.__module__.removeprefix('tessera.')}.{c.__qualname__}")
def test_ir_node_classes_behave_like_frozen_dataclasses(cls: type) -> None:
    check_like_twin(cls)


@ir_node
class Plain:
    a: int
    b: str = "b"


@ir_node
class Flags:
    """Fields with factories and compare/repr/hash flags."""

    a: int
    hidden: int = dataclasses.field(default=0, repr=False)
    ignored: int = dataclasses.field(default=0, compare=False)
    unhashed: int = dataclasses.field(default=0, hash=False)
    listed: list = dataclasses.field(default_factory=list, hash=False)
    made: tuple = dataclasses.field(default_factory=tuple, compare=False, hash=True)


@ir_node
class Empty:
    pass


@ir_node
class One:
    x: float


@pytest.mark.parametrize("cls", [Plain, Flags, Empty, One], ids=lambda c: c.__name__)
def test_options_it_supports_behave_like_the_stdlib(cls: type) -> None:
    check_like_twin(cls)


def test_factories_make_a_value_per_instance() -> None:
    a, b = Flags(1), Flags(1)
    assert a.listed == [] and a.listed is not b.listed
    assert Flags(1, 2, 3, 4, [5], (6,)).listed == [5]
    assert a == Flags(1, ignored=5) and a != Flags(1, hidden=5)
    assert "hidden" not in repr(a)


def test_docstrings_and_method_names() -> None:
    assert Plain.__doc__ == "Plain(a, b='b')"
    assert Flags.__doc__ == "Fields with factories and compare/repr/hash flags."
    assert Plain.__init__.__qualname__ == "Plain.__init__" and Plain.__eq__.__qualname__ == "Plain.__eq__"


def test_argument_errors() -> None:
    with pytest.raises(TypeError, match=r"^Plain.__init__\(\) missing 1 required positional argument: 'a'$"):
        Plain()
    with pytest.raises(TypeError, match=r"^Plain.__init__\(\) got an unexpected keyword argument 'c'$"):
        Plain(1, c=2)
    with pytest.raises(TypeError, match=r"^Plain.__init__\(\) got multiple values for argument 'a'$"):
        Plain(1, a=2)
    with pytest.raises(TypeError, match=r"^Plain.__init__\(\) takes from 2 to 3 positional arguments but 4 were given$"):
        Plain(1, "b", 3)
    with pytest.raises(TypeError, match=r"missing 3 required positional arguments: 'loc', 'op', and 'left'$"):
        N.BinOp(right=N.IntLit(Loc(1, 1), 1))


def test_frozen() -> None:
    p = Plain(1)
    with pytest.raises(FrozenInstanceError, match="^cannot assign to field 'a'$"):
        p.a = 2
    with pytest.raises(FrozenInstanceError, match="^cannot delete field 'b'$"):
        del p.b
    assert p == Plain(1, "b") and hash(p) == hash((1, "b"))


# ---- what it refuses --------------------------------------------------------------------------------

# Class bodies ir_node refuses (undecorated).
class Slots:
    __slots__ = ("a",)
    a: int


class PostInit:
    a: int

    def __post_init__(self) -> None:
        pass


class OwnInit:
    a: int

    def __init__(self, a: int) -> None:
        pass


class OwnEq:
    a: int

    def __eq__(self, other: object) -> bool:
        return True


class FromIrNode(Plain):
    c: int


@dataclasses.dataclass(frozen=True)
class Stdlib:
    a: int


class FromStdlib(Stdlib):
    c: int


class WithClassVar:
    a: int
    K: ClassVar[int] = 1


class WithInitVar:
    a: int
    b: dataclasses.InitVar[int]


class KwOnly:
    a: int
    _: dataclasses.KW_ONLY
    b: int


class KwOnlyField:
    a: int = dataclasses.field(kw_only=True)


class NotInInit:
    a: int = dataclasses.field(default=0, init=False)


class DefaultFirst:
    a: int = 0
    b: int


@pytest.mark.parametrize("body", [Slots, PostInit, OwnInit, OwnEq, FromIrNode, FromStdlib, WithClassVar,
                                  WithInitVar, KwOnly, KwOnlyField, NotInInit, DefaultFirst],
                         ids=lambda c: c.__name__)
def test_unsupported_class_bodies_are_refused(body: type) -> None:
    with pytest.raises(TypeError):
        ir_node(body)


@pytest.mark.parametrize("option", ["order", "slots", "kw_only", "unsafe_hash", "frozen"])
def test_decorator_options_are_refused(option: str) -> None:
    with pytest.raises(TypeError):
        ir_node(**{option: True})


def test_mutable_defaults_are_refused_as_dataclass_refuses_them() -> None:
    with pytest.raises(ValueError, match="mutable default"):
        ir_node(type("M", (), {"__annotations__": {"a": "list"}, "a": []}))


# ---- the verifier ---------------------------------------------------------------------------------

def test_the_verifier_accepts_frozen_nodes_and_rejects_mutable_ones() -> None:
    frozen = dataclasses.dataclass(frozen=True)(type("Frozen", (), {"__annotations__": {"loc": "Loc"}}))
    mutable = dataclasses.dataclass(type("Mutable", (), {"__annotations__": {"loc": "Loc"}}))
    verify_ast(N.Module("t.tsr", (N.ConstDef(Loc(1, 1), "C", N.IntLit(Loc(1, 5), 1)),)), typed=False)
    verify_ast(N.Module("t.tsr", (frozen(Loc(1, 1)),)), typed=False)
    with pytest.raises(VerifyError, match="Mutable is not frozen"):
        verify_ast(N.Module("t.tsr", (mutable(Loc(1, 1)),)), typed=False)


# ---- no stdlib frozen dataclass where ir_node would do ---------------------------------------------

def _needs_the_stdlib(cls: type) -> bool:
    """Whether ir_node would refuse this stdlib frozen dataclass."""
    params = cls.__dataclass_params__
    fields = dataclasses.fields(cls)
    own = [m for m in ("__init__", "__eq__", "__hash__") if getattr(vars(cls).get(m), "__code__", None)
           and vars(cls)[m].__code__.co_filename != "<string>"]  # dataclasses compiles its methods from a string
    return bool(params.order or params.unsafe_hash or "__slots__" in vars(cls) or hasattr(cls, "__post_init__")
                or own or len(fields) != len(cls.__dataclass_fields__)
                or any(f.kw_only or not f.init for f in fields)
                or any(dataclasses.is_dataclass(b) for b in cls.__mro__[1:]))


def test_a_compile_imports_no_frozen_dataclass_that_ir_node_could_make() -> None:
    script = ("import json, sys; from tessera.transpile.driver import compile_source, load_source; "
              "compile_source(load_source(sys.argv[1])); "
              "print(json.dumps([m for m in sys.modules if m.startswith('tessera')]))")
    out = subprocess.run([sys.executable, "-c", script, str(ROOT / "samples" / "sgemm_pipelined.tsr")],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    compiled = [m for m in json.loads(out) if not m.startswith("tessera.runtime")]
    stdlib = [c for c in _classes(compiled) if dataclasses.is_dataclass(c) and not is_ir_node(c)
              and c.__dataclass_params__.frozen]
    assert Loc in stdlib  # order=True
    assert [c for c in stdlib if not _needs_the_stdlib(c)] == []
