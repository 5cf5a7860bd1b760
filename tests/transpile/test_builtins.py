"""The builtin table (transpile/builtins.py) is the one place that defines a builtin: every entry's
typing rule has exactly one implementation among the type checker's parts (and every implemented rule
is used), its printing rule exists, every C function it names exists for both backends, and every
builtin the language has is in it."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from tessera.base.errors import DiagnosticSink, Loc, SourceFile
from tessera.frontend import nodes as N
from tessera.transpile.builtins import BUILTINS, RESERVED, TABLE, Builtin, Coop, Vary
from tessera.transpile.checks.rules import Rule, rule_table
from tessera.transpile.checks.typecheck import FunctionChecker
from tessera.transpile.emit.exprs import CPrinter
from tessera.transpile.emit.header_parts import SECTIONS
from tessera.transpile.render import device_header
from tests.conftest import ROOT

HOST = "\n".join(p.read_text() for p in sorted((ROOT / "runtime" / "host").glob("*.h")))
DEVICE = device_header([s.name for s in SECTIONS])  # every section
# What the host's C library provides to the prelude (math.h, stdio.h) under the same name.
LIBC = {f + s for f in ("exp", "exp2", "log", "log2", "sqrt", "sin", "cos", "tanh", "erf", "floor", "ceil", "fabs",
                        "pow", "fma", "fmin", "fmax") for s in ("", "f")} | {"printf"}


# A type checker (of an empty device function): its parts that implement typing rules, and how many
# of them implement each rule.
CHECKER = FunctionChecker(DiagnosticSink(SourceFile("<test>", "")), {},
                          N.FuncDef(Loc(1, 1), "f", (), None, None, (), (), kind="device"))
IMPLEMENTED = Counter(rule for part in CHECKER.rule_parts for rule in part.rules())


@pytest.mark.parametrize("b", TABLE, ids=lambda b: b.name)
def test_every_entry_has_its_rules(b) -> None:
    assert IMPLEMENTED[b.rule] == 1, f"{b.name}: its typing rule {b.rule!r} has {IMPLEMENTED[b.rule]} implementations"
    assert callable(CHECKER.rules[b.rule]), b
    if b.node in ("intrinsic", "collective"):
        assert callable(getattr(CPrinter, "c_" + b.printer, None)), b
    assert b.doc, b


def test_every_typing_rule_is_used() -> None:
    assert set(IMPLEMENTED) - {b.rule for b in TABLE} == set()


class _Part:
    """A planted part that implements the typing rules `names`."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def rules(self) -> dict[str, Rule]:
        return {name: (lambda e, name: e) for name in self.names}


def test_the_rule_table_refuses_a_rule_implemented_twice_missing_or_unused() -> None:
    table = tuple(Builtin(name, rule, "intrinsic") for name, rule in (("a", "one"), ("b", "two"), ("c", "two")))
    assert set(rule_table([_Part("one"), _Part("two")], table)) == {"one", "two"}
    with pytest.raises(ValueError, match="'two' is implemented twice"):
        rule_table([_Part("one", "two"), _Part("two")], table)
    with pytest.raises(ValueError, match="no part implements the typing rule 'two'"):
        rule_table([_Part("one")], table)
    with pytest.raises(ValueError, match="no builtin uses the typing rule 'three'"):
        rule_table([_Part("one", "two", "three")], table)


@pytest.mark.parametrize("b", [b for b in TABLE if b.cuda], ids=lambda b: b.name)
def test_every_c_function_exists_on_both_backends(b) -> None:
    for name in filter(None, (b.cuda, b.cuda_f64, *b.also)):
        if name.startswith("tsr_"):
            assert re.search(rf"\b{name}\b", DEVICE), f"{name} is not in the device header"
        else:
            assert re.search(rf"\b{name}\b", HOST) or name in LIBC, f"{name} is not provided for the CPU backend"


def test_the_table_covers_the_language() -> None:
    spec = (ROOT.parent / "shared" / "spec" / "tsr-language.md")
    names = {"tile_linear_id", "tile_id", "group_linear_id", "group_id", "group_tile_count", "group_shape",
             "group_count", "global_linear_id", "grid_tile_count", "lane_id", "warp_id", "exp", "exp2", "log", "log2",
             "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "abs", "floor", "ceil", "pow", "fma", "min", "max",
             "tprint", "tassert", "tbarrier", "tfence", "tcopy", "warp_sum", "warp_max", "warp_min", "shfl",
             "shfl_xor", "shfl_down", "group_sum", "group_max", "group_min", "atomic_add", "atomic_sub",
             "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor", "atomic_exch", "atomic_cas",
             "warp_any", "warp_all", "warp_ballot", "shfl_up", "warp_cumsum", "group_cumsum", "atomic_inc",
             "atomic_dec",
             "popc", "clz", "ffs", "brev", "mulhi", "bitcast", "tmma", "tload", "tstore", "tmax", "tmin", "tsum",
             "row_index", "col_index"}
    assert names <= set(BUILTINS)
    assert {"grid_groups", "WARP_SIZE", "inf", "nan", "tshared", "tregs", "range", "static_range",
            "tpipeline", "tfrag"} <= RESERVED
    if spec.exists():
        assert all(f"`{n}" in spec.read_text() or n in spec.read_text() for n in names)


def test_cooperation_classes_and_tile_dependence() -> None:
    assert BUILTINS["tbarrier"].coop == Coop.GROUP and BUILTINS["group_sum"].coop == Coop.GROUP
    assert BUILTINS["shfl"].coop == Coop.WARP and BUILTINS["warp_sum"].result == Vary.WARP
    assert BUILTINS["lane_id"].result == Vary.LANE and BUILTINS["group_id"].result == Vary.UNIFORM
    assert BUILTINS["atomic_add"].result == Vary.LANE and BUILTINS["atomic_add"].coop == Coop.NONE
    assert all(BUILTINS[n].coop == Coop.WARP for n in ("warp_any", "warp_all", "warp_ballot", "shfl_up", "warp_cumsum"))
    assert BUILTINS["warp_ballot"].result == Vary.WARP and BUILTINS["warp_cumsum"].result == Vary.LANE
    assert BUILTINS["group_cumsum"].coop == Coop.GROUP and BUILTINS["group_cumsum"].result == Vary.LANE
    assert all(BUILTINS[n].coop == Coop.GROUP for n in ("tmma", "tload", "tstore"))
