"""NVRTC wrapper and SASS inspection; no GPU needed (NVRTC and nvdisasm run on the CPU)."""

from __future__ import annotations

import os

import pytest

from tessera.base.errors import CompileError, TesseraError
from tessera.runtime.cuda import nvrtc, sass

HALF_KERNEL = r"""
#include <cuda_fp16.h>
extern "C" __global__ void scale_half(__half* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __float2half(a * __half2float(x[i]));
}
"""

SHARED_KERNEL = r"""
extern "C" __global__ void reverse256(float* x) {
    __shared__ float s[256];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = s[255 - threadIdx.x];
}
"""

TWO_KERNELS = r"""
extern "C" __global__ void first(float* x) { x[threadIdx.x] += 1.0f; }
extern "C" __global__ void second(int* y) { y[threadIdx.x] *= 2; }
"""

CP_ASYNC_KERNEL = r"""
extern "C" __global__ void copy_async(const float4* __restrict__ g, float4* out) {
    __shared__ float4 s[128];
    unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(&s[threadIdx.x]));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(g + threadIdx.x));
    asm volatile("cp.async.wait_all;\n" ::);
    __syncthreads();
    out[threadIdx.x] = s[127 - threadIdx.x];
}
"""

FLOAT4_KERNEL = r"""
extern "C" __global__ void copy4(const float4* __restrict__ a, float4* __restrict__ b) {
    b[threadIdx.x] = a[threadIdx.x];
}
"""


def test_version_and_archs():
    major, minor = nvrtc.nvrtc_version()
    assert major >= 12 and minor >= 0
    archs = nvrtc.supported_archs()
    assert 80 in archs and 90 in archs
    assert list(archs) == sorted(archs)


def test_include_dirs_hold_fp16_header():
    dirs = nvrtc.cuda_include_dirs()
    assert dirs
    assert any(os.path.isfile(os.path.join(d, "cuda_fp16.h")) for d in dirs)
    assert any(os.path.isfile(os.path.join(d, "cuda_bf16.h")) for d in dirs)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_half_kernel_compiles(arch):
    r = nvrtc.compile_cuda(HALF_KERNEL, arch=arch)
    assert r.arch == arch
    assert r.cubin and r.cubin[:4] == b"\x7fELF"
    assert ".entry scale_half" in r.ptx
    k = r.kernel("scale_half")
    assert k.registers > 0
    assert (k.spill_stores, k.spill_loads, k.stack_bytes, k.shared_bytes) == (0, 0, 0, 0)


def test_ptx_only():
    r = nvrtc.compile_cuda(HALF_KERNEL, arch="sm_80", cubin=False)
    assert r.arch == "compute_80"
    assert r.cubin is None
    assert ".target sm_80" in r.ptx
    assert r.kernels == ()


def test_shared_bytes_reported():
    r = nvrtc.compile_cuda(SHARED_KERNEL, arch="sm_80")
    k = r.kernel("reverse256")
    assert k.shared_bytes == 1024
    assert k.registers > 0
    assert k.const_bytes > 0  # kernel parameters live in cmem[0] before sm_90


def test_two_kernels_reported():
    r = nvrtc.compile_cuda(TWO_KERNELS, arch="sm_90")
    assert {k.name for k in r.kernels} == {"first", "second"}
    assert all(k.registers > 0 for k in r.kernels)
    with pytest.raises(KeyError):
        r.kernel("third")


def test_spills_reported():
    src = r"""
    extern "C" __global__ void heavy(float* a) {
        float v[200];
        #pragma unroll
        for (int i = 0; i < 200; i++) v[i] = a[i * threadIdx.x];
        float s = 0.0f;
        #pragma unroll
        for (int i = 0; i < 200; i++) s += v[i] * v[199 - i] * a[i];
        a[threadIdx.x] = s;
    }
    """
    k = nvrtc.compile_cuda(src, arch="sm_80", options=["--maxrregcount=32"]).kernel("heavy")
    assert k.registers <= 32
    assert k.spill_stores > 0 and k.spill_loads > 0 and k.stack_bytes > 0


def test_syntax_error_raises_compile_error():
    src = 'extern "C" __global__ void broken(float* a) {\n    a[0] = 1.0f +;\n}\n'
    with pytest.raises(CompileError) as info:
        nvrtc.compile_cuda(src, name="broken.cu", arch="sm_80")
    text = info.value.text
    assert "broken.cu(2): error: expected an expression" in text
    assert "2 |     a[0] = 1.0f +;" in text
    assert "NVRTC_ERROR_COMPILATION" in text


def test_bad_option_raises_tessera_error():
    with pytest.raises(TesseraError, match="unrecognized option"):
        nvrtc.compile_cuda(TWO_KERNELS, options=["--no-such-option"])


@pytest.mark.parametrize("arch", ["sm90", "compute_90", "sm_9", "sm_90x", "SM_90", ""])
def test_bad_arch_string(arch):
    with pytest.raises(TesseraError, match="bad GPU architecture"):
        nvrtc.compile_cuda(TWO_KERNELS, arch=arch)


def test_unknown_arch_number():
    with pytest.raises(TesseraError, match="does not know sm_81"):
        nvrtc.compile_cuda(TWO_KERNELS, arch="sm_81")


def test_too_new_arch_falls_back_to_ptx():
    newest = max(nvrtc.supported_archs())
    r = nvrtc.compile_cuda(TWO_KERNELS, arch=f"sm_{newest + 100}")
    assert r.arch == f"compute_{newest}"
    assert r.cubin is None and r.kernels == ()
    assert ".entry first" in r.ptx
    assert any("emitted PTX" in w for w in r.warnings)


