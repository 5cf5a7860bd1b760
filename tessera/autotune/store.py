"""The autotuner's persistent records: one JSON file per architecture in the Tessera cache folder.

``<cache root>/autotune/v1/<arch>.json`` holds ``{"format", "version", "arch", "sha256",
"records"}``; `sha256` covers the canonical JSON of the records, so a torn or edited file is
noticed. Writes lock the folder (`cache_fs.Folder.lock`: other processes), hold a lock (other
threads), re-read the file, merge and move a new file into place (`write_atomic`), so
concurrent tuners never lose each other's records and readers never see half a file.

A file that is missing is empty; one that is too large, not JSON, too deeply nested, of the
wrong shape or with a wrong checksum is ignored with an `AutotuneWarning` (and replaced at the
next write); a record that fails validation (`tune_record`) or does not fit its architecture
(`fits`) is dropped with a warning. Nothing read here is ever launched without that check.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Iterable
from typing import Any

from tessera.autotune.arch import ARCH_TABLE, arch_spec
from tessera.autotune.model import Resources, prune_reason
from tessera.autotune.record import BadRecord, Record
from tessera.base.forksafe import ForkSafeLock

FORMAT = "tessera-autotune"
VERSION = 1
MAX_FILE_BYTES = 32 * 1024 * 1024
MAX_RECORDS = 200_000


class AutotuneWarning(UserWarning):
    """A problem with tuning records (a bad file, a record that does not fit); tuning goes on."""


def warn(message: str) -> None:
    warnings.warn(message, AutotuneWarning, stacklevel=3)


def resources_of(r: Record) -> Resources | None:
    res = dict(r.resources)
    if not {"tiles", "registers", "spill_bytes", "shared"} <= set(res):
        return None
    return Resources(res["tiles"], res["registers"], res["spill_bytes"], res["shared"])


def misfit(r: Record) -> str | None:
    """Why a record's configuration cannot run on its architecture, or None when it can (as far as
    its recorded resources tell: the launch re-checks the compiled variant)."""
    if r.pruned:
        return None  # a record of a pruned candidate is never launched
    res = resources_of(r)
    if res is None:
        return "it has no resource figures"
    why = prune_reason(arch_spec(r.arch), res)
    return None if why is None else why[1]


def parse_file(raw: bytes, where: str) -> list[Record]:
    """The valid records of a file's bytes, with a warning for each problem (never an exception)."""
    if len(raw) > MAX_FILE_BYTES:
        warn(f"autotuning cache {where} is {len(raw)} bytes, over the limit of {MAX_FILE_BYTES}; it is ignored")
        return []
    try:
        doc = json.loads(raw.decode("utf-8"))
    except RecursionError:
        warn(f"autotuning cache {where} is nested too deeply; it is ignored")
        return []
    except (ValueError, UnicodeDecodeError) as e:
        warn(f"autotuning cache {where} is not valid JSON ({str(e)[:80]}); it is ignored")
        return []
    if not (isinstance(doc, dict) and doc.get("format") == FORMAT and doc.get("version") == VERSION
            and isinstance(doc.get("records"), list) and isinstance(doc.get("sha256"), str)):
        warn(f"autotuning cache {where} is not a Tessera autotuning file (format {FORMAT!r}, version {VERSION}); "
             "it is ignored")
        return []
    items = doc["records"]
    if len(items) > MAX_RECORDS or checksum(items) != doc["sha256"]:
        warn(f"autotuning cache {where} has a wrong checksum or too many records (it was edited or torn); "
             "it is ignored")
        return []
    out: list[Record] = []
    bad: list[str] = []
    for item in items:
        try:
            rec = Record.from_json(item)
        except BadRecord as e:
            bad.append(str(e))
            continue
        why = misfit(rec)
        if why is not None:
            cfg = ", ".join(f"{n}={v}" for n, v in rec.config)
            warn(f"autotuning cache {where}: the record of {rec.kernel} ({cfg}) does not fit {rec.arch}: {why}; "
                 "it is dropped")
            continue
        out.append(rec)
    if bad:
        warn(f"autotuning cache {where}: {len(bad)} malformed record(s) dropped (first: {bad[0]})")
    return out


