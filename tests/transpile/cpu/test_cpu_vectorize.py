"""Region mode's streaming forms are loops the host compiler vectorizes (GCC's own report,
-fopt-info-vec-optimized, on the kernel unit as the CPU backend compiles it): a grid-stride and a
group-stride loop's lockstep passes (transpile/cpu/regions.py `lockstep_for`), a map kernel's whole
steps (emit/maps.py `_whole_step`) and an elementwise epilogue in a group-stride loop. The report
names the C line of each vectorized loop; the `.tsr` lines of the statements inside it (their
`// line N` comments) are what the tests look for."""

from __future__ import annotations

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


def vectorized_tsr_lines(src: str, tmp_path: Path) -> set[int]:
    """The .tsr lines of the statements inside the loops GCC reports as vectorized in the CPU
    backend's kernel unit for `src` (region mode)."""
    result = compile_source(SourceFile(path="k.tsr", text=src), options=CompileOptions(cpu_regions=True))
    unit = tmp_path / "unit.cpp"
    unit.write_text(unit_source(result.cuda, result.kernels))
    report = tmp_path / "vec.txt"
    cmd = kernel_command(find_cxx(), unit, tmp_path / "unit.o", stub_headers(tmp_path / "stubs"),
                         (f"-fopt-info-vec-optimized={report}",))
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = unit.read_text().split("\n")
    out: set[int] = set()
    for m in re.finditer(r"unit\.cpp:(\d+):\d+: optimized: loop vectorized", report.read_text()):
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
