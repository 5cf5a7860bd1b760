"""The measuring tools of bench/vs_handwritten.py: the SASS loop finder (on made-up SASS and on a
small kernel with known loops), and the hand-written baselines in bench/handwritten/, which must
compile cleanly for sm_80 and sm_90 with the main loop the bench measures. And bench/gpu_bench.py's
map rows as far as they go without a GPU (its --dry-run, its table, its skip). No GPU needed."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.base.errors import TesseraError
from tessera.runtime.cuda import nvrtc, sass
from tests.conftest import ROOT, load_script

# Two functions; in `f`, loop .L_x_1 holds loop .L_x_2, which holds every FFMA; .L_x_4 holds one.
MADE_UP_SASS = """\
//--------------------- .text.f                  --------------------------
        .section        .text.f,"ax",@progbits
f:
        /*0000*/                   MOV R0, RZ ;
        /*0010*/               @P0 BRA `(.L_x_3) ;
.L_x_1:
        /*0020*/                   STG.E desc[UR4][R2.64], R0 ;
.L_x_2:
        /*0030*/                   LDG.E R4, desc[UR4][R6.64] ;
        /*0040*/                   FFMA R0, R4, R0, 1 ;
        /*0050*/               @P1 BRA `(.L_x_2) ;
        /*0060*/                   FFMA.FTZ R0, R4, R0, 2 ;
        /*0070*/               @P2 BRA `(.L_x_2) ;
        /*0080*/               @P3 BRA `(.L_x_1) ;
.L_x_3:
.L_x_4:
        /*0090*/                   FFMA R0, R0, R0, R0 ;
        /*00a0*/               @P4 BRA `(.L_x_4) ;
        /*00b0*/                   EXIT ;
.L_x_5:
        /*00c0*/                   BRA `(.L_x_5);
        /*00d0*/                   NOP;
//--------------------- .text.g                  --------------------------
        .section        .text.g,"ax",@progbits
g:
        /*0000*/                   EXIT ;
"""

# An outer loop (a store, no arithmetic) around an inner loop with two FFMAs and two loads a trip,
# then a loop with one FFMA: the main loop is the inner one.
KNOWN_LOOPS = r"""
extern "C" __global__ void known_loops(const float* __restrict__ x, float* __restrict__ y, int n, int reps) {
    float acc = 0.0f;
#pragma unroll 1
    for (int r = 0; r < reps; ++r) {
        y[r] = acc;
#pragma unroll 1
        for (int i = 0; i < n; ++i) acc = fmaf(fmaf(x[i], acc, x[n + i]), acc, 1.0f);
    }
#pragma unroll 1
    for (int i = 0; i < n; ++i) acc = fmaf(x[i], acc, 2.0f);
    y[reps] = acc;
}
"""

# bench/handwritten/FILE: its kernel and the FFMAs of one k-step (block tile x BK / threads).
HANDWRITTEN = [("matmul.cu", "matmul", 64 * 64 * 16 // 256),
               ("sgemm_pipelined.cu", "sgemm", 128 * 128 * 8 // 256)]
ARCHS = ["sm_80", "sm_90"]


def _compile(source: str, arch: str, name: str = "test.cu") -> tuple[nvrtc.NvrtcResult, str]:
    """NVRTC's result for `source` and the disassembly of its cubin."""
    if sass.find_nvdisasm() is None:
        pytest.skip("nvdisasm not found")
    result = nvrtc.compile_cuda(source, name=name, arch=arch)
    assert result.cubin is not None
    return result, sass.disassemble(result.cubin)


def test_function_sass_keeps_one_function() -> None:
    f = sass.function_sass(MADE_UP_SASS, "f")
    assert sass.instructions(f)[0] == "MOV" and sass.instructions(f)[-1] == "NOP"
    assert sass.instructions(sass.function_sass(MADE_UP_SASS, "g")) == ["EXIT"]
    with pytest.raises(KeyError, match="no function 'h'"):
        sass.function_sass(MADE_UP_SASS, "h")


def test_loops_span_label_to_last_branch_back() -> None:
    f = sass.function_sass(MADE_UP_SASS, "f")
    spans = {loop.label: loop.ops for loop in sass.loops(f)}
    assert list(spans) == [".L_x_1", ".L_x_2", ".L_x_4", ".L_x_5"]  # .L_x_3: a forward branch only
    assert spans[".L_x_1"] == ("STG.E", "LDG.E", "FFMA", "BRA", "FFMA.FTZ", "BRA", "BRA")
    assert spans[".L_x_2"] == ("LDG.E", "FFMA", "BRA", "FFMA.FTZ", "BRA")
    assert spans[".L_x_5"] == ("BRA",)


