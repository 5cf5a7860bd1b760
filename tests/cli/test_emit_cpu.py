"""`tesserac --emit cpu`: the C++ unit the CPU backend compiles, in region or fiber mode, with the
.tsr lines as comments, and a file the host compiler accepts as it is."""

from __future__ import annotations

import subprocess

import pytest

from tessera.cli.compile import run
from tessera.runtime.host.build import find_cxx, kernel_command, stub_headers
from tests.conftest import ROOT

REDUCE = str(ROOT / "samples" / "sum_reduce.tsr")


def test_region_mode_by_default(capsys, monkeypatch) -> None:
    monkeypatch.delenv("TESSERA_CPU_REGIONS", raising=False)
    assert run([REDUCE, "--emit", "cpu", "-o", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("// The C++ unit the CPU backend compiles")
    assert "// region mode (CPU backend)" in out and "tsr::launch_regions(" in out
    assert "static thread_local" in out  # per-tile state
    assert "// line " in out and "-include tessera_host.h" in out


@pytest.mark.parametrize("how", ["flag", "env"])
def test_fiber_mode(how: str, capsys, monkeypatch) -> None:
    args = [REDUCE, "--emit", "cpu", "-o", "-"]
    if how == "flag":
        monkeypatch.setenv("TESSERA_CPU_REGIONS", "1")
        args += ["--cpu-mode", "fibers"]
    else:
        monkeypatch.setenv("TESSERA_CPU_REGIONS", "0")
    assert run(args) == 0
    out = capsys.readouterr().out
    assert "region mode (CPU backend)" not in out and "tsr::launch(" in out and "__syncthreads();" in out


def test_the_cuda_c_is_unchanged(capsys) -> None:
    """--emit cuda keeps the GPU's C: region mode is only in the CPU unit."""
    assert run([REDUCE, "-o", "-"]) == 0
    assert "region mode" not in capsys.readouterr().out


def test_default_output_path(tmp_path) -> None:
    src = tmp_path / "k.tsr"
    src.write_text((ROOT / "samples" / "sum_reduce.tsr").read_text())
    assert run([str(src), "--emit", "cpu"]) == 0
    assert (tmp_path / "k.cpp").read_text().startswith("// The C++ unit")


def test_cpu_mode_needs_emit_cpu(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        run([REDUCE, "--cpu-mode", "fibers", "-o", "-"])
    assert e.value.code == 2
    assert "--cpu-mode goes with --emit cpu" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["regions", "fibers"])
def test_the_unit_compiles_as_written(mode: str, tmp_path) -> None:
    out = tmp_path / "matmul.cpp"
    assert run([str(ROOT / "samples" / "matmul.tsr"), "--emit", "cpu", "--cpu-mode", mode, "-o", str(out)]) == 0
    cmd = kernel_command(find_cxx(), out, tmp_path / "matmul.o", stub_headers(tmp_path / "stubs"))
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "tsr_launch_matmul_BM64_BN64" in out.read_text()
