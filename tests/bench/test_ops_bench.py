"""bench/ops_bench.py's CPU mode (what it prints without a GPU): every operator against NumPy,
with the static figures of the configuration it ran with. No GPU needed."""

from __future__ import annotations

from tessera import autotune
from tessera.autotune.store import TuneStore
from tests.conftest import ROOT, load_script


def test_cpu_mode_runs_every_operator(shared_cache, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TESSERA_BACKEND", "cpu")
    monkeypatch.setattr(autotune, "_store", TuneStore())
    monkeypatch.setattr(autotune, "_settings", dict(autotune._settings))
    monkeypatch.setattr(autotune, "_memo", {})
    bench = load_script("bench/ops_bench.py", "ops_bench")
    rows = bench.main(["--cpu", "--quick"])
    assert [r["op"] for r in rows] == list(bench.KERNELS)
    for r in rows:
        assert r["max_error"] < 0.05 and r["spills"] == 0 and r["registers"] > 0, r
    out = capsys.readouterr().out
    assert "static figures from NVRTC for sm_80" in out and "depthwise_conv2d" in out
    assert (ROOT / "docs" / "ops.md").read_text().count("bench/ops_bench.py") >= 1
