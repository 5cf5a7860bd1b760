"""The measuring tools of bench/vs_handwritten.py: the SASS loop finder (on made-up SASS and on a
small kernel with known loops), and the hand-written baselines in bench/handwritten/, which must
compile cleanly for sm_80 and sm_90 with the main loop the bench measures. No GPU needed."""

from __future__ import annotations

import pytest

from tessera.errors import TesseraError
from tessera.runtime import nvrtc, sass
from tests.conftest import ROOT

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