def test_main_loop_is_the_innermost_with_the_most_ffma() -> None:
    loop = sass.main_loop(sass.function_sass(MADE_UP_SASS, "f"))
    assert loop.label == ".L_x_2" and loop.count("FFMA") == 2 and len(loop.ops) == 5


def test_main_loop_of_equal_copies_is_the_shortest() -> None:
    twins = "\n".join([".L_x_1:", "/*0000*/ FFMA R0, R0, R0, R0 ;", "/*0010*/ IADD3 R1, R1, 1, RZ ;",
                       "/*0020*/ @P0 BRA `(.L_x_1) ;", ".L_x_2:", "/*0030*/ FFMA R0, R0, R0, R0 ;",
                       "/*0040*/ @P1 BRA `(.L_x_2) ;"])
    assert sass.main_loop(twins).label == ".L_x_2"


def test_main_loop_needs_the_opcode() -> None:
    with pytest.raises(TesseraError, match="no loop holds a FFMA"):
        sass.main_loop(sass.function_sass(MADE_UP_SASS, "g"))


def test_main_loop_of_a_kernel_with_known_loops() -> None:
    # One architecture: nvdisasm takes about half a second a cubin, and its output has the same form
    # for both (the hand-written kernels' test below runs the finder on sm_80 code as well).
    text = sass.function_sass(_compile(KNOWN_LOOPS, "sm_90")[1], "known_loops")
    loop = sass.main_loop(text)
    assert loop.count("FFMA") == 2 and loop.count("LDG") == 2 and loop.count("STG") == 0, loop.ops
    assert loop.ops[-1] == "BRA"
    outer = [other for other in sass.loops(text) if other.count("STG") and other.count("FFMA") == 2]
    assert outer and all(len(o.ops) > len(loop.ops) for o in outer)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(("file", "kernel", "ffma"), HANDWRITTEN)
def test_handwritten_compiles_cleanly(file: str, kernel: str, ffma: int, arch: str) -> None:
    result, text = _compile((ROOT / "bench" / "handwritten" / file).read_text(), arch, file)
    assert result.warnings == ()
    res = result.kernel(kernel)
    assert (res.spill_stores, res.spill_loads, res.stack_bytes) == (0, 0, 0)
    loop = sass.main_loop(sass.function_sass(text, kernel))
    assert loop.count("FFMA") == ffma


def _gpu_bench():
    """bench/gpu_bench.py as a module (bench/ is not a package), loaded once."""

    return load_script("bench/gpu_bench.py", "gpu_bench")


def test_gpu_bench_map_rows_bytes_and_arguments() -> None:
    gb = _gpu_bench()
    rows = {row.kernel: row for row in gb.MAP_ROWS}
    assert list(rows) == ["vadd_f32", "saxpy_f32", "vadd_f16", "saxpy_f16"] and gb.MAP_N == 2**28
    # read X, read Y, write Z (vector add) or Y (SAXPY): three arrays of n elements
    assert rows["vadd_f32"].bytes_moved(gb.MAP_N) == rows["saxpy_f32"].bytes_moved(gb.MAP_N) == 3 * 2**30
    assert rows["vadd_f16"].bytes_moved(gb.MAP_N) == rows["saxpy_f16"].bytes_moved(gb.MAP_N) == 3 * 2**29
    arrays = rows["saxpy_f16"].host_arrays(5, np.random.default_rng(0))
    assert rows["saxpy_f16"].args(arrays)[1:] == (arrays["X"], arrays["Y"]) and arrays["X"].dtype == np.float16
    assert np.array_equal(rows["saxpy_f16"].reference(arrays["X"], arrays["Y"])(),
                          rows["saxpy_f16"].expected(arrays))


def test_gpu_bench_map_row_format() -> None:
    gb = _gpu_bench()
    # 3 GB in 1 ms against a 3.3 TB/s peak: 3000 GB/s, 90.9%, the goal met; no reference: no ratio
    line = gb.format_map_row("vadd_f32", 1.0, 3 * 10**9, 3.3e12, None)
    assert line.split() == ["vadd_f32", "1.000", "3000.0", "90.9%", "met", "-", "-"]
    line = gb.format_map_row("saxpy_f16", 2.0, 3 * 10**9, 3.3e12, 1.0)
    assert line.split() == ["saxpy_f16", "2.000", "1500.0", "45.5%", "MISSED", "1.000", "2.00x"]
    assert gb.format_map_row("vector_add_scalar", 1.0, 10**9, 1e12, None, goal=False).split()[4] == "(compare)"
    assert len(gb.map_header(None)) == len(line)


