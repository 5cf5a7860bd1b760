"""The autotuner on the CPU backend (spec section 9): tuning picks a valid configuration and writes
the per-architecture cache; another process reuses it without compiling candidates; save/load;
records that do not fit are dropped with a warning; nearby keys reuse their neighbour; adding a
candidate keeps the other records; bad cache files warn and never crash; `tesserac tune`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera import autotune
from tessera.autotune.record import Record
from tessera.autotune.store import AutotuneWarning, TuneStore, render
from tessera.cli.tune import run as tune_run

ACCUM = """\
@autotune(BLOCK=[32, 64, 128], key=[n])
@kernel tile[(BLOCK,)]
def accum(x: f32[n], out: mut f32[n], BLOCK: const i32 = 64):
    i = global_linear_id()
    if i < n:
        out[i] += x[i]
"""


def grid(n: int):
    return lambda c: (n + c["BLOCK"] - 1) // c["BLOCK"]


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A private cache folder and a fresh record store and settings for each test."""
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(autotune, "_store", TuneStore())
    monkeypatch.setattr(autotune, "_settings", dict(autotune._settings))
    monkeypatch.setattr(autotune, "_memo", {})
    return tmp_path


def _launch(mod, n: int = 1000, **kw) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(n, dtype=np.float32)
    out = np.ones(n, np.float32)
    mod.accum(x, out, grid=grid(n), **kw)
    return x, out


def _cache_file(root: Path, arch: str = "sm_90") -> Path:
    return root / "cache" / "autotune" / "v1" / f"{arch}.json"


def _records(root: Path, arch: str = "sm_90") -> list[dict]:
    return json.loads(_cache_file(root, arch).read_text())["records"]


def test_tuning_picks_a_valid_configuration_and_writes_the_cache(fresh) -> None:
    mod = tessera.compile(ACCUM, backend="cpu")
    before = autotune.stats().get("candidate_compiles", 0)
    x, out = _launch(mod)
    np.testing.assert_array_equal(out, x + 1)  # applied once
    assert autotune.stats()["candidate_compiles"] - before == 3
    recs = _records(fresh)
    assert sorted(r["config"]["BLOCK"] for r in recs) == [32, 64, 128]
    assert all(r["key"] == {"n": 1000} and r["dtypes"] == {"x": "f32", "out": "f32"} for r in recs)
    assert all(r["model"]["time_us"] > 0 and r["resources"]["registers"] > 0 for r in recs)
    text = autotune.explain(mod.accum, n=1000)
    assert "from the autotuning cache, tuned for this key, the cost model's first choice" in text
    assert "3 of 3 candidates have records, 0 pruned" in text


