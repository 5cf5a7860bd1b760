"""The device header sections (transpile/emit/header_parts.py): the table is well formed, each section
compiles with only the sections it declares it requires (NVRTC and the CPU backend's compiler), a
module includes the sections its IR uses and no others, and every program compiles with NVRTC under
every combination of the options that add sections."""

from __future__ import annotations

import subprocess

import pytest

from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.host import build as host_build
from tessera.transpile.driver import compile_source, load_source
from tessera.transpile.emit.header_parts import SECTIONS, closure
from tessera.transpile.render import device_header
from tests.conftest import ROOT, SAMPLES

NAMES = [s.name for s in SECTIONS]
KERNEL = '\nextern "C" __global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n'


def sections_of(cuda: str) -> list[str]:
    line = next(ln for ln in cuda.splitlines() if ln.startswith("// Device header sections: "))
    return line.split(": ", 1)[1].split(", ")


def emitted(body: str, params: str = "y: mut f32[n]", **options: bool) -> str:
    text = "@kernel tile[(64,)]\ndef k(" + params + "):\n" + "".join(f"    {ln}\n" for ln in body.splitlines())
    return compile_source(SourceFile("t.tsr", text), CompileOptions(**options)).cuda


def test_the_table_is_ordered_and_names_existing_files() -> None:
    assert len(set(NAMES)) == len(NAMES) and NAMES[0] == "core"
    for k, s in enumerate(SECTIONS):
        assert set(s.requires) <= set(NAMES[1:k]), f"{s.name} must come after what it requires"
        assert (ROOT / "templates" / s.file).is_file(), s.file
    in_table = {s.file for s in SECTIONS}
    assert {f"device/{p.name}" for p in (ROOT / "templates" / "device").glob("*.cuh")} <= in_table


def test_closure_adds_what_is_required_in_table_order() -> None:
    assert closure(["atomic_bf16", "copy"]) == ("bf16", "race", "atomic_16", "atomic_bf16", "copy")
    assert closure([]) == ()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_each_section_compiles_with_nvrtc_with_what_it_requires(name: str, arch: str) -> None:
    nv = compile_cuda(device_header(closure(["core", name])) + KERNEL, name=f"{name}.cu", arch=arch)
    assert nv.warnings == (), nv.warnings


