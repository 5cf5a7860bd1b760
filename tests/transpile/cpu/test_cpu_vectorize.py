"""Region mode's streaming forms are loops the host compiler vectorizes (GCC's own report,
-fopt-info-vec-optimized, on the kernel unit as the CPU backend compiles it): a grid-stride and a
group-stride loop's lockstep passes (transpile/cpu/regions.py `lockstep_for`), a map kernel's whole
steps (emit/maps.py `_whole_step`) and an elementwise epilogue in a group-stride loop. The report
names the C line of each vectorized loop; the `.tsr` lines of the statements inside it (their
`// line N` comments) are what the tests look for."""

from __future__ import annotations

import platform
import re
import subprocess
from pathlib import Path

import pytest

from tessera.base.options import CompileOptions
from tessera.runtime.host.build import find_cxx, kernel_command, stub_headers
from tessera.runtime.host.library import unit_source
from tessera.transpile.driver import SourceFile, compile_source
from tests.conftest import ROOT


def _is_gcc() -> bool:
    try:
        out = subprocess.run([*find_cxx(), "--version"], capture_output=True, text=True).stdout
    except OSError:
        return False
    return "Free Software Foundation" in out and "clang" not in out


pytestmark = pytest.mark.skipif(not _is_gcc(), reason="reads GCC's vectorization report")

# The kernels of bench/cpu_streaming.py (bench/kernels/): their first line a comment, their lines as numbered here.
KERNELS = ROOT / "bench" / "kernels"
REDUCE = (KERNELS / "block_reduce.tsr").read_text()

LAYERNORM = (KERNELS / "layernorm.tsr").read_text()

MAP = """
@kernel tile[(256,)] vectorize(4)
def saxpy(alpha: f32, X: f32[n], Y: mut f32[n]):
    Y[:] = alpha * X + Y

@kernel tile[(128,)]
def scale(x: f32[n], y: mut f32[n], a: f32):
    for j in range(global_linear_id(), n, grid_tile_count()):
        y[j] = x[j] * a + 1.0
"""


def vectorized_tsr_lines(src: str, tmp_path: Path, vector_bytes: int | None = None) -> set[int]:
    """The .tsr lines of the statements inside the loops GCC reports as vectorized in the CPU
    backend's kernel unit for `src` (region mode); with `vector_bytes`, only loops vectorized with
    vectors of that size."""
    result = compile_source(SourceFile(path="k.tsr", text=src), options=CompileOptions(cpu_regions=True))
    tmp_path.mkdir(parents=True, exist_ok=True)
    unit = tmp_path / "unit.cpp"
    unit.write_text(unit_source(result.cuda, result.kernels))
    report = tmp_path / "vec.txt"
    cmd = kernel_command(find_cxx(), unit, tmp_path / "unit.o", stub_headers(tmp_path / "stubs"),
                         (f"-fopt-info-vec-optimized={report}",))
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = unit.read_text().split("\n")
    out: set[int] = set()
    for m in re.finditer(r"unit\.cpp:(\d+):\d+: optimized: loop vectorized using (\d+) byte", report.read_text()):
        if vector_bytes is not None and int(m.group(2)) != vector_bytes:
            continue
        first = int(m.group(1)) - 1
        depth = 0
        for text in lines[first:]:  # the loop's lines, to its closing brace
            out |= {int(n) for n in re.findall(r"// line (\d+)", text)}
            depth += text.count("{") - text.count("}")
            if depth <= 0 and "}" in text:
                break
    return out


def test_grid_stride_load(tmp_path: Path) -> None:
    assert 8 in vectorized_tsr_lines(REDUCE, tmp_path)  # acc += x[k]


def test_group_stride_load_and_elementwise_epilogue(tmp_path: Path) -> None:
    found = vectorized_tsr_lines(LAYERNORM, tmp_path)
    assert {9, 21, 22} <= found  # s += x[row, c]; the variance's d = x[row, c1] - mean, v += d * d
    assert 32 in found  # y[row, c2] = (x[row, c2] - mean) * inv


def test_map_kernel_and_elementwise_stride_loop(tmp_path: Path) -> None:
    found = vectorized_tsr_lines(MAP, tmp_path)
    assert 4 in found  # Y[:] = alpha * X + Y
    assert 9 in found  # y[j] = x[j] * a + 1.0


GELU = (KERNELS / "bias_gelu.tsr").read_text()


def test_a_map_kernel_calling_tanh(tmp_path: Path) -> None:
    """tanhf is the prelude's own straight-line code (host/host_libm.h), not a call into the C
    library, which kept the whole-step loop of a GELU from vectorizing."""
    assert 5 in vectorized_tsr_lines(GELU, tmp_path)