def checksum(items: Any) -> str:
    return hashlib.sha256(json.dumps(items, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def render(records: Iterable[Record], arch: str | None) -> bytes:
    items = sorted((r.to_json() for r in records), key=lambda d: json.dumps(d, sort_keys=True))
    doc = {"format": FORMAT, "version": VERSION, "arch": arch or "", "sha256": checksum(items), "records": items}
    return json.dumps(doc, sort_keys=True, indent=1).encode()


class TuneStore:
    """Records in memory, per architecture, backed by the per-architecture files (when `persist`)."""

    def __init__(self) -> None:
        self._lock = ForkSafeLock(reentrant=True)
        self._records: dict[str, dict[tuple, Record]] = {}
        self.persist = True

    def _folder(self) -> Any:
        from tessera.runtime.cache.disk import DiskCache

        return DiskCache("autotune").folder

    def _read(self, folder: Any, arch: str) -> list[Record]:
        try:
            fd, _ = folder.open_trusted(f"{arch}.json")
        except FileNotFoundError:
            return []
        except OSError as e:
            warn(f"autotuning cache {folder.path / (arch + '.json')} cannot be read ({e.strerror or e}); "
                 "it is ignored")
            return []
        try:
            raw = os.read(fd, MAX_FILE_BYTES + 1)
            while len(raw) <= MAX_FILE_BYTES and (more := os.read(fd, 1 << 20)):
                raw += more
        finally:
            os.close(fd)
        return parse_file(raw, str(folder.path / f"{arch}.json"))

    def records(self, arch: str) -> dict[tuple, Record]:
        """Every record of `arch` (its file read on first use)."""
        with self._lock:
            known = self._records.get(arch)
            if known is None:
                known = {}
                folder = self._folder() if self.persist else None
                if folder is not None:
                    known = {r.identity: r for r in self._read(folder, arch) if r.arch == arch}
                self._records[arch] = known
            return known

    def update(self, arch: str, add: Iterable[Record] = (), remove: Iterable[tuple] = ()) -> None:
        """Add (replace) and remove records of `arch`, in memory and in its file."""
        add, remove = list(add), set(remove)
        with self._lock:
            mine = self.records(arch)
            for ident in remove:
                mine.pop(ident, None)
            for r in add:
                mine[r.identity] = r
            folder = self._folder() if self.persist else None
            if folder is None:
                return
            try:
                with folder.lock():
                    merged = {r.identity: r for r in self._read(folder, arch) if r.arch == arch}
                    for ident in remove:
                        merged.pop(ident, None)
                    merged.update((r.identity, r) for r in add)
                    folder.write_atomic(f"{arch}.json", [render(merged.values(), arch)])
                    mine.update(merged)
            except OSError as e:
                warn(f"autotuning cache {folder.path} cannot be written ({e.strerror or e}); records are kept "
                     "in memory only")

    def export(self, path: str) -> int:
        """Write every record (of every architecture with a file or records in memory) to `path`."""
        with self._lock:
            for arch in ARCH_TABLE:
                self.records(arch)
            everything = [r for recs in self._records.values() for r in recs.values()]
        data = render(everything, None)
        tmp = f"{path}.tmp-{os.urandom(6).hex()}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return len(everything)

    def import_file(self, path: str) -> int:
        """Add the valid, fitting records of a file written by `export`; returns how many."""
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
        recs = parse_file(raw, repr(path))
        by_arch: dict[str, list[Record]] = {}
        for r in recs:
            by_arch.setdefault(r.arch, []).append(r)
        for arch, rs in by_arch.items():
            self.update(arch, rs)
        return len(recs)

    def clear(self, files: bool) -> None:
        with self._lock:
            self._records.clear()
            folder = self._folder() if files and self.persist else None
            if folder is not None:
                with folder.lock():
                    folder.unlink(*(f"{a}.json" for a in ARCH_TABLE))