def test_a_second_process_reuses_the_record_without_compiling_candidates(fresh) -> None:
    _launch(tessera.compile(ACCUM, backend="cpu"))
    script = f"""
import numpy as np, tessera, tessera.transpile.driver as C
compiled = []
real = C.compile_variant
C.compile_variant = lambda *a, **k: compiled.append(k.get("variants")) or real(*a, **k)
mod = tessera.compile({ACCUM!r}, backend="cpu")
x = np.arange(1000, dtype=np.float32); out = np.ones(1000, np.float32)
mod.accum(x, out, grid=lambda c: (1000 + c["BLOCK"] - 1) // c["BLOCK"])
assert (out == x + 1).all()
print(tessera.autotune.stats().get("candidate_compiles", 0), tessera.autotune.stats().get("cache_hits", 0),
      len([v for v in compiled if v]))
"""
    env = {**os.environ, "TESSERA_CACHE_DIR": str(fresh / "cache")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    candidates, hits, variants = map(int, done.stdout.split())
    assert (candidates, hits) == (0, 1)
    assert variants <= 1  # at most the chosen variant (its metadata may come from the compile cache)


def test_save_and_load_round_trip(fresh) -> None:
    mod = tessera.compile(ACCUM, backend="cpu")
    _launch(mod)
    path = str(fresh / "tuned.json")
    assert autotune.save_cache(path) == 3
    autotune.clear()
    assert not _cache_file(fresh).exists()
    assert "not tuned for this key" in autotune.explain(mod.accum, n=1000)
    assert autotune.load_cache(path) == 3
    assert "tuned for this key" in autotune.explain(mod.accum, n=1000)
    before = autotune.stats().get("candidate_compiles", 0)
    _launch(mod)
    assert autotune.stats().get("candidate_compiles", 0) == before


def _edited(path: Path, edit) -> None:
    doc = json.loads(path.read_text())
    recs = [Record.from_json(r) for r in doc["records"]]
    path.write_bytes(render([edit(r) for r in recs], doc["arch"] or None))


def test_a_record_that_does_not_fit_is_dropped_with_a_warning(fresh) -> None:
    mod = tessera.compile(ACCUM, backend="cpu")
    _launch(mod)
    path = fresh / "tuned.json"
    autotune.save_cache(str(path))
    # Claim 200 KB of shared memory on sm_80 (163 KB per group at most): dropped at load.
    _edited(path, lambda r: Record(**{**r.__dict__, "arch": "sm_80",
                                      "resources": (*[x for x in r.resources if x[0] != "shared"], ("shared", 200_000))}))
    autotune.clear()
    with pytest.warns(AutotuneWarning, match="does not fit sm_80: needs 200000 bytes of shared memory"):
        assert autotune.load_cache(str(path)) == 0


def test_a_record_that_disagrees_with_the_compiled_variant_is_never_launched(fresh) -> None:
    mod = tessera.compile(ACCUM, backend="cpu")
    _launch(mod)
    # A record whose figures lie about the group size: the launch re-checks, drops it and re-judges.
    _edited(_cache_file(fresh), lambda r: Record(**{**r.__dict__, "resources": tuple(
        (n, 1 if n == "tiles" else v) for n, v in r.resources)}))
    mod2 = tessera.compile(ACCUM, backend="cpu")
    autotune._store.clear(files=False)
    autotune._memo.clear()
    with pytest.warns(AutotuneWarning, match="disagree with the compiled variant"):
        x, out = _launch(mod2)
    np.testing.assert_array_equal(out, x + 1)
    # The launched record was judged again; the others are re-checked when they win.
    assert sum(r["resources"]["tiles"] == r["config"]["BLOCK"] for r in _records(fresh)) >= 1


def test_a_nearby_key_reuses_its_neighbour(fresh) -> None:
    mod = tessera.compile(ACCUM, backend="cpu")
    _launch(mod, 1000)
    before = autotune.stats().get("candidate_compiles", 0)
    assert "nearest tuned key n=1000" in autotune.explain(mod.accum, n=1500)
    x, out = _launch(mod, 1500)
    np.testing.assert_array_equal(out, x + 1)
    assert autotune.stats().get("candidate_compiles", 0) == before
    assert "not tuned for this key: the next launch tunes" in autotune.explain(mod.accum, n=2500)  # over 2x
    autotune.generalize(False)
    _launch(mod, 1200)
    assert autotune.stats().get("candidate_compiles", 0) == before + 3


def test_adding_a_candidate_keeps_the_other_records(fresh) -> None:
    _launch(tessera.compile(ACCUM, backend="cpu"))
    old = {json.dumps(r, sort_keys=True) for r in _records(fresh)}
    before = autotune.stats().get("candidate_compiles", 0)
    _launch(tessera.compile(ACCUM.replace("BLOCK=[32, 64, 128]", "BLOCK=[32, 64, 128, 256]"), backend="cpu"))
    assert autotune.stats().get("candidate_compiles", 0) == before + 1  # only the new one
    now = {json.dumps(r, sort_keys=True) for r in _records(fresh)}
    assert old < now and len(now) == 4


@pytest.mark.parametrize("content, message", [
    (b"\x00garbage{", "not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"format": "tessera-autotune", "version": 1, "records": {}, "sha256": ""}', "not a Tessera autotuning file"),
    (b'{"format": "tessera-autotune", "version": 1, "records": [1], "sha256": "0"}', "wrong checksum"),
    (b" " * (33 * 1024 * 1024), "over the limit"),
], ids=["garbage", "nested", "not-ours", "checksum", "huge"])  # short ids: pytest puts the id in the
# environment (PYTEST_CURRENT_TEST), and a 200 KB one makes every exec of the C++ compiler fail
def test_bad_cache_files_warn_and_never_crash(fresh, content: bytes, message: str) -> None:
    f = _cache_file(fresh)
    f.parent.mkdir(parents=True, mode=0o700)
    f.write_bytes(content)
    f.chmod(0o600)
    mod = tessera.compile(ACCUM, backend="cpu")
    with pytest.warns(AutotuneWarning, match=message):
        x, out = _launch(mod)
    np.testing.assert_array_equal(out, x + 1)
    assert len(_records(fresh)) == 3  # replaced by a good file


def test_wrongly_typed_records_are_dropped_with_a_warning(fresh) -> None:
    mod = tessera.compile(ACCUM, backend="cpu")
    _launch(mod)
    doc = json.loads(_cache_file(fresh).read_text())
    good = doc["records"][0]
    bad = [{**good, "key": {"n": "1000"}}, {**good, "config": {"BLOCK": [1]}}, {**good, "time_ms": float("nan")},
           {**good, "kernel": "x; rm -rf /"}, {**good, "extra": 1}, [], {**good, "dtypes": {"x": "f128"}}]
    items = [json.loads(json.dumps(b)) if not isinstance(b, dict) or b.get("time_ms") == b.get("time_ms") else b
             for b in bad]
    from tessera.autotune.store import checksum, parse_file

    raw = json.dumps({"format": "tessera-autotune", "version": 1, "arch": "sm_90", "sha256": checksum(items),
                      "records": items}).encode()
    with pytest.warns(AutotuneWarning, match="7 malformed record"):
        assert parse_file(raw, "test") == []


def test_measuring_on_the_cpu_times_on_copies(fresh) -> None:
    autotune.measure_on_cpu(True)
    autotune.enable(True, top_k=2)
    mod = tessera.compile(ACCUM, backend="cpu")
    x, out = _launch(mod)
    np.testing.assert_array_equal(out, x + 1)  # the timed launches ran on copies of `out`
    timed = [r for r in _records(fresh) if r["time_ms"] is not None]
    assert len(timed) == 2 and all(r["measured_on"] == "cpu" for r in timed)
    assert "measured" in autotune.explain(mod.accum, n=1000)


def test_caller_fixed_values_and_switches(fresh) -> None:
    mod = tessera.compile(ACCUM, backend="cpu")
    x, out = _launch(mod, BLOCK=32)  # every tuned axis fixed: nothing is tuned
    np.testing.assert_array_equal(out, x + 1)
    assert not _cache_file(fresh).exists()
    autotune.enable(False)
    _launch(mod)
    assert not _cache_file(fresh).exists()
    assert "autotuning is off" in autotune.explain(mod.accum, n=1000)
    with pytest.raises(tessera.TesseraError, match="takes True or False"):
        autotune.enable(1)  # type: ignore[arg-type]
    with pytest.raises(tessera.TesseraError, match="give the key value n"):
        autotune.explain(mod.accum)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(tessera.TesseraError, match="cannot read"):
            autotune.load_cache(str(fresh / "missing.json"))


def test_cli_tune_prints_candidates_pruning_and_ranking(fresh, tmp_path, capsys) -> None:
    src = tmp_path / "k.tsr"
    src.write_text(ACCUM.replace("BLOCK=[32, 64, 128]", "BLOCK=[32, 64, 128, 2048]"))
    code = tune_run([str(src), "--kernel", "accum", "--shape", "n=100000", "--arch", "sm_80",
                    "--grid", "(n + BLOCK - 1) // BLOCK"])
    out = capsys.readouterr().out
    assert code == 0
    assert "4 candidate(s) from @autotune(BLOCK=[32, 64, 128, 2048])" in out
    assert "pruned: 1 (tiles per group: 1)" in out and "BLOCK=2048: tiles per group:" in out
    assert "ranking by the cost model (3 survivor(s)" in out
    assert tune_run([str(src), "--kernel", "accum", "--shape", "n=10", "--grid", "__import__('os')"]) == 1
    assert "--grid" in capsys.readouterr().err
    assert tune_run([str(src), "--kernel", "nope", "--shape", "n=10"]) == 1
    assert "has no valid @autotune" in capsys.readouterr().err


@pytest.mark.gpu
def test_measuring_on_the_gpu_times_on_copies(fresh) -> None:
    mod = tessera.compile(ACCUM, backend="cuda")
    x, out = _launch(mod, 1 << 16)
    np.testing.assert_array_equal(out, x + 1)
    timed = [r for r in _records(fresh, mod.arch) if r["time_ms"] is not None]
    assert timed and all(r["measured_on"].startswith("cuda: ") for r in timed)
    # A second process finds the device's records in the cache: it compiles no candidate.
    code = ("import sys, numpy as np, tessera, tessera.autotune\n"
            "mod = tessera.compile(sys.argv[1], backend='cuda')\n"
            "x = np.arange(1 << 16, dtype=np.float32); out = np.ones(1 << 16, np.float32)\n"
            "mod.accum(x, out, grid=lambda c: ((1 << 16) + c['BLOCK'] - 1) // c['BLOCK'])\n"
            "assert (out == x + 1).all()\n"
            "s = tessera.autotune.stats()\n"
            "print(s.get('candidate_compiles', 0), s.get('cache_hits', 0))\n")
    env = {**os.environ, "TESSERA_CACHE_DIR": str(fresh / "cache")}
    done = subprocess.run([sys.executable, "-c", code, ACCUM], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert tuple(map(int, done.stdout.split())) == (0, 1)


_TUNER = """
import sys, numpy as np, tessera, tessera.autotune
from tests.conftest import ROOT
tessera.autotune.generalize(False)
mod = tessera.compile(sys.argv[1], backend="cpu")
for n in map(int, sys.argv[2:]):
    x = np.arange(n, dtype=np.float32); out = np.ones(n, np.float32)
    mod.accum(x, out, grid=lambda c: (n + c["BLOCK"] - 1) // c["BLOCK"])
    assert (out == x + 1).all()
"""


def test_concurrent_tuners_keep_every_record(fresh) -> None:
    """Two processes and two threads tune the same space for different keys into one cache at once:
    one valid file at the end, with every record of every key (none lost, none torn)."""
    import threading

    from tessera.autotune.store import parse_file

    env = {**os.environ, "TESSERA_CACHE_DIR": str(fresh / "cache")}
    keys = {"p1": [1000, 4100], "p2": [2000, 8300], "t1": [3000, 12500], "t2": [5000, 17000]}
    procs = [subprocess.Popen([sys.executable, "-c", _TUNER, ACCUM, *map(str, keys[p])], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in ("p1", "p2")]
    autotune.generalize(False)
    mod = tessera.compile(ACCUM, backend="cpu")
    errors: list[BaseException] = []

    def tune(sizes: list[int]) -> None:
        try:
            for n in sizes:
                x, out = _launch(mod, n)
                np.testing.assert_array_equal(out, x + 1)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
    threads = [threading.Thread(target=tune, args=(keys[t],)) for t in ("t1", "t2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert not errors, errors
    raw = _cache_file(fresh).read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn file or a malformed record would warn
        recs = parse_file(raw, "test")
    got = sorted((r.key[0][1], r.config[0][1]) for r in recs)
    assert got == sorted((n, b) for sizes in keys.values() for n in sizes for b in (32, 64, 128))
    assert [f.name for f in _cache_file(fresh).parent.iterdir() if ".tmp" in f.name] == []


GENERIC = """\
@autotune(BLOCK=[32, 64], key=[n])
@kernel tile[(BLOCK,)]
def copy[T: (f32, f16)](x: T[n], out: mut T[n], BLOCK: const i32 = 64):
    i = global_linear_id()
    if i < n:
        out[i] = x[i]
"""


def test_a_kernel_with_type_parameters_is_tuned_per_binding(fresh) -> None:
    # The re-check of the winning record compiles the variant the launch uses: with the launch's
    # type binding (it once compiled the generic kernel unbound, dropped every record and failed).
    mod = tessera.compile(GENERIC, backend="cpu")
    for dtype in (np.float32, np.float16):
        x = np.arange(100, dtype=dtype)
        out = np.zeros_like(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error", AutotuneWarning)
            mod.copy(x, out, grid=lambda c: (100 + c["BLOCK"] - 1) // c["BLOCK"])
        assert (out == x).all()


def test_cli_tune_binds_a_generic_kernels_type_parameters_with_D(fresh, tmp_path, capsys) -> None:
    # It once refused -D T=f16 and, without it, failed with an internal compiler error (KeyError).
    src = tmp_path / "g.tsr"
    src.write_text(GENERIC)
    assert tune_run([str(src), "--kernel", "copy", "--shape", "n=1000", "--arch", "sm_80"]) == 1
    assert "bind the kernel's type parameters with -D: -D T=f32|f16" in capsys.readouterr().err
    assert tune_run([str(src), "--kernel", "copy", "--shape", "n=1000", "--arch", "sm_80", "-D", "T=f16"]) == 0
    assert "ranking by the cost model (2 survivor(s)" in capsys.readouterr().out
    assert tune_run([str(src), "--kernel", "copy", "--shape", "n=1000", "-D", "U=f16"]) == 1
    assert "-D U: tune fixes const parameters and binds type parameters only" in capsys.readouterr().err
