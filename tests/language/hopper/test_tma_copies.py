"""Bulk tensor copies on sm_90a (spec section 16) through the CPU backend's emulation: the samples
that the tensor memory accelerator feeds run their aligned variant with it and give NumPy's results
and sm_90's; a seeded generator of pipelined copy programs (2-D and 3-D tensors, boxes partly or
wholly outside the tensor, pipelines run once, repeatedly inside a loop and under a condition)
against a NumPy model of the program, and against the same program on sm_90 (cp.async); the race
detector reports a read of a stage whose barrier has not completed (a wait removed from the emitted
C); the SASS of the samples for sm_90a has UTMALDG and SYNCS and no LDGSTS (with HGMMA in the GEMM and
attention samples' warpgroup MMA kernels), no spills or warnings.

`python -m tests.language.hopper.test_tma_copies N` runs the generator longer."""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass

import numpy as np
import pytest

import tessera
from samples.runner import CASES
from tessera.base.errors import LaunchError
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.cuda.sass import disassemble, find_nvdisasm, function_sass
from tessera.transpile.driver import compile_source, load_source
from tests.conftest import ROOT, sample_of

pytestmark = pytest.mark.usefixtures("shared_cache")

TMA_TILING = {"BM": 64, "BN": 64, "BK": 32, "stages": 3, "NT": 64}  # 64 tiles: mma.sync, so bulk copies
TMA_SAMPLES = ("tc_gemm_f16", "flash_attention", "gemm_epilogue", "tc_gemm_i8", "tc_gemm_bf16_bias_relu")


