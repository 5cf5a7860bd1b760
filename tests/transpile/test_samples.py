"""Every sample: transpiles, matches its golden .cu byte for byte, is deterministic across
processes and hash seeds, and compiles with NVRTC for every supported architecture with no
warnings and no spills."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tessera.base.errors import CompileError
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source, load_source
from tessera.transpile.emit.header_parts import SECTIONS
from tessera.transpile.lir.shared_layout import arch_number, shared_layout
from tessera.transpile.render import device_header
from tests.conftest import ROOT, SAMPLES

GOLDEN = ROOT / "tests" / "golden"
ARCHS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100")
IDS = [p.stem for p in SAMPLES]


def test_the_seed_sample_is_there_as_written() -> None:
    text = (ROOT / "samples" / "sum_reduce.tsr").read_text()
    assert "@kernel tile[(128,)] shared(16_KiB)\ndef sum_reduce(x: f32[n], out: mut f32[grid_groups]):" in text
    assert "        if i < s: smem[i] += smem[i + s]\n" in text


def _without_header(cuda: str) -> str:
    """The emitted file with the device header sections it includes (listed in its third line)
    replaced by one marker naming their files, so that the golden files hold what differs per
    program and show which sections it uses."""
    listed = re.search(r"^// Device header sections: (.+)$", cuda, re.MULTILINE)
    assert listed is not None
    names = listed.group(1).split(", ")
    header = device_header(names)
    assert header in cuda
    files = ", ".join(s.file for s in SECTIONS if s.name in names)
    return cuda.replace(header, f"// <inlined here: {files}>\n")


@pytest.mark.parametrize("path", SAMPLES, ids=IDS)
def test_golden(path, update_golden: bool) -> None:
    cuda = _without_header(compile_source(load_source(str(path.relative_to(ROOT)))).cuda)
    golden = GOLDEN / (path.stem + ".cu")
    if update_golden:
        golden.write_text(cuda)
    assert golden.exists(), f"no golden file for {path.name}; run pytest --update-golden"
    assert cuda == golden.read_text(), f"{path.name}: emitted CUDA C differs from {golden.name}"


@pytest.mark.parametrize("seed", ["0", "12345"])
def test_deterministic_across_processes(seed: str, tmp_path) -> None:
    outs = []
    for s in (seed, "987"):
        out = tmp_path / f"out{s}.cu"
        env = dict(os.environ, PYTHONHASHSEED=s)
        subprocess.run([sys.executable, "-m", "tessera", "samples/matmul.tsr", "-o", str(out)], cwd=ROOT,
                       env=env, check=True)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("path", SAMPLES, ids=IDS)
def test_nvrtc_compiles_without_warnings_or_spills(path, arch: str) -> None:
    if "tfrag(" in path.read_text() and arch_number(arch) < 80:  # tensor cores: a compile error below sm_80
        with pytest.raises(CompileError, match="need sm_80 or newer"):
            compile_source(load_source(str(path)), options=CompileOptions(arch=arch))
        return
    result = compile_source(load_source(str(path)), options=CompileOptions(arch=arch))
    nv = compile_cuda(result.cuda, name=path.stem + ".cu", arch=arch)
    assert nv.warnings == (), nv.warnings
    for k in result.kernels:
        res = nv.kernel(k.c_name)
        assert res.registers > 0
        assert res.spill_stores == 0 and res.spill_loads == 0, (k.c_name, res)
        assert res.registers <= 255
        if k.dynamic_smem == 0:
            layout = shared_layout(result.module.kernels[0])
            assert res.shared_bytes >= layout.total_bytes


def test_statement_lines_are_in_comments() -> None:
    cuda = compile_source(load_source(str(ROOT / "samples" / "sum_reduce.tsr"))).cuda
    body = cuda[cuda.index("sum_reduce(const float*"):]
    for line in (3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16):
        assert f"// line {line}" in body
    assert "float acc = 0.0f;  // line 5" in body
    assert "atomicAdd(&out[tsr_group_linear_id()], smem[0]);  // line 16" in body


NVCC = shutil.which("nvcc")


NVCC_ARCHS = ("sm_80", "sm_90")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_nvcc_compiles_every_sample_without_warnings(tmp_path) -> None:
    """nvcc compiles every sample (and tests/programs/features.tsr) as emitted for each of NVCC_ARCHS, for
    that arch, without a warning. The C emitted for several archs that differs only in its first line (a
    comment naming the target) is one nvcc run with a -gencode per arch (the same as -arch=sm_XX for each):
    nvcc's host half (preprocessing, cudafe++ and the host compiler, more than half of a run) runs once."""
    paths = [*SAMPLES, ROOT / "tests" / "programs" / "features.tsr"]
    for path in paths:
        texts: dict[str, tuple[str, list[str]]] = {}  # the C after its first line -> (the C, its archs)
        for arch in NVCC_ARCHS:
            cuda = compile_source(load_source(str(path)), options=CompileOptions(arch=arch)).cuda
            texts.setdefault(cuda.split("\n", 1)[1], (cuda, []))[1].append(arch)
        for cuda, archs in texts.values():
            cu = tmp_path / (path.stem + ".cu")
            cu.write_text(cuda)
            gencode = [f"-gencode=arch=compute_{a[3:]},code=[{a},compute_{a[3:]}]" for a in archs]
            p = subprocess.run([NVCC, "-c", *gencode, "-o", str(tmp_path / "k.o"), str(cu)],
                               capture_output=True, text=True)
            assert p.returncode == 0 and "warning" not in (p.stdout + p.stderr).lower(), (path.name, archs, p.stderr)