@pytest.mark.parametrize("name", NAMES)
def test_each_section_compiles_on_the_host_with_what_it_requires(name: str, tmp_path) -> None:
    src = tmp_path / "kernel.cu"
    src.write_text(device_header(closure(["core", name])) + KERNEL)
    stubs = host_build.stub_headers(tmp_path / "stubs")
    cmd = [*host_build.find_cxx(), *host_build.KERNEL_FLAGS, "-I", str(stubs), "-include",
           str(host_build.host_header_path()), "-fsyntax-only", "-x", "c++", str(src)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0 and not p.stderr, p.stderr


def test_a_module_without_f16_or_bf16_does_not_include_their_headers() -> None:
    plain = compile_source(load_source(str(ROOT / "samples" / "sum_reduce.tsr"))).cuda
    assert "cuda_fp16.h" not in plain and "cuda_bf16.h" not in plain and "tsr_round_f16" not in plain
    f16 = emitted("y[0] = f32(h[0])", "h: f16[n], y: mut f32[n]")
    assert "#include <cuda_fp16.h>" in f16 and "cuda_bf16.h" not in f16
    bf16 = emitted("b[0] = bf16(1.5)", "b: mut bf16[n]")
    assert "#include <cuda_bf16.h>" in bf16 and "cuda_fp16.h" not in bf16


@pytest.mark.parametrize(("body", "params", "options", "want"), [
    ("y[0] = 1.0", "y: mut f32[n]", {}, ["core"]),
    ("y[0] = warp_sum(y[0])", "y: mut f32[n]", {}, ["core", "warp_reduce"]),
    ("y[0] = group_max(y[0])", "y: mut f32[n]", {}, ["core", "group_reduce"]),
    ("y[0] = shfl(y[0], 1)", "y: mut f32[n]", {}, ["core"]),
    ("y[0] = warp_cumsum(y[0])", "y: mut f32[n]", {}, ["core", "warp_reduce"]),
    ("y[0] = group_cumsum(y[0])", "y: mut f32[n]", {}, ["core", "group_reduce"]),
    ("y[0] = f32(warp_ballot(y[0])) + shfl_up(y[0], 1)", "y: mut f32[n]", {}, ["core"]),
    ("u[0] = atomic_inc(u[1], 3) + atomic_dec(u[2], 3)", "u: mut u32[n]", {}, ["core"]),
    ("atomic_add(y[0], 1.0)\natomic_max(i[0], 2)", "y: mut f32[n], i: mut i32[n]", {}, ["core"]),
    ("atomic_max(y[0], 1.0, scope=\"group\")", "y: mut f32[n]", {}, ["core", "atomic_cas"]),
    ("atomic_cas(d[0], 0.0, 1.0)", "d: mut f64[n]", {}, ["core", "atomic_cas"]),
    ("atomic_add(h[0], 1.0)", "h: mut f16[n]", {}, ["core", "f16", "atomic_16", "atomic_f16"]),
    ("atomic_exch(b[0], 1.0)", "b: mut bf16[n]", {}, ["core", "bf16", "atomic_16", "atomic_bf16"]),
    ("tassert(y[0] > 0.0, \"m\")", "y: mut f32[n]", {}, ["core"]),
    ("tassert(y[0] > 0.0, \"m\")", "y: mut f32[n]", {"debug": True}, ["core", "assert"]),
    ("y[0] = 1.0", "y: mut f32[n]", {"check_bounds": True}, ["core", "bounds"]),
    ("i[0] = i[1] * 2", "i: mut i32[n]", {"check_bounds": True}, ["core", "bounds", "overflow"]),
    ("i[0] += 1", "i: mut i64[n]", {"check_bounds": True}, ["core", "bounds", "overflow"]),
    ("u[0] = u[1] * 2", "u: mut u32[n]", {"check_bounds": True}, ["core", "bounds"]),
    ("s = tshared.alloc(f32[64])\ns[0] = 1.0", "y: mut f32[n]", {"check_bounds": True}, ["core", "race", "bounds"]),
    ("s = tshared.alloc(f32[64])\ns[0] = 1.0", "y: mut f32[n]", {}, ["core"]),
    ("s = tshared.alloc(f32[64])\ntcopy(s, y[0:64])", "y: mut f32[n]", {}, ["core", "race", "copy"]),
    ("r = tregs(f16[8])\nr[:] = h[0:8]", "h: f16[n]", {}, ["core", "f16", "race", "vec"]),
    ("a = tfrag(f32[32, 32], 1.0)\na[:] = a * 2.0\ntstore(z[0:32, 0:32], a)", "z: mut f32[n, n]", {}, ["core"]),
    ("a = tfrag(f32[32, 32], 1.0)\na[:] = 1.0 / a\ntstore(z[0:32, 0:32], a)", "z: mut f32[n, n]", {}, ["core", "fdiv"]),
    ("a = tfrag(f32[32, 32], 1.0)\na[:] //= 3.0\ntstore(z[0:32, 0:32], a)", "z: mut f32[n, n]", {}, ["core", "fdiv"]),
    ("a = tfrag(f32[32, 32], 1.0)\na[:] /= 3.0\ntstore(z[0:32, 0:32], a)", "z: mut f32[n, n]", {}, ["core", "fdiv"]),
    ("v = tfrag(f32[32], 1.0)\nv[:] = 1.0 / v\ntstore(z[0, 0:32], v)", "z: mut f32[n, n]", {}, ["core"]),
])
def test_a_module_includes_the_sections_its_ir_uses(body: str, params: str, options: dict, want: list[str]) -> None:
    assert sections_of(emitted(body, params, **options)) == want


PROGRAMS = [*SAMPLES, ROOT / "tests" / "programs" / "features.tsr"]


@pytest.mark.parametrize("options", [{"debug": True}, {"check_bounds": True}, {"debug": True, "check_bounds": True}],
                         ids=["debug", "check_bounds", "both"])
@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_every_program_compiles_with_the_sections_of_every_option(path, options: dict) -> None:
    """To PTX: the sections are C front-end matters (test_samples runs ptxas on every sample)."""
    result = compile_source(load_source(str(path)), CompileOptions(**options))
    for arch in ("sm_75", "sm_90"):
        nv = compile_cuda(result.cuda, name=path.stem + ".cu", arch=arch, cubin=False)
        assert nv.warnings == (), nv.warnings


def test_the_feature_program_uses_every_section_but_copy_fdiv_map_mma_vec_and_tma() -> None:
    """(mma, the tensor-core section, is used by the tc_gemm samples: tests/language/tensor_cores/test_tensor_cores.py;
    fdiv, division in fragment statements, by tests/language/tensor_cores/test_fdiv.py;
    wgmma, their sm_90a form, by tests/language/tensor_cores/test_wgmma.py;
    vec, per-tile vector access, by tests/language/vectors/test_vector_access.py; tma, bulk tensor copies, only
    on sm_90a: tests/language/hopper/test_tma_copies.py.)"""
    cuda = compile_source(load_source(str(ROOT / "tests" / "programs" / "features.tsr")), options=CompileOptions(debug=True, check_bounds=True)).cuda
    assert sections_of(cuda) == [n for n in NAMES if n not in ("atomic_f16", "copy", "fdiv", "map", "mma", "vec", "wgmma", "tma")]
