"""One autotuning record and its strict JSON form.

A record is what the tuner learnt about one configuration of one kernel for one key: its
identity (kernel source hash, kernel name, key values, element types, compiler fingerprint,
architecture, configuration) and its figures (resources, the cost model's estimate, a measured
time, or why it was pruned). Records come from files anyone may have edited: `from_json` accepts
only the exact shape written by `to_json`, with bounded strings and finite numbers, and raises
`BadRecord` (with the reason) for anything else. No pickle, no eval.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from tessera.autotune.arch import ARCH_TABLE
from tessera.base.dtypes import SCALARS

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
_HEX_RE = re.compile(r"[0-9a-f]{16,128}")
_TEXT_MAX = 1000
MAX_FIELDS = 64          # entries of a record's key, dtypes, config, resources or model


class BadRecord(ValueError):
    pass


Number = int | float | bool


@dataclass(frozen=True)
class Record:
    source: str                                   # sha256 of the module source without @autotune lines
    kernel: str
    key: tuple[tuple[str, int], ...]
    dtypes: tuple[tuple[str, str], ...]           # tensor parameter -> element type
    fingerprint: str
    arch: str
    config: tuple[tuple[str, Number], ...]
    resources: tuple[tuple[str, int], ...] = ()   # tiles, registers, spill_bytes, shared
    model: tuple[tuple[str, int | float | str], ...] = ()
    time_ms: float | None = None                  # measured, median
    measured_on: str = ""                         # "cuda: <device>" or "cpu" when measured
    pruned: str = ""                              # the rule and reason when pruned

    @property
    def identity(self) -> tuple:
        return (self.source, self.kernel, self.key, self.dtypes, self.fingerprint, self.arch, self.config)

    @property
    def group(self) -> tuple:
        """The identity less the configuration: the records one tuning of one key compares."""
        return (self.source, self.kernel, self.key, self.dtypes, self.fingerprint, self.arch)

    @property
    def estimate_us(self) -> float:
        v = dict(self.model).get("time_us")
        return float(v) if isinstance(v, (int, float)) else math.inf

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "kernel": self.kernel, "key": dict(self.key), "dtypes": dict(self.dtypes),
                "fingerprint": self.fingerprint, "arch": self.arch, "config": dict(self.config),
                "resources": dict(self.resources), "model": dict(self.model), "time_ms": self.time_ms,
                "measured_on": self.measured_on, "pruned": self.pruned}

    @staticmethod
    def from_json(d: Any) -> Record:
        if not isinstance(d, dict):
            raise BadRecord(f"a record is an object, not {type(d).__name__}")
        fields = {"source", "kernel", "key", "dtypes", "fingerprint", "arch", "config", "resources", "model",
                  "time_ms", "measured_on", "pruned"}
        if set(d) != fields:
            extra = sorted(set(d) - fields) or sorted(fields - set(d))
            raise BadRecord(f"a record has the fields {', '.join(sorted(fields))}; this one differs in {extra[0]!r}")
        source, fp = _text(d, "source", _HEX_RE), _text(d, "fingerprint", _HEX_RE)
        kernel = _text(d, "kernel", _NAME_RE)
        arch = _text(d, "arch")
        if arch not in ARCH_TABLE:
            raise BadRecord(f"unknown architecture {arch[:20]!r}")
        key = tuple((n, _int(v, "key value", 0, 2**31 - 1)) for n, v in _mapping(d, "key"))
        dtypes = tuple((n, _dtype(v)) for n, v in _mapping(d, "dtypes"))
        config = tuple((n, _number(v, "config value")) for n, v in _mapping(d, "config"))
        if not config:
            raise BadRecord("a record's config is empty")
        resources = tuple((n, _int(v, "resource", 0, 2**40)) for n, v in _mapping(d, "resources"))
        model = tuple((n, v if isinstance(v, str) and len(v) <= 64 else _figure(v)) for n, v in _mapping(d, "model"))
        t = d["time_ms"]
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0):
            raise BadRecord("time_ms is a finite number of milliseconds or null")
        return Record(source, kernel, key, dtypes, fp, arch, config, resources, model,
                      None if t is None else float(t), _text(d, "measured_on", allow_empty=True),
                      _text(d, "pruned", allow_empty=True))


def _text(d: dict, field: str, pattern: re.Pattern | None = None, allow_empty: bool = False) -> str:
    v = d[field]
    if not isinstance(v, str) or len(v) > _TEXT_MAX or (not v and not allow_empty):
        raise BadRecord(f"{field} is a string of at most {_TEXT_MAX} characters")
    if pattern is not None and not pattern.fullmatch(v):
        raise BadRecord(f"{field} {v[:20]!r} is malformed")
    if any(ord(c) < 32 for c in v):
        raise BadRecord(f"{field} has control characters")
    return v


def _mapping(d: dict, field: str) -> list[tuple[str, Any]]:
    v = d[field]
    if not isinstance(v, dict) or len(v) > MAX_FIELDS:
        raise BadRecord(f"{field} is an object of at most {MAX_FIELDS} entries")
    for name in v:
        if not _NAME_RE.fullmatch(name):
            raise BadRecord(f"{field} has a malformed name {name[:20]!r}")
    return sorted(v.items())


def _int(v: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise BadRecord(f"a {what} is an integer from {lo} to {hi}")
    return v


def _number(v: Any, what: str) -> Number:
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and -(2**63) <= v < 2**64:
        return v
    if isinstance(v, float) and math.isfinite(v):
        return v
    raise BadRecord(f"a {what} is a bool, a 64-bit integer or a finite float")


def _figure(v: Any) -> int | float:
    n = _number(v, "model figure")
    if isinstance(n, bool):
        raise BadRecord("a model figure is a number or a short string")
    return n


def _dtype(v: Any) -> str:
    if not isinstance(v, str) or v not in SCALARS:
        raise BadRecord("an element type is one of the scalar type names")
    return v
