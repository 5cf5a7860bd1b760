"""The ported kernels of ports_v3/ through `tesserac` (spec sections 10, 11): each compiles with
NVRTC for sm_80 without warnings or spills (sm_90a too where it uses tensor cores), and malformed
variants of them (a typo, a wrong type, an out-of-range constant, a construct the contract forbids)
each give exit status 1 and one located `file:line:col: error:` with the source line and a caret,
never a traceback or an internal compiler error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.base.options import CompileOptions
from tessera.cli.compile import run
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source, load_source

PORTS = Path(__file__).parent / "ports_v3"
FILES = sorted(PORTS.glob("*.tsr"))
DEFINES = {"transpose": {"T": "f32"}}  # an unrestricted type parameter: emitted for one type


def targets() -> list[tuple[Path, str]]:
    out = [(p, "sm_80") for p in FILES]
    return out + [(p, "sm_90a") for p in FILES if "tfrag(" in p.read_text()]


@pytest.mark.parametrize("path, arch", targets(), ids=lambda v: v.stem if isinstance(v, Path) else v)
def test_ports_compile_with_nvrtc(path: Path, arch: str) -> None:
    result = compile_source(load_source(str(path)), options=CompileOptions(arch=arch), defines=DEFINES.get(path.stem))
    nv = compile_cuda(result.cuda, name=path.name, arch=arch)
    assert nv.warnings == (), nv.warnings
    for k in result.kernels:
        res = nv.kernel(k.c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0, (k.c_name, res)


# (port, text replaced, replacement, line, column, a part of the message)
MALFORMED = [
    ("softmax", "group_max(m)", "group_maxx(m)", 12, 9, "undefined name 'group_maxx'"),
    ("softmax", "m = group_max(m)", "if t < 64:\n        m = group_max(m)", 13, 13, "group_max() must be reached by every tile"),
    ("softmax", "while j < N:", "while 0 <= j < N:", 9, 13, "chained comparisons are not allowed"),
    ("softmax", "y: mut f32[M, N]", "y: f32[M, N]", 21, 9, "declare the parameter as 'y: mut f32[...]'"),
    ("softmax", "tile[(128,)]", "tile[(64, 32)]", 3, 9, "a group has at most 1024 tiles"),
    ("softmax", "inv = 1.0 / s", "inv = 1 / N", 19, 13, "'/' of two integers is not allowed"),
    ("softmax", "m: f32 = -inf", "m: i32 = -inf", 7, 5, "cannot convert f32 to i32 implicitly"),
    ("scan", "w = warp_cumsum(w)", "w = warp_cumsum(w) if lane_id() < 8 else 0.0", 54, 13,
     "warp_cumsum() must be reached by all 32 lanes"),
    ("scan", "totals = tshared.alloc(f32[8])", "if n > 0:\n        totals = tshared.alloc(f32[8])", 43, 18,
     "shared memory can only be allocated at the top level"),
    ("reduce", "atomic_max(out[0], bitcast(m, u32))", "atomic_max(out[0], bitcast(m, u16))", 34, 28,
     "bitcast() keeps the width"),
    ("reduce", "r[:] = x[i:i + 4]", "r[:] = x[i:i + 8]", 10, 9, "'r' has 4 elements but the view of 'x' has 8"),
    ("reduce", "launch_bounds(2)", "launch_bounds(0)", 3, 36, "launch_bounds must be between 1 and 32"),
    ("matmul_leaky", "BK: const i32 = 32", "BK: const i32 = 24", 15, 9, "needs K a multiple of 16, got 24"),
    ("matmul_leaky", "BM: const i32 = 64", "BM: const i32 = 40", 9, 17, "no division of a 40 x 64 fragment"),
    ("matmul_leaky", "tmma(acc, As, Bs)", "tmma(acc, As, Bs)\n        tcommit()", 16, 9,
     "tcommit() inside a tpipeline loop"),
    ("matmul_leaky", "stages=STAGES", "stages=M", 12, 41, "the stages of tpipeline() must be a compile-time constant"),
    ("matmul_leaky", "bias[n0:n0 + BN][None, :]", "bias[n0:n0 + 32][None, :]", 16, 20,
     "this view has the extent 32, but the fragment has 64 columns"),
    ("matmul_leaky", "acc[:] = acc if acc >= 0.0 else acc * slope",
     "acc[:] = acc if acc >= 0.0 else acc * f32(tile_linear_id())", 17, 47, "tile_linear_id() differs between tiles"),
    ("attention", "m_new[:] = max(m, tmax(S, axis=1))", "m_new[:] = max(m, tmax(S, axis=2))", 15, 36,
     "the axis of tmax() must be between 0 and 1"),
    ("attention", "O[:] = O * alpha[:, None]", "O[:] = O * alpha", 19, 16, "broadcast it along the columns"),
    ("attention", "        qk(S, Qf, Ks)\n", "        x = qk(S, Qf, Ks)\n", 45, 13, "call it as a statement"),
    ("attention", "        qk(S, Qf, Ks)\n", "        qk(P, Qf, Ks)\n", 45, 12, "but 'P' holds f16"),
    ("attention", "        P[:] = S\n", "        P[:] = S\n        s = row_index()\n", 52, 13,
     "row_index() is the coordinate of the element"),
    ("attention", "Out: mut f32[N, D]", "Out: mut frag f32[N, D]", 23, 61, "only @device functions take fragments"),
    ("histogram", "h = tshared.alloc(u32[nbins])", "h = tshared.alloc(u32[n])", 5, 27,
     "'n' is a shape symbol, known only at launch"),
    ("dropout", "x *= 0x7feb352d", "x *= 0x7feb352d7feb352d7feb352d", 9, 10, "does not fit in 64 bits"),
    ("layer_norm", "    return acc\n", "    return group_sum(acc)\n", 11, 12, "group_sum() is only allowed in a kernel body"),
    ("vector_add", "vectorize(4)", "vectorize(3)", 15, 32, "the vector width must be a power of two"),
    ("chunk_sum", "shared(40_KiB)", "shared(16_KiB)", 38, 9, "over the kernel's budget of 16384 bytes"),
    ("layernorm_llmc", "    if idx >= N:\n        return\n", "    if lane_id() >= N:\n        return\n", 12, 9,
     "warp_sum() must be reached by all 32 lanes of the warp, but some lanes may have returned"),
    ("w8a16_gemm", "Ws[kk:kk + 16, :])", "Wqs[kk:kk + 16, :])", 21, 13, "operands have different element types"),
]


@pytest.mark.parametrize("case", MALFORMED, ids=lambda c: f"{c[0]}:{c[3]}")
def test_malformed_ports_give_located_errors(case: tuple, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port, old, new, line, col, message = case
    source = (PORTS / f"{port}.tsr").read_text()
    assert source.count(old) >= 1
    path = tmp_path / f"{port}.tsr"
    path.write_text(source.replace(old, new, 1))
    code = run([str(path), "--arch", "sm_80", "-o", str(tmp_path / "out.cu")])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal compiler error" not in err, err
    assert code == 1, err
    first, shown, caret = err.splitlines()[:3]
    assert first.startswith(f"{path}:{line}:{col}: error: ") and message in first, err
    wanted = path.read_text().split("\n")[line - 1]
    assert shown.endswith(wanted.strip()) and shown.split("|")[0].strip() == str(line), err
    assert caret.index("^") == len(shown) - len(wanted) + col - 1, err