x86_64 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the AVX2 clones are x86-64's")


@x86_64
def test_region_kernels_have_an_avx2_clone(tmp_path: Path) -> None:
    """A region-mode kernel is compiled twice (TSR_VECTOR_CLONES, runtime/host/tessera_host.h): its
    AVX2 clone vectorizes with 32-byte vectors -- GELU's tanh, computed in double, 4 lanes instead
    of 2, and the reduction's pass over the group's tiles 8 floats an instruction -- and the
    baseline clone, with 16-byte ones, is still there for a CPU without AVX2."""
    assert 5 in vectorized_tsr_lines(GELU, tmp_path / "gelu", 32)
    assert 5 in vectorized_tsr_lines(GELU, tmp_path / "gelu16", 16)
    assert 8 in vectorized_tsr_lines(REDUCE, tmp_path / "reduce", 32)
    assert {9, 21, 22, 32} <= vectorized_tsr_lines(LAYERNORM, tmp_path / "layernorm", 32)
    from tests.transpile.cpu.test_cpu_prefetch import MATH  # whose clones compute the same bits
    assert 4 in vectorized_tsr_lines(MATH, tmp_path / "math", 32)


def test_only_region_kernels_with_a_loop_are_compiled_twice() -> None:
    """A kernel without a loop has nothing the AVX2 clone would vectorize better: compiled once
    (the clone doubles a kernel's compile time); a fiber-mode kernel is compiled once too."""
    tiny = "@kernel tile[(32,)]\ndef tiny(x: f32[n], y: mut f32[n]):\n    g = global_linear_id()\n" \
           "    if g < n:\n        y[g] = x[g] + 1.0\n"
    c = compile_source(SourceFile(path="k.tsr", text=tiny + REDUCE), options=CompileOptions(cpu_regions=True)).cuda
    assert "\ntiny(" in c and "TSR_VECTOR_CLONES block_reduce(" in c and c.count("TSR_HIDE_CLONES(") == 1
    assert "TSR_VECTOR_CLONES" not in compile_source(SourceFile(path="k.tsr", text=REDUCE),
                                                     options=CompileOptions(cpu_regions=False)).cuda


@x86_64
@pytest.mark.parametrize("libc", ["glibc", "none"])
def test_clones_only_where_the_c_library_has_ifunc(tmp_path: Path, libc: str) -> None:
    """The clones need ifunc, which glibc has and musl has not: the prelude asks for a header only
    glibc ships. Without any C library's headers (-nostdinc, as on a host whose library has no
    such header) TSR_VECTOR_CLONES is empty, so a cloned kernel still compiles there."""
    src = tmp_path / "probe.cpp"
    src.write_text('#include "tessera_host.h"\nclones=[TSR_VECTOR_CLONES]\n')
    flags = ["-nostdinc"] if libc == "none" else []
    out = subprocess.run([*find_cxx(), "-E", "-P", "-std=c++17", *flags, "-DTESSERA_HOST",
                          "-I", str(ROOT / "runtime" / "host"), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("clones="))
    assert line == ('clones=[]' if libc == "none" else 'clones=[__attribute__((target_clones("avx2", "default")))]')


def test_fiber_mode_is_not_what_is_vectorized(tmp_path: Path) -> None:
    """The report is read right: the interleaved form without lockstep (a step that may be
    negative for some tile: here the stop differs per tile) is not vectorized."""
    src = REDUCE.replace("range(global_linear_id(), n,", "range(global_linear_id(), n - i,")
    assert 8 not in vectorized_tsr_lines(src, tmp_path)


def test_a_trees_halving_runs_once_per_level() -> None:
    """The tree's `h` is one C variable halved once per level after the tile loop
    (transpile/cpu/group_locals.py), not an array with an element per tile that each tile halves."""
    c = compile_source(SourceFile(path="k.tsr", text=LAYERNORM), options=CompileOptions(cpu_regions=True)).cuda
    assert "int h{};  // once per group" in c and "tsr_rgs_h" not in c
    assert re.search(r"\{  // the group's own locals, once\n.*\n *h /= 2;  // line 16", c)
    # read from shared memory between barriers where no tile writes it: one value for the group
    # (transpile/cpu/quiet.py), no longer a per-tile array
    assert "float mean{};  // once per group" in c and "tsr_rgs_mean" not in c
    assert "tsr_rgs_v" in c  # each tile's own sum of squares
