"""The autotuner's NVRTC figures (tessera/autotune/search.py): a candidate's registers, spills and
static shared memory come from one NVRTC build per process and variant, whatever launch key the
kernel is tuned for (they do not depend on the shapes)."""

from __future__ import annotations

import numpy as np

import tessera
from tessera import autotune
from tessera.autotune import search
from tessera.autotune.store import TuneStore
from tessera.runtime.cuda import nvrtc
from tests.autotune.test_autotune import ACCUM, grid


def test_a_second_key_is_tuned_without_building_the_same_variants_again(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(autotune, "_store", TuneStore())
    monkeypatch.setattr(autotune, "_settings", dict(autotune._settings))
    monkeypatch.setattr(autotune, "_memo", {})
    monkeypatch.setattr(search, "_figures", {})
    built: list[str] = []
    real = nvrtc.compile_cuda

    def counting(source: str, **kw):  # type: ignore[no-untyped-def]
        built.append(kw["arch"])
        return real(source, **kw)

    monkeypatch.setattr(nvrtc, "compile_cuda", counting)
    autotune.generalize(False)  # the second key is tuned, not taken from its neighbour
    mod = tessera.compile(ACCUM, backend="cpu")
    before = autotune.stats().get("candidate_compiles", 0)
    for n in (1000, 100_000):
        x, out = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
        mod.accum(x, out, grid=grid(n))
        np.testing.assert_array_equal(out, x + 1)
    assert autotune.stats()["candidate_compiles"] - before == 6  # both keys judged every candidate
    assert built == ["sm_90"] * 3  # one NVRTC build per BLOCK
    text = autotune.explain(mod.accum, n=100_000)
    assert "3 of 3 candidates have records, 0 pruned" in text
