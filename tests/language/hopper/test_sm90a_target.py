"""The `sm_90a` target (spec section 16): asked for by `--arch sm_90a` and `arch="sm_90a"`, never a
default; NVRTC compiles for it (its cubin disassembles), it is part of the cache keys, and every
sample runs on the CPU backend for it with the results it gives for sm_80 and sm_90."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tessera
from samples.runner import CASES
from tessera.base.errors import TesseraError
from tessera.base.options import ARCHS, CompileOptions
from tessera.cli.compile import build_parser
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.cuda.sass import disassemble, find_nvdisasm
from tessera.transpile.driver import compile_source, load_source
from tests.conftest import ROOT, sample_of

pytestmark = pytest.mark.usefixtures("shared_cache")

VADD = ("@kernel tile[(64,)]\ndef vadd(x: f32[n], y: f32[n], out: mut f32[n]):\n    i = global_linear_id()\n"
        "    if i < n:\n        out[i] = x[i] + y[i]\n")


def test_sm_90a_is_a_target_and_sm_90_stays_the_default() -> None:
    assert "sm_90a" in ARCHS
    assert build_parser().get_default("arch") == "sm_90"
    assert CompileOptions().arch == "sm_90"
    assert build_parser().parse_args(["k.tsr", "--arch", "sm_90a"]).arch == "sm_90a"
    mod = tessera.compile(VADD, backend="cpu", arch="sm_90a")
    assert mod.arch == "sm_90a"
    assert tessera.compile(VADD, backend="cpu").arch == "sm_90"
    with pytest.raises(TesseraError, match="arch= must be one of .*sm_90a"):
        tessera.compile(VADD, backend="cpu", arch="sm_91a")


def test_the_target_is_in_the_cache_keys() -> None:
    a = CompileOptions(arch="sm_90").key()
    b = CompileOptions(arch="sm_90a").key()
    assert a != b and "sm_90a" in b


def test_the_cli_compiles_for_sm_90a(tmp_path) -> None:
    out = tmp_path / "k.cu"
    src = tmp_path / "k.tsr"
    src.write_text(VADD)
    p = subprocess.run([sys.executable, "-m", "tessera", str(src), "--arch", "sm_90a", "-o", str(out)],
                       cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "sm_90a" in out.read_text().splitlines()[0] + out.read_text().splitlines()[1]
    p = subprocess.run([sys.executable, "-m", "tessera", str(src), "--arch", "sm_90a", "--info"],
                       cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "vadd" in p.stdout


def test_nvrtc_compiles_for_sm_90a_and_nvdisasm_reads_it() -> None:
    cuda = compile_source(load_source(str(ROOT / "samples" / "matmul.tsr")), CompileOptions(arch="sm_90a")).cuda
    nv = compile_cuda(cuda, name="matmul.cu", arch="sm_90a")
    assert nv.arch == "sm_90a" and nv.cubin is not None and nv.warnings == ()
    assert ".target sm_90a" in nv.ptx
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm not found")
    assert "FFMA" in disassemble(nv.cubin)


def _run(name: str, arch: str) -> dict[str, np.ndarray]:
    case = CASES[name]()
    args = case.make(np.random.default_rng(3))
    case.launch(tessera.load(sample_of(name), backend="cpu", arch=arch)[name], args)
    return args


@pytest.mark.usefixtures("one_build_per_c")
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_sample_gives_the_same_results_for_sm_80_sm_90_and_sm_90a(name: str) -> None:
    case = CASES[name]()
    want = case.expect(case.make(np.random.default_rng(3)))
    results = {arch: _run(name, arch) for arch in ("sm_80", "sm_90", "sm_90a")}
    # Floating-point atomics add in whatever order the groups run: there the results agree within
    # the case's tolerance; everywhere else bit for bit.
    exact = "atomic_" not in Path(sample_of(name)).read_text()
    for param, expected in want.items():
        got = results["sm_90a"][param]
        assert np.allclose(got.astype(np.float64), expected.astype(np.float64), rtol=case.rtol, atol=case.atol)
        for arch in ("sm_80", "sm_90"):
            other = results[arch][param]
            same = np.array_equal(other, got, equal_nan=True) if exact else \
                np.allclose(other.astype(np.float64), got.astype(np.float64), rtol=case.rtol, atol=case.atol)
            assert same, (name, arch, param)