@pytest.mark.usefixtures("shared_cache")
def test_gpu_bench_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    """The map rows without a GPU: the full-size launch as the CUDA backend binds it (derived grid,
    16-byte variant), and each kernel on the CPU backend against NumPy."""
    gb = _gpu_bench()
    assert gb.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out
    for kernel, grid in [("vadd_f32", 2**28 // 1024), ("saxpy_f32", 2**28 // 1024),
                         ("vadd_f16", 2**28 // 2048), ("saxpy_f16", 2**28 // 2048)]:
        assert f"grid {grid} x 256 threads" in out.split(f"ok     {kernel} ")[1].splitlines()[0]
        assert f"variant {kernel}_a16;" in out
    assert "ok     vector_add_scalar" in out
    # The vector-access rows (issue 26): full-size launches bound, the cases of samples/runner.py on the CPU.
    for kernel, variant in [("gelu_bf16", "gelu_bf16_a16"), ("layernorm_bf16", "layernorm_bf16_a16"),
                            ("bias_relu_f32", "bias_relu_f32_a16"), ("bias_row_gelu_bf16", "bias_row_gelu_bf16_a16")]:
        line = out.split(f"ok     {kernel} ")[1].splitlines()[0]
        assert f"variant {variant};" in line and f"{kernel}: matches NumPy" in line, line
    # The attention rows (issue 29, bench/attention_bench.py): grid, NVRTC compile, the CPU backend.
    for row in ("attention_full", "attention_causal"):
        line = out.split(f"ok     {row} ")[1].splitlines()[0]
        assert "grid 32 x 64 x 256 threads" in line and "0 spill bytes" in line and "matches NumPy" in line, line
    # The sm_90a rows (bench/hopper_bench.py): wgmma fed by swizzled bulk tensor copies.
    line = out.split("ok     hgemm_8192_sm90a ")[1].splitlines()[0]
    assert "wgmma used with swizzled bulk copies" in line and "matches NumPy" in line, line
    line = out.split("ok     attention_full_sm90a ")[1].splitlines()[0]
    assert "grid 32 x 64 x 256 threads" in line and "0 spill bytes" in line and "wgmma with swizzled" in line \
        and "(arch sm_90a) at N=200 matches NumPy" in line, line


@pytest.mark.usefixtures("shared_cache")
def test_gpu_bench_vector_rows_on_the_cpu_backend(capsys: pytest.CaptureFixture[str]) -> None:
    """bench_vector_rows' loop (arrays, launches, the table) on the CPU backend at 40 x 48."""
    from types import SimpleNamespace

    import tessera

    gb = _gpu_bench()
    cpu = SimpleNamespace(load=lambda path, backend: tessera.load(path, backend="cpu"))
    gb.bench_vector_rows(cpu, 1e12, 2, n=40, c=48)
    lines = capsys.readouterr().out.splitlines()
    assert "at 40 x 48" in lines[1] and lines[2].split()[0] == "kernel"
    assert [line.split()[0] for line in lines[3:]] == ["gelu_bf16", "layernorm_bf16", "bias_relu_f32",
                                                        "bias_row_gelu_bf16"]


@pytest.mark.usefixtures("shared_cache")
def test_gpu_bench_map_table_on_the_cpu_backend(capsys: pytest.CaptureFixture[str]) -> None:
    """bench_map's loop (arrays, launches without a grid, the scalar comparison row, the table) with
    every module on the CPU backend, at 2^12 elements."""
    from types import SimpleNamespace

    import tessera

    gb = _gpu_bench()
    cpu = SimpleNamespace(load=lambda path, backend: tessera.load(path, backend="cpu"),
                          compile=lambda source, backend: tessera.compile(source, backend="cpu"))
    gb.bench_map(cpu, 1e12, 2, n=2**12)
    lines = capsys.readouterr().out.splitlines()
    assert "at 2^12 elements" in lines[1] and lines[2].split()[0] == "kernel"
    assert [line.split()[0] for line in lines[3:]] == ["vadd_f32", "vector_add_scalar", "saxpy_f32", "vadd_f16",
                                                        "saxpy_f16"]


def test_gpu_bench_skips_without_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    from tessera.runtime.devices import cuda_status

    if cuda_status()[0]:
        pytest.skip("a GPU is present: the bench would run")
    assert _gpu_bench().main([]) == 0
    assert capsys.readouterr().out.startswith("skipped: ")
