"""A kernel's autotuning search space (`@autotune`), as the runtime keeps it: read by
`transpile/passes/autotune_spec.py`, stored with a variant's metadata in the cache. Kept free of heavy
imports: a warm start reads it without the compiler."""

from __future__ import annotations

from tessera.base.irnode import ir_node

Value = int | float | bool


@ir_node
class TuneSpace:
    """A kernel's search space: per tuned const parameter its candidate values (in source order),
    the shape symbols of the key, per shape symbol where a launch finds it (parameter, axis), and
    the launch parameters in order (what a positional argument is)."""

    axes: tuple[tuple[str, tuple[Value, ...]], ...]
    key: tuple[str, ...]
    sources: tuple[tuple[str, str, int], ...]  # (symbol, tensor parameter, axis): every use of a shape symbol
    params: tuple[str, ...] = ()               # the non-const parameters, in order

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.axes)

    def to_json(self) -> dict:
        return {"axes": [[n, list(v)] for n, v in self.axes], "key": list(self.key),
                "sources": [list(s) for s in self.sources], "params": list(self.params)}

    @staticmethod
    def from_json(d: dict) -> TuneSpace:
        return TuneSpace(tuple((str(n), tuple(v)) for n, v in d["axes"]), tuple(map(str, d["key"])),
                         tuple((str(s), str(p), int(a)) for s, p, a in d["sources"]), tuple(map(str, d["params"])))