def test_a_gemm_with_aligned_arrays_runs_its_bulk_copies_and_matches(launched) -> None:
    src = (ROOT / "samples" / "tc_gemm_f16.tsr").read_text()
    rng = np.random.default_rng(5)
    M, N, K = 200, 144, 96  # edges in M and N: boxes partly outside A and B read zeros
    A = rng.integers(-3, 4, (M, K)).astype(np.float16)
    B = rng.integers(-3, 4, (K, N)).astype(np.float16)
    out = {}
    for arch in ("sm_90", "sm_90a"):
        C = np.zeros((M, N), np.float32)
        mod = tessera.compile(src, backend="cpu", arch=arch)
        mod.tc_gemm_f16(A, B, C, **TMA_TILING, grid=((N + 63) // 64, (M + 63) // 64))
        out[arch] = C
    assert launched[-1].endswith("_a16")
    assert np.array_equal(out["sm_90a"], A.astype(np.float32) @ B.astype(np.float32))
    assert np.array_equal(out["sm_90a"], out["sm_90"])


@pytest.mark.parametrize("name", ["flash_attention", "gemm_epilogue", "tc_gemm_bf16_bias_relu", "tc_gemm_i8"])
def test_the_samples_that_use_bulk_copies_match_numpy_and_sm_90(name: str) -> None:
    case = CASES[name]()
    results = {}
    for arch in ("sm_90", "sm_90a"):
        args = case.make(np.random.default_rng(11))
        case.launch(tessera.load(sample_of(name), backend="cpu", arch=arch)[name], args)
        results[arch] = args
    want = case.expect(case.make(np.random.default_rng(11)))
    for p, w in want.items():
        assert np.allclose(results["sm_90a"][p].astype(np.float64), w.astype(np.float64), rtol=case.rtol, atol=case.atol)
        assert np.array_equal(results["sm_90a"][p], results["sm_90"][p])


def test_the_samples_machine_code_for_sm_90a() -> None:
    """Each aligned kernel of the samples moves its copies with the TMA: with mma.sync (the f16 GEMM
    at 64 tiles, not a whole warpgroup) and with warpgroup MMAs, whose swizzled operands the TMA
    writes (the GEMM and attention samples at their defaults: UTMALDG, SYNCS and HGMMA in one kernel)."""
    for name, variants in [("tc_gemm_f16", {"tc_gemm_f16": TMA_TILING}), *((n, None) for n in TMA_SAMPLES)]:
        result = compile_source(load_source(str(ROOT / "samples" / f"{name}.tsr")), CompileOptions(arch="sm_90a"),
                                variants=variants)
        nv = compile_cuda(result.cuda, name=f"{name}.cu", arch="sm_90a")
        assert nv.warnings == (), (name, nv.warnings)
        bulk = [k for k in result.kernels if k.tensor_maps]
        assert bulk and all(k.aligned for k in bulk) and len(bulk) == len(result.kernels) // 2, name
        if variants is not None:
            assert "wgmma.mma_async" not in result.cuda
        else:
            assert "wgmma.mma_async" in result.cuda, name
            assert all(mode for k in bulk for _, _, mode in k.tensor_maps), name  # every box swizzled
        text = disassemble(nv.cubin) if find_nvdisasm() is not None else None
        for k in result.kernels:
            res = nv.kernel(k.c_name)
            assert res.spill_stores == 0 and res.spill_loads == 0, (k.c_name, res)
            if text is not None and k.tensor_maps:
                sass = function_sass(text, k.c_name)
                assert "UTMALDG" in sass and "SYNCS" in sass and "LDGSTS" not in sass, k.c_name
                if variants is None and name in ("tc_gemm_f16", "flash_attention"):
                    assert "HGMMA" in sass and "HMMA" not in sass, k.c_name


def test_info_and_the_verifier_know_the_bulk_copies(tmp_path) -> None:
    import dataclasses
    import subprocess

    from tessera.base.errors import SourceFile
    from tessera.transpile.lir import nodes as L
    from tessera.transpile.lir.verify import VerifyError, verify
    from tessera.transpile.lir.visit import map_body

    p = subprocess.run([sys.executable, "-m", "tessera", "samples/tc_gemm_f16.tsr", "--arch", "sm_90a", "--info",
                        "-D", "BM=64", "-D", "BN=64", "-D", "NT=64", "-o", str(tmp_path / "g.cu")],
                       cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "    bulk tensor copies (TMA) of A: box 64x32, a tensor map built at launch\n" in p.stdout
    module = compile_source(SourceFile("g.tsr", (ROOT / "samples" / "tc_gemm_f16.tsr").read_text()),
                            CompileOptions(arch="sm_90a"), variants={"tc_gemm_f16": TMA_TILING},
                            stop_after="plan-copies").module
    generic = module.functions[0]
    assert not generic.aligned
    stale = map_body(generic.body, lambda s: dataclasses.replace(s, tma=dataclasses.replace(s.tma, active=True))
                     if isinstance(s, L.Copy) and s.tma is not None else s)
    with pytest.raises(VerifyError, match="bulk tensor copy active"):
        verify("plan-copies", dataclasses.replace(module, functions=(dataclasses.replace(generic, body=stale),
                                                                     *module.functions[1:])))


# ---- the race detector: a stage read before its barrier completed -----------------------------------

PIPE = """\
@kernel tile[(64,)]
def k(X: f32[R, C], out: mut f32[R, 32]):
    S = tshared.alloc(f32[16, 32])
    acc = tregs(f32[8], 0.0)
    t = tile_linear_id()
    r0 = group_id(0) * 16
    for c0 in tpipeline(0, C, 32, stages=2):
        tcopy_async(S, X[r0:r0 + 16, c0:c0 + 32])
        for e in static_range(8):
            acc[e] += S[(t + e * 64) // 32, (t + e * 64) % 32]
    for e in static_range(8):
        if r0 + (t + e * 64) // 32 < R:
            out[r0 + (t + e * 64) // 32, (t + e * 64) % 32] = acc[e]
"""


def _pipe_args() -> tuple[np.ndarray, np.ndarray]:
    X = np.arange(40 * 96, dtype=np.float32).reshape(40, 96) % 13
    return X, np.zeros((40, 32), np.float32)


def test_the_pipe_runs_its_bulk_copies(launched) -> None:
    X, out = _pipe_args()
    tessera.compile(PIPE, backend="cpu", arch="sm_90a", check_bounds=True).k(X, out, grid=3)
    assert launched == ["k_a16"]
    assert np.array_equal(out, X.reshape(40, 3, 32).sum(1))


def test_a_missing_wait_is_reported_with_its_line(dropped_loop_wait) -> None:
    X, out = _pipe_args()
    mod = tessera.compile(PIPE + "\n", backend="cpu", arch="sm_90a", check_bounds=True)
    with pytest.raises(LaunchError, match=r"tile \d+ reads it at line 10 while the asynchronous copy .* line 8"):
        mod.k(X, out, grid=3)
    assert dropped_loop_wait


# ---- the generator ---------------------------------------------------------------------------------------

@dataclass
class Program:
    source: str
    dtype: str
    shape: tuple[int, ...]     # the tensor's (at launch)
    box: tuple[int, int]       # the shared array's
    lead: tuple[int, ...]      # 3-D: the index of the first dimension
    offset: tuple[int, int]    # the view's start before the loop's step (rows, columns)
    step: int                  # columns per iteration
    trips: int
    stages: int
    repeat: int                # the pipeline runs inside `for rep in range(repeat)`
    flag: int                  # and under `if flag > 0`


_TYPES = {"f32": (np.float32, 4), "f16": (np.float16, 2), "i32": (np.int32, 4), "f64": (np.float64, 8)}


def generate(rng: random.Random) -> Program:
    dtype = rng.choice(list(_TYPES))
    size = _TYPES[dtype][1]
    cols = rng.choice([x for x in (4, 8, 16, 32, 64) if x * size % 16 == 0])
    rows = rng.choice([r for r in (1, 2, 4, 8, 16) if r * cols * size % 128 == 0] or [128 // (cols * size) or 1])
    three = rng.random() < 0.4
    R = rng.randint(1, 40)
    C = 16 * rng.randint(1, 6)
    shape = (rng.randint(1, 3), R, C) if three else (R, C)
    lead = (rng.randint(-1, shape[0]),) if three else ()
    offset = (rng.randint(-rows - 2, R + 1), rng.randint(-cols - 2, 8))
    step = rng.choice([cols, cols // 2 or 1, 16])
    trips = rng.randint(0, 5)
    stages = rng.randint(1, 4)
    repeat = rng.randint(1, 2)
    flag = rng.choice([1, 1, 0])
    nt = 64
    per = -(-rows * cols // nt)
    dims = "Z, R, C" if three else "R, C"
    lead_text = "z, " if three else ""
    source = f"""\
@kernel tile[({nt},)]
def k(X: {dtype}[{dims}], out: mut f32[{nt * per}], z: i32, r0: i32, c0: i32, flag: i32):
    S = tshared.alloc({dtype}[{rows}, {cols}])
    acc = tregs(f32[{per}], 0.0)
    t = tile_linear_id()
    for rep in range({repeat}):
        if flag > 0:
            for j in tpipeline(0, {trips}, 1, stages={stages}):
                tcopy_async(S, X[{lead_text}r0:r0 + {rows}, c0 + j * {step}:c0 + j * {step} + {cols}])
                for e in static_range({per}):
                    if t + e * {nt} < {rows * cols}:
                        acc[e] += f32(S[(t + e * {nt}) // {cols}, (t + e * {nt}) % {cols}]) * f32(j + 1 + rep)
    for e in static_range({per}):
        out[t + e * {nt}] = acc[e]
"""
    return Program(source, dtype, shape, (rows, cols), lead, offset, step, trips, stages, repeat, flag)


def inputs(p: Program, rng: random.Random) -> np.ndarray:
    np_type = _TYPES[p.dtype][0]
    return np.array([rng.randint(-4, 4) for _ in range(int(np.prod(p.shape)))], dtype=np_type).reshape(p.shape)


def model(p: Program, X: np.ndarray) -> np.ndarray:
    """What the program computes: each iteration's box of X (zero outside), weighted, summed per tile."""
    rows, cols = p.box
    nt = 64
    per = -(-rows * cols // nt)
    out = np.zeros(nt * per, np.float64)
    plane = None
    if len(p.shape) == 3:
        plane = X[p.lead[0]] if 0 <= p.lead[0] < p.shape[0] else np.zeros(p.shape[1:], X.dtype)
    else:
        plane = X
    if p.flag <= 0:
        return out.astype(np.float32)
    for rep in range(p.repeat):
        for j in range(p.trips):
            r0, c0 = p.offset[0], p.offset[1] + j * p.step
            box = np.zeros((rows, cols), np.float64)
            for a in range(rows):
                for b in range(cols):
                    r, c = r0 + a, c0 + b
                    if 0 <= r < plane.shape[0] and 0 <= c < plane.shape[1]:
                        box[a, b] = float(plane[r, c])
            out[: rows * cols] += box.reshape(-1) * (j + 1 + rep)
    return out.astype(np.float32)


def run(p: Program, X: np.ndarray, arch: str, launched: list[str] | None = None) -> np.ndarray:
    rows, cols = p.box
    out = np.zeros(64 * -(-rows * cols // 64), np.float32)
    mod = tessera.compile(p.source, backend="cpu", arch=arch)
    lead = p.lead[0] if p.lead else 0
    mod.k(X, out, lead, p.offset[0], p.offset[1], p.flag, grid=1)
    return out


def check(seed: int, count: int, against_sm_90: bool = False) -> tuple[int, list[str]]:
    """Runs `count` programs; (how many moved their copies with the TMA, the failures)."""
    from tessera.runtime.host.library import CpuLibrary

    rng = random.Random(seed)
    failures: list[str] = []
    with_tma = 0
    real = CpuLibrary.launch
    names: list[str] = []

    def spy(self, info, bound, **kw):  # type: ignore[no-untyped-def]
        names.append(info.c_name)
        return real(self, info, bound, **kw)

    CpuLibrary.launch = spy  # type: ignore[method-assign]
    try:
        for n in range(count):
            p = generate(rng)
            X = inputs(p, rng)
            names.clear()
            got = run(p, X, "sm_90a")
            with_tma += names[-1].endswith("_a16") and "tsr_tma_load" in compile_source_text(p)
            want = model(p, X)
            if not np.array_equal(got, want):
                failures.append(f"program {n} (seed {seed}): differs from the model\n{p.source}{p}")
            elif against_sm_90 and not np.array_equal(got, run(p, X, "sm_90")):
                failures.append(f"program {n} (seed {seed}): differs from sm_90\n{p.source}")
    finally:
        CpuLibrary.launch = real  # type: ignore[method-assign]
    return with_tma, failures


def compile_source_text(p: Program) -> str:
    from tessera.base.errors import SourceFile

    return compile_source(SourceFile("g.tsr", p.source), CompileOptions(arch="sm_90a")).cuda


def test_generated_pipelines_match_the_model_and_sm_90() -> None:
    with_tma, failures = check(seed=3030, count=6, against_sm_90=True)
    assert failures == []
    assert with_tma >= 3


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    tma_count, bad = check(seed=int(sys.argv[2]) if len(sys.argv) > 2 else 1, count=n, against_sm_90=True)
    print(f"{n} programs, {tma_count} with bulk tensor copies, {len(bad)} failures")
    for f in bad[:5]:
        print(f)
