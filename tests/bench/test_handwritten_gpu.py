"""The hand-written kernels that bench/vs_handwritten.py compares Tessera's with compute what they
say (on a GPU: they are inline PTX, which the CPU backend does not run). Without a GPU, NVRTC
compiles them for sm_80 and sm_90 (the wgmma GEMMs for sm_90a) with no spills, which the benchmark's figures
rely on."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tests.conftest import ROOT

FLASH = ROOT / "bench" / "handwritten" / "flash_attn_fwd.cu"
WGMMA_GEMM = ROOT / "bench" / "handwritten" / "hgemm_wgmma.cu"


def _smem(d: int) -> int:
    return 5 * 64 * (d + 8) * 2  # Smem<D>: the Q block and 2 stages of K and V, rows padded by 8 halves


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_flash_attention_by_hand_compiles_without_spills(arch: str) -> None:
    from tessera.runtime.cuda import nvrtc

    got = nvrtc.compile_cuda(FLASH.read_text(), name="flash_attn_fwd.cu", arch=arch)
    for name in ("flash_fwd_d64", "flash_fwd_d128"):
        k = got.kernel(name)
        assert k.spill_stores == 0 and k.spill_loads == 0 and k.stack_bytes == 0, got.log
    assert not got.warnings, got.warnings


@pytest.mark.parametrize("name,copies", [("hgemm_wgmma", "LDGSTS"), ("hgemm_wgmma_tma", "UTMALDG")])
def test_the_wgmma_gemm_by_hand_compiles_for_sm_90a_with_hgmma(name: str, copies: str) -> None:
    """The cp.async twin and the TMA twin (bulk tensor copies on mbarriers, no LDGSTS)."""
    from tessera.runtime.cuda import nvrtc, sass

    if sass.find_nvdisasm() is None:
        pytest.skip("nvdisasm not found")
    got = nvrtc.compile_cuda((WGMMA_GEMM.parent / f"{name}.cu").read_text(), name=f"{name}.cu", arch="sm_90a")
    k = got.kernel(name)
    assert k.spill_stores == 0 and k.spill_loads == 0 and k.stack_bytes == 0, got.log
    assert not got.warnings, got.warnings
    assert got.cubin is not None
    code = sass.function_sass(sass.disassemble(got.cubin), name)
    assert sass.main_loop(code, "HGMMA").count("HGMMA") == 2  # two k16 steps of m64n128k16 per warpgroup
    assert copies in code and ("LDGSTS" not in code or copies == "LDGSTS")


def _reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal: bool) -> np.ndarray:
    s = np.einsum("bnd,bmd->bnm", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        n = q.shape[1]
        s = np.where(np.arange(n)[None, :] > np.arange(n)[:, None], -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("bnm,bmd->bnd", p / p.sum(axis=-1, keepdims=True), v.astype(np.float64))


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_by_hand_matches_numpy(d: int, causal: bool) -> None:
    from tessera.runtime.cuda import driver, nvrtc

    drv = driver._driver()
    dev = driver.device()
    check = driver._check
    image = nvrtc.compile_cuda(FLASH.read_text(), name="flash_attn_fwd.cu", arch=dev.arch).cubin
    module = check(drv.cuModuleLoadData(image), "cuModuleLoadData")
    f = check(drv.cuModuleGetFunction(module, f"flash_fwd_d{d}".encode()), "cuModuleGetFunction")
    smem = _smem(d)
    check(drv.cuFuncSetAttribute(f, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem),
          "cuFuncSetAttribute")
    rng = np.random.default_rng(d + causal)
    bh, n = 3, 200  # a ragged sequence: the last block of 64 is partly outside
    q, k, v = (rng.standard_normal((bh, n, d)).astype(np.float16) for _ in range(3))
    out = np.zeros_like(q)
    pointers = []
    try:
        for a in (q, k, v, out):
            dptr = check(drv.cuMemAlloc(a.nbytes), "cuMemAlloc")
            pointers.append(dptr)
            check(drv.cuMemcpyHtoD(dptr, a.ctypes.data, a.nbytes), "cuMemcpyHtoD")
        scale = 1.0 / np.sqrt(d)
        values = [ctypes.c_uint64(int(p)) for p in pointers] + [ctypes.c_int(n), ctypes.c_float(scale),
                                                                ctypes.c_int(int(causal))]
        argv = (ctypes.c_void_p * len(values))(*(ctypes.addressof(x) for x in values))
        check(drv.cuLaunchKernel(f, (n + 63) // 64, bh, 1, 128, 1, 1, smem, 0, ctypes.addressof(argv), 0),
              "cuLaunchKernel")
        check(drv.cuCtxSynchronize(), "kernel execution")
        check(drv.cuMemcpyDtoH(out.ctypes.data, pointers[3], out.nbytes), "cuMemcpyDtoH")
    finally:
        for dptr in pointers:
            drv.cuMemFree(dptr)
        drv.cuModuleUnload(module)
    np.testing.assert_allclose(out.astype(np.float64), _reference(q, k, v, scale, causal), atol=2e-2, rtol=2e-2)
