"""bench/attention_bench.py, the attention rows of bench/gpu_bench.py: without a GPU, the rows'
setup (B=4, H=16, N=4096, D=128 as the sample takes it, the grid, the kernel's NVRTC compile for
sm_80 and sm_90 with no warnings and no spills within the shared-memory limit, the configuration
on the CPU backend against NumPy), and a clean skip of the measurement."""

from __future__ import annotations

import pytest

from tests.conftest import load_script


def _bench():  # noqa: ANN202 - a module loaded by path
    return load_script("bench/attention_bench.py", "attention_bench")


def test_the_rows_are_the_issues_problem() -> None:
    rows = _bench().ROWS
    assert [r.causal for r in rows] == [False, True]
    for r in rows:
        assert r.shape == (64, 4096, 128) and r.grid() == (32, 64) and r.grid(100) == (1, 64)
        assert r.consts == {"T": "f16", "causal": int(r.causal), "HD": 128, "BM": 128, "BN": 64, "stages": 2,
                            "NT": 256}
        assert r.bm == 16 * (r.threads // 32)  # whole rows per warp: 16 rows a warp
    assert rows[1].flops == rows[0].flops / 2


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("causal", [False, True])
def test_the_rows_kernel_compiles_without_spills(arch: str, causal: bool) -> None:
    b = _bench()
    row = b.ROWS[int(causal)]
    info, nv = b.compile_row(row, arch)
    res = nv.kernel(info.c_name)
    assert nv.warnings == () and res.spill_stores == 0 and res.spill_loads == 0, res
    assert info.tile == (row.threads,) and info.dynamic_smem <= b.SMEM_LIMIT


@pytest.mark.parametrize("causal", [False, True])
def test_the_rows_configuration_matches_numpy_on_the_cpu_backend(causal: bool) -> None:
    b = _bench()
    assert b.run_cpu(b.ROWS[int(causal)], heads=1, n=150)


def test_the_measurement_skips_without_pytorch_cuda(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    b = _bench()
    monkeypatch.setattr(b, "torch_flash", lambda: None)
    recorded: list[object] = []
    b.bench_attention(object(), 1e12, 3, lambda *a: recorded.append(a))
    assert recorded == [] and "attention rows skipped" in capsys.readouterr().out
