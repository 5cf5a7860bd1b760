"""f32 division in whole-fragment statements (templates/device/fdiv.cuh): the GPU's inline
division is IEEE division (the host runs its algorithm with rcp.approx modelled at its worst
against `a / b`), fragment statements print it and compile with no call, and random statements
that divide operands of every float class agree in bits with NumPy on the CPU backend."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import tessera
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.cuda.sass import disassemble, find_nvdisasm
from tessera.runtime.host.recipe import find_cxx
from tessera.transpile.driver import compile_source, load_source
from tests.conftest import ROOT
from tests.language.tensor_cores.fdiv_gen import Gen, model, operands, same_bits

HERE = ROOT / "tests" / "language" / "tensor_cores"


def run_model(tmp_path: object, seed: int, count: int) -> str:
    exe = f"{tmp_path}/fdiv_model"
    subprocess.run([*find_cxx(), "-std=c++17", "-O2", "-ffp-contract=off", "-frounding-math", "-o", exe,
                    str(HERE / "fdiv_model.cpp")], check=True, capture_output=True, text=True)
    proc = subprocess.run([exe, str(seed), str(count)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return proc.stdout


def test_the_gpu_division_is_ieee_division(tmp_path: object) -> None:
    # Every special class against every other, then 30,000 cases of each family (random bits,
    # quotients next to a midpoint or a float, divisors of all-ones significands, subnormal and
    # overflowing results, subnormal ties), each with five models of the reciprocal: 1.5 million.
    # (Without the last correction of tsr_fdiv_core, 0x1p-149 / 0x1.fffffep-126 is one ulp off.)
    out = run_model(tmp_path, 20261127, 30_000)
    assert re.fullmatch(r"cases \d+ mismatches 0\n", out), out


# FlashAttention-2 with head dim 128 on 8 warps (bench/README's attention configuration), causal,
# its rescaling of O written as a division inside the K/V loop, and its normalization at the end.
def _attention(divide: bool) -> str:
    text = load_source(str(ROOT / "samples" / "flash_attention.tsr")).text
    for a, b in (("HD: const i32 = 64", "HD: const i32 = 128"), ("BM: const i32 = 64", "BM: const i32 = 128"),
                 ("NT: const i32 = 128", "NT: const i32 = 256"), ("causal: const i32 = 0", "causal: const i32 = 1")):
        text = text.replace(a, b)
    if divide:
        old = ("        alpha[:] = exp2(m - m_new)\n        l[:] = l * alpha + tsum(S, axis=1)\n"
               "        Of[:] = Of * alpha[:, None]\n")
        assert old in text
        text = text.replace(old, "        alpha[:] = exp2(m_new - m)\n        l[:] = l * exp2(m - m_new) + tsum(S, axis=1)\n"
                                 "        Of[:] = Of / alpha[:, None]\n")
        end = "    alpha[:] = 1.0 / l\n    Of[:] = Of * alpha[:, None]\n"
        assert end in text
        text = text.replace(end, "    Of[:] = Of / l[:, None]\n")
    return text


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_a_dividing_fragment_statement_costs_no_call_and_few_registers(arch: str) -> None:
    # NVCC's `/` called a slow-path subroutine per element: 248 (sm_80) and 246 (sm_90) registers
    # against 209 and 226 for the same kernel written with multiplications; tsr_fdiv: 216 and 219.
    regs = {}
    for divide in (False, True):
        result = compile_source(SourceFile("fa.tsr", _attention(divide)), CompileOptions(arch=arch))
        assert ("tsr_fdiv(Of[tsr_e], alpha[tsr_q])" in result.cuda) == divide
        nv = compile_cuda(result.cuda, arch=arch)
        res = [nv.kernel(k.c_name) for k in result.kernels]
        assert all(r.spill_stores == 0 and r.spill_loads == 0 for r in res), res
        regs[divide] = max(r.registers for r in res)
        if divide and find_nvdisasm() is not None:
            sass = disassemble(nv.cubin)
            # (NVCC's `/`: FCHK, then CALL.REL.NOINC `$__internal_0_$__cuda_sm3x_div_rn_noftz_f32_slowpath`)
            assert "FCHK" not in sass and "div_rn" not in sass and "RET" not in sass
    assert regs[True] <= regs[False] + 16, regs


def run_generated(seed: int, count: int = 6, check_bounds: bool = False) -> None:
    src, steps = Gen(seed).program(count)
    rng = np.random.default_rng(seed)
    m, n = 128, 32
    x, z, c = operands(rng, (m, n)), operands(rng, (m, n)), operands(rng, (m,))
    s = float(operands(rng, (1,))[0])
    y, r = np.zeros((m, n), np.float32), np.zeros(m, np.float32)
    mod = tessera.compile(src, backend="cpu", check_bounds=check_bounds, path=f"fdiv{seed}.tsr")
    mod.gen(x, z, c, y, r, s, 1, grid=(2,))
    want_y, want_r = model(steps, x, z, c, s)
    for got, want in ((y, want_y), (r, want_r)):
        bad = same_bits(got, want)
        assert not bad.any(), f"{src}\nat {np.argwhere(bad)[:5].tolist()}: got {got[bad][:5]}, want {want[bad][:5]}"


@pytest.mark.parametrize("seed", range(8))
def test_generated_division_statements_match_numpy_in_bits(seed: int) -> None:
    run_generated(seed, check_bounds=seed % 4 == 3)


def test_generated_division_statements_print_tsr_fdiv() -> None:
    src, _ = Gen(5).program(6)
    cuda = compile_source(SourceFile("g.tsr", src)).cuda
    assert "Device header sections: core, fdiv," in cuda and "tsr_fdiv(A[tsr_e]" in cuda


def test_a_row_vector_statement_keeps_cudas_division() -> None:
    # A row vector's few slots: NVCC's `/` with its slow-path call costs fewer registers there than
    # the inlined slow paths (a 64 x 128 causal attention kernel at 255 registers spilled 4 bytes
    # on sm_90 with tsr_fdiv in `alpha[:] = 1.0 / l`: test_frag_device_functions.py).
    cuda = compile_source(load_source(str(ROOT / "samples" / "flash_attention.tsr"))).cuda
    assert "alpha[tsr_q] = 1.0f / l[tsr_q];" in cuda and "tsr_fdiv" not in cuda and "fdiv.cuh" not in cuda