def test_warnings_collected():
    src = 'extern "C" __global__ void k(float* a) {\n    int unused = 3;\n    a[0] = 1.0f;\n}\n'
    r = nvrtc.compile_cuda(src, name="warn.cu", arch="sm_80")
    assert len(r.warnings) == 1
    assert r.warnings[0].startswith("warn.cu(2): warning")
    assert '"unused" was declared but never referenced' in r.warnings[0]
    assert nvrtc.compile_cuda(TWO_KERNELS, arch="sm_80").warnings == ()


def test_warning_directive_collected():
    r = nvrtc.compile_cuda('#warning tessera-test\n' + TWO_KERNELS, arch="sm_90")
    assert any("tessera-test" in w for w in r.warnings)
    # The indented echo of the source line is not counted as a second warning.
    assert len(r.warnings) == 1


def test_line_info():
    r = nvrtc.compile_cuda(TWO_KERNELS, arch="sm_80", line_info=True)
    assert ".loc" in r.ptx


def test_parse_ptxas_report_without_smem_or_cmem():
    log = (
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
        "ptxas info    : Function properties for k\n"
        "ptxas         .     16 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads\n"
        "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 8 bytes cmem[2]\n"
        "ptxas info    : Function properties for helper\n"
        "ptxas         .     32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    )
    (k,) = nvrtc.parse_ptxas_report(log)
    assert k == nvrtc.KernelResources("k", 40, 4, 8, 16, 2048, 8)


def test_instructions_parser():
    text = (
        "        /*0070*/                   LDGSTS.E.BYPASS.LTC128B.128 [R2], [R4.64] ;\n"
        "        /*00b0*/              @!P0 EXIT ;\n"
        "        /*00c0*/               @P1 LDG.E.128 R4, desc[UR4][R2.64] ;\n"
        "        /*0140*/                   NOP;\n"
        "        /*0044*/ \t.dword\tcp\n"
        ".L_x_1:\n"
    )
    assert sass.instructions(text) == ["LDGSTS.E.BYPASS.LTC128B.128", "EXIT", "LDG.E.128", "NOP"]


def _sass(source: str, arch: str) -> list[str]:
    if sass.find_nvdisasm() is None:
        pytest.skip("nvdisasm not found")
    return sass.instructions(sass.disassemble(nvrtc.compile_cuda(source, arch=arch).cubin))


def test_cp_async_becomes_ldgsts():
    ops = _sass(CP_ASYNC_KERNEL, "sm_80")
    assert any(op.startswith("LDGSTS") for op in ops), ops
    assert any(op.startswith("BAR.SYNC") for op in ops), ops


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_float4_load_is_128_bit(arch):
    ops = _sass(FLOAT4_KERNEL, arch)
    assert any(op.startswith("LDG.E.128") for op in ops), ops
    assert any(op.startswith("STG.E.128") for op in ops), ops


def test_disassemble_garbage_raises():
    if sass.find_nvdisasm() is None:
        pytest.skip("nvdisasm not found")
    with pytest.raises(TesseraError, match="nvdisasm failed"):
        sass.disassemble(b"not a cubin")


# ---- CUDA 12 and CUDA 13 -----------------------------------------------------------------------------

def _fake_nvidia(root, layout: str) -> None:
    """A `nvidia` namespace package laid out as the CUDA 12 wheels (nvidia/cuda_runtime/include) or
    the CUDA 13 ones (nvidia/cu13/include) lay out the headers."""
    include = root / "nvidia" / ("cuda_runtime" if layout == "cu12" else "cu13") / "include"
    include.mkdir(parents=True)
    (include / "cuda_fp16.h").write_text("// fake\n")


@pytest.mark.parametrize(("layout", "major"), [("cu12", 12), ("cu13", 13)])
def test_the_headers_of_either_cuda_major_version_are_found(layout: str, major: int, tmp_path, monkeypatch) -> None:
    import importlib.util
    import sys

    _fake_nvidia(tmp_path, layout)
    for name in [m for m in sys.modules if m == "nvidia" or m.startswith("nvidia.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: real(name, *a))
    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: (major, 0))
    nvrtc.cuda_include_dirs.cache_clear()
    try:
        dirs = nvrtc.cuda_include_dirs()
    finally:
        nvrtc.cuda_include_dirs.cache_clear()
    want = tmp_path / "nvidia" / ("cuda_runtime" if layout == "cu12" else f"cu{major}") / "include"
    assert str(want.resolve()) in dirs


def test_the_versions_in_use_are_detected() -> None:
    major, minor = nvrtc.nvrtc_version()
    assert major in (12, 13) and minor >= 0
    assert nvrtc.bindings_version()[0] in (12, 13)
    archs = nvrtc.supported_archs()
    assert 80 in archs and 90 in archs and archs == tuple(sorted(archs))
    assert nvrtc.cuda_include_dirs(), "the CUDA headers of the installed NVRTC are found"


def test_a_missing_nvrtc_library_names_what_to_install(monkeypatch) -> None:
    def missing(*args):
        raise RuntimeError('Failure finding "libnvrtc.so.13 or libnvrtc.so.12"\n')

    missing.__name__ = "nvrtcVersion"
    with pytest.raises(TesseraError, match=r'NVRTC is unavailable: Failure finding .*; pip install "tessera-tsr\[cu12\]"'):
        nvrtc._call(missing)


def test_sm_100_compiles_where_nvrtc_knows_it_and_falls_back_to_ptx_where_not() -> None:
    r = nvrtc.compile_cuda(TWO_KERNELS, arch="sm_100")
    if 100 in nvrtc.supported_archs():
        assert r.arch == "sm_100" and r.cubin is not None
    else:
        assert r.arch.startswith("compute_") and "cannot generate code for sm_100" in r.log
